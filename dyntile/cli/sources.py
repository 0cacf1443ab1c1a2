"""Where a subcommand's corpus comes from: a user file, or the embedded stdlib docstrings."""

from __future__ import annotations

import platform

import numpy as np

from dyntile.cli.corpus import Corpus
from dyntile.cli.errors import CLIError
from dyntile.cli.readers import read_corpus
from dyntile.cli.stdlib_docs import stdlib_docstrings, stdlib_root

__all__ = ["load_corpus", "describe_lengths"]


def load_corpus(
    path=None,
    *,
    field: str | None = None,
    pad_id: int | None = None,
    allow_pickle: bool = False,
    limit: int | None = None,
    vocab_size: int = 4096,
    seed: int = 0,
    max_length: int | None = None,
    show_progress: bool = False,
) -> Corpus:
    """The user's file at ``path``, else the stdlib docstrings tokenized word by word.

    ``limit`` keeps the first ``limit`` samples; ``max_length`` truncates explicitly
    (nothing is ever cut otherwise). ``show_progress``: count the files or lines read on stderr.
    """
    if limit is not None and limit < 1:
        raise CLIError(f"--limit should be a positive number of samples, but got {limit}")
    if vocab_size <= 4:
        raise CLIError(f"--vocab-size should be larger than 4 (the special tokens), but got {vocab_size}")
    if max_length is not None and max_length < 1:
        raise CLIError(f"--max-length should be a positive number of tokens, but got {max_length}")
    if path is None:
        texts = stdlib_docstrings(limit=limit, show_progress=show_progress)
        if not texts:
            raise CLIError(f"found no docstrings under {stdlib_root()}")
        name = f"{len(texts)} docstrings of the Python {platform.python_version()} standard library"
        corpus = Corpus.from_texts(texts, name, vocab_size=vocab_size)
    else:
        corpus = read_corpus(
            path,
            field=field,
            pad_id=pad_id,
            allow_pickle=allow_pickle,
            seed=seed,
            show_progress=show_progress,
        )
        if limit is not None and limit < len(corpus):
            seqs = None if corpus.sequences is None else corpus.sequences[:limit]
            corpus = Corpus(corpus.name, corpus.lengths[:limit], corpus.vocab_size, seqs, corpus.seed)
    return corpus if max_length is None else corpus.truncated(max_length)


def corpus_from_args(args) -> Corpus:
    """:func:`load_corpus` with the data options ``dyntile demo`` and ``dyntile plan`` share
    (``--data``, ``--field``, ``--pad-id``, ``--allow-pickle``, ``--limit``,
    ``--vocab-size``, ``--seed``, ``--max-length``, ``--no-progress``)."""
    return load_corpus(
        args.data,
        field=args.field,
        pad_id=args.pad_id,
        allow_pickle=args.allow_pickle,
        limit=args.limit,
        vocab_size=args.vocab_size,
        seed=args.seed,
        max_length=args.max_length,
        show_progress=not args.no_progress,
    )


def describe_lengths(lengths: np.ndarray) -> str:
    """One line of length statistics.

    >>> describe_lengths(np.array([1, 2, 3, 10]))
    'n=4, mean 4.0, median 3, p90 10, p99 10, max 10'
    """
    p50, p90, p99 = (int(np.percentile(lengths, q, method="higher")) for q in (50, 90, 99))
    mean, longest = lengths.mean(), int(lengths.max())
    return f"n={lengths.size}, mean {mean:.1f}, median {p50}, p90 {p90}, p99 {p99}, max {longest}"
