"""The embedded corpus and the word tokenizer, against independent references."""

import ast
import re
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dyntile.cli.corpus import Corpus
from dyntile.cli.stdlib_docs import stdlib_docstrings, stdlib_files, stdlib_root
from dyntile.cli.tokenizer import CLS_ID, SEP_ID, SPECIALS, UNK_ID, WordTokenizer


def test_docstrings_match_ast_walk_of_the_first_files():
    files = []
    for path in stdlib_files():
        files.append(path)
        if len(files) == 15:
            break
    expected = []
    for path in files:
        try:
            tree = ast.parse(path.read_bytes())
        except SyntaxError:
            continue
        nodes = [
            n
            for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        ]
        nodes.sort(key=lambda n: getattr(n, "lineno", 0))  # source order
        expected += [d for d in (ast.get_docstring(n) for n in nodes) if d]
    got = stdlib_docstrings(limit=len(expected))
    assert got == expected


def test_docstrings_deterministic_limited_and_without_tests():
    a, b = stdlib_docstrings(limit=200), stdlib_docstrings(limit=200)
    assert a == b and len(a) == 200 and all(isinstance(d, str) and d for d in a)
    assert stdlib_docstrings(limit=50) == a[:50]
    root = stdlib_root()
    for path in stdlib_files():
        parts = path.relative_to(root).parts
        assert not {"test", "tests", "idle_test", "site-packages"} & set(parts[:-1]), path
        assert not path.name.startswith("test_")


def test_limit_must_be_positive():
    with pytest.raises(ValueError, match="limit"):
        stdlib_docstrings(limit=0)


def _reference_words(text):
    return re.findall(r"\w+|[^\w\s]", text.lower())


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.text(alphabet="abcAB _.,()x\n1", max_size=30), min_size=1, max_size=8),
    st.integers(len(SPECIALS) + 1, 20),
)
def test_tokenizer_against_counter_reference(texts, vocab_size):
    tok = WordTokenizer.fit(texts, vocab_size=vocab_size)
    counts = Counter(w for t in texts for w in _reference_words(t))
    ranked = sorted(counts, key=lambda w: (-counts[w], w))[: vocab_size - len(SPECIALS)]
    assert tok.vocab_size == len(SPECIALS) + len(ranked)
    for t in texts:
        ids = tok.encode(t)
        expected = (
            [CLS_ID]
            + [ranked.index(w) + len(SPECIALS) if w in ranked else UNK_ID for w in _reference_words(t)]
            + [SEP_ID]
        )
        assert ids.dtype == np.int64 and ids.tolist() == expected


def test_tokenizer_rejects_tiny_vocab():
    with pytest.raises(ValueError, match="vocab_size"):
        WordTokenizer.fit(["a b"], vocab_size=len(SPECIALS))


def test_corpus_from_lengths_draws_deterministic_ids_of_the_right_length():
    c = Corpus.from_lengths(np.array([1, 7, 300]), name="x", seed=3)
    assert c.synthetic and len(c) == 3
    for i, n in enumerate([1, 7, 300]):
        s = c.sequence(i)
        assert s.shape == (n,) and s.dtype == np.int64
        assert s.min() >= len(SPECIALS) and s.max() < c.vocab_size
        np.testing.assert_array_equal(s, Corpus.from_lengths([1, 7, 300], name="x", seed=3).sequence(i))
    assert not np.array_equal(c.sequence(2), Corpus.from_lengths([1, 7, 300], name="x", seed=4).sequence(2))


def test_corpus_truncation_is_explicit():
    c = Corpus.from_sequences([np.arange(10), np.arange(3)], name="x").truncated(4)
    assert c.lengths.tolist() == [4, 3] and c.sequence(0).tolist() == [0, 1, 2, 3]
