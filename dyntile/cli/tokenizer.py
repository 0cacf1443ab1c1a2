"""A word-level tokenizer whose vocabulary is built from the corpus itself (no download).

Words are lower-cased runs of letters/digits/underscores; every other non-space
character is a token of its own. The ``vocab_size - len(SPECIALS)`` most frequent
words get ids (ties broken alphabetically, so the vocabulary is deterministic);
everything else maps to ``[UNK]``. Each encoded text is ``[CLS] ... [SEP]``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["WordTokenizer", "SPECIALS", "PAD_ID"]

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")
PAD_ID, UNK_ID, CLS_ID, SEP_ID = range(len(SPECIALS))
_WORD = re.compile(r"\w+|[^\w\s]")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


@dataclass(frozen=True)
class WordTokenizer:
    """Word-level tokenizer; ``vocab`` maps word -> id, ids below 4 are ``SPECIALS``.

    >>> tok = WordTokenizer.fit(["Return the sum.", "Return a list."], vocab_size=8)
    >>> tok.vocab["."], tok.vocab["return"]        # most frequent first
    (4, 5)
    >>> tok.encode("return the list").tolist()    # [CLS] return [UNK] list [SEP]
    [2, 5, 1, 7, 3]
    """

    vocab: dict[str, int] = field(repr=False)

    @classmethod
    def fit(cls, texts: Iterable[str], vocab_size: int = 8192) -> WordTokenizer:
        """Build the vocabulary from ``texts``: the most frequent words get the low ids."""
        if vocab_size <= len(SPECIALS):
            raise ValueError(
                f"vocab_size should be larger than {len(SPECIALS)} (the special tokens), but got {vocab_size}"
            )
        counts = Counter(w for text in texts for w in _words(text))
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: vocab_size - len(SPECIALS)]
        vocab = {w: i for i, w in enumerate(SPECIALS)}
        vocab.update((w, i + len(SPECIALS)) for i, (w, _) in enumerate(ranked))
        return cls(vocab)

    @property
    def vocab_size(self) -> int:
        """Number of ids (specials included): the embedding table's row count."""
        return len(self.vocab)

    def encode(self, text: str) -> np.ndarray:
        """``text`` -> int64 ids ``(n_words + 2,)`` framed by ``[CLS]`` and ``[SEP]``."""
        get = self.vocab.get
        ids = [CLS_ID, *(get(w, UNK_ID) for w in _words(text)), SEP_ID]
        return np.asarray(ids, dtype=np.int64)

    def encode_all(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Encode every text; a list of 1-D int64 arrays of varying length."""
        return [self.encode(t) for t in texts]
