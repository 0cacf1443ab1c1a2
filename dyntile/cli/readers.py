"""Read a user's lengths or token sequences from a file into a :class:`Corpus`.

Accepted files (by extension):

* ``.txt``   -- one length per line (blank lines ignored);
* ``.npy``   -- 1-D integer lengths; a 2-D integer array (one row of token ids per
  sample, trailing ``pad_id`` values stripped when given); or a 1-D object array of
  id sequences (needs ``allow_pickle``: loading a pickle can run code);
* ``.npz``   -- ``ids`` (all sequences joined) with ``offsets`` (``N + 1``), or ``lengths``
  (or a single unnamed 1-D array of lengths, as ``np.savez(f, lengths)`` writes);
* ``.jsonl`` -- one JSON object per line; ``field`` holds a list of token ids or a text.

Text files are read as UTF-8, a byte order mark at the start ignored. Every error names
the file and, where there is one, the line or sample.
"""

from __future__ import annotations

import json
import pickle
import sys
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import numpy as np

from dyntile.cli.corpus import Corpus
from dyntile.cli.errors import CLIError
from dyntile.cli.progress import progress
from dyntile.dtypes import as_int64

__all__ = ["read_corpus", "SUFFIXES"]

SUFFIXES = (".txt", ".npy", ".npz", ".jsonl")


def read_corpus(
    path,
    *,
    field: str | None = None,
    pad_id: int | None = None,
    allow_pickle: bool = False,
    seed: int = 0,
    show_progress: bool = False,
) -> Corpus:
    """Read ``path`` (see the module doc for formats) into a :class:`Corpus`; ``show_progress``:
    count the lines of a text file read on stderr (:func:`~dyntile.cli.progress.progress`).

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "lengths.txt")
    >>> _ = open(p, "w").write("3\\n17\\n5\\n")
    >>> read_corpus(p).lengths.tolist()
    [3, 17, 5]
    """
    path = Path(path)
    if path.suffix not in SUFFIXES:
        raise CLIError(
            f"cannot read {str(path)!r}: unknown extension {path.suffix or '(none)'!r}; "
            f"expected one of {', '.join(SUFFIXES)}"
        )
    if not path.is_file():
        raise CLIError(f"cannot read {str(path)!r}: no such file")
    name = path.name
    if path.suffix == ".jsonl" and field is None:
        raise CLIError(f"{name}: a .jsonl file needs --field NAME (the key that holds token ids or text)")
    try:
        if path.suffix == ".txt":
            return _txt(path, seed, show_progress)
        if path.suffix == ".jsonl":
            return _jsonl(path, field, show_progress)
        if path.suffix == ".npz":
            return _npz(path, seed)
        return _npy(path, pad_id, allow_pickle, seed)
    except (OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"cannot read {str(path)!r}: {exc}") from None


#: a UTF-8 byte order mark (as Windows editors write) is read as no character
_ENCODING = "utf-8-sig"


@contextmanager
def _numbered_lines(path: Path, show: bool) -> Iterator[Iterator[tuple[int, str]]]:
    """``(line number, line)`` of every non-blank line of ``path``, with a progress count
    that is closed on an error too, so that the count line comes before the error."""
    with (
        path.open(encoding=_ENCODING) as fh,
        closing(progress(fh, None, f"reading {path.name}", show)) as read,
    ):
        yield ((lineno, line) for lineno, line in enumerate(read, 1) if line.strip())


def _txt(path: Path, seed: int, show: bool) -> Corpus:
    lengths, lines = [], []
    with _numbered_lines(path, show) as numbered:
        for lineno, line in numbered:
            text = line.strip()
            try:
                lengths.append(int(text))
            except ValueError:
                digits = text.lstrip("+-").replace("_", "")
                if digits.isdigit() and len(digits) > sys.get_int_max_str_digits():
                    raise CLIError(
                        f"{path.name}: line {lineno}: a length of {len(digits)} digits; lengths should be "
                        f"below 2**63"
                    ) from None
                raise CLIError(
                    f"{path.name}: line {lineno} is not an integer length: {text[:40]!r}"
                ) from None
            lines.append(lineno)
    return Corpus.from_lengths(lengths, path.name, seed, lines=lines)


def _jsonl(path: Path, field: str, show: bool) -> Corpus:
    values, lines = [], []
    with _numbered_lines(path, show) as numbered:
        for lineno, line in numbered:
            record = _json_line(line, lineno, path)
            if not isinstance(record, dict) or field not in record:
                keys = sorted(record) if isinstance(record, dict) else type(record).__name__
                raise CLIError(f"{path.name}: line {lineno} has no field {field!r} (found {keys})")
            value = record[field]
            if not isinstance(value, (str, list)):
                raise CLIError(
                    f"{path.name}: line {lineno}: field {field!r} should be a list of token ids "
                    f"or a string, but got {type(value).__name__}"
                )
            values.append(value)
            lines.append(lineno)
    if not values:
        raise CLIError(f"{path.name}: no records")
    kinds = {type(v) for v in values}
    if kinds == {str}:
        return Corpus.from_texts(values, path.name)
    if kinds == {list}:
        return Corpus.from_sequences(values, path.name, lines=lines)
    raise CLIError(f"{path.name}: field {field!r} mixes strings and lists; use one kind for every line")


def _json_line(line: str, lineno: int, path: Path):
    """One line of a .jsonl file parsed, or a ``CLIError`` naming the file and the line."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise CLIError(f"{path.name}: line {lineno} is not valid JSON ({exc.msg})") from None
    except RecursionError:  # the parser recurses once per level of nesting
        raise CLIError(
            f"{path.name}: line {lineno} is nested too deeply to read; token ids should be a flat "
            f"list such as [5, 17, 3]"
        ) from None
    except ValueError:  # an integer past Python's int-digits limit
        raise CLIError(
            f"{path.name}: line {lineno} holds a number of more than {sys.get_int_max_str_digits()} "
            f"digits; token ids should be below 2**20"
        ) from None


#: how a zip archive (an .npz) begins: its first entry, or the end record of an empty one
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
#: what a damaged archive raises while it is opened or an entry is read
_DAMAGED = (zipfile.BadZipFile, EOFError, zlib.error, ValueError)


def _npz(path: Path, seed: int) -> Corpus:
    with path.open("rb") as fh:
        head = fh.read(4)
    if head not in _ZIP_MAGIC:  # np.load would take it for a pickle ("allow_pickle=") or fail on EOF
        raise CLIError(
            f"{path.name}: not a NumPy .npz file ({'an empty file' if not head else 'no zip archive'}; "
            f"numpy.savez writes one)"
        )
    try:
        data = np.load(path, allow_pickle=False)
    except _DAMAGED as exc:
        raise CLIError(f"{path.name}: a damaged .npz file, cut short or corrupt ({_reason(exc)})") from None
    with data:
        keys = set(data.files)
        if {"ids", "offsets"} <= keys:
            ids, offsets = _entry(data, "ids", path), _entry(data, "offsets", path)
            if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
                raise CLIError(
                    f"{path.name}: 'ids' should be 1-D integer token ids, but got shape {ids.shape} "
                    f"dtype {ids.dtype}"
                )
            if offsets.dtype.kind not in "iu":  # 5.5 would be cut to 5: a sequence boundary moved
                raise CLIError(
                    f"{path.name}: 'offsets' should be integers (positions in 'ids'), but got dtype "
                    f"{offsets.dtype}"
                )
            try:
                offsets = as_int64(offsets, "offsets")
            except ValueError as exc:
                raise CLIError(f"{path.name}: {exc}") from None
            if (
                offsets.ndim != 1
                or offsets.size < 2
                or offsets[0] != 0
                or offsets[-1] != len(ids)
                or np.any(np.diff(offsets) < 0)
            ):
                raise CLIError(f"{path.name}: 'offsets' should rise from 0 to len(ids)={len(ids)}")
            return Corpus.from_sequences([ids[a:b] for a, b in zip(offsets[:-1], offsets[1:])], path.name)
        if "lengths" in keys:
            return Corpus.from_lengths(_entry(data, "lengths", path), path.name, seed)
        if keys == {"arr_0"}:  # np.savez(f, lengths): one unnamed array
            return Corpus.from_lengths(_entry(data, "arr_0", path), path.name, seed)
    raise CLIError(
        f"{path.name}: expected arrays 'ids' and 'offsets', or 'lengths' (or one unnamed "
        f"array of lengths); found {sorted(keys)}"
    )


def _entry(data, key: str, path: Path) -> np.ndarray:
    """The array ``key`` of an open .npz, or a ``CLIError`` naming the file and the entry."""
    try:
        arr = data[key]
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise CLIError(
                f"{path.name}: array {key!r} holds Python objects; .npz files are read without "
                f"unpickling (--allow-pickle applies to .npy files only): save it as integers"
            ) from None
        raise CLIError(f"{path.name}: array {key!r} is damaged ({_reason(exc)})") from None
    except _DAMAGED as exc:
        raise CLIError(
            f"{path.name}: array {key!r} is damaged, cut short or corrupt ({_reason(exc)})"
        ) from None
    if not isinstance(arr, np.ndarray):  # an entry that is no .npy: np.load gives its bytes
        raise CLIError(f"{path.name}: entry {key!r} is not a NumPy array")
    return arr


def _reason(exc: Exception) -> str:
    """``module.Type: message`` of an exception, for a one-line error."""
    kind = (
        type(exc).__qualname__
        if type(exc).__module__ == "builtins"
        else f"{type(exc).__module__}.{type(exc).__qualname__}"
    )
    return f"{kind}: {exc}" if str(exc) else kind


def _npy(path: Path, pad_id: int | None, allow_pickle: bool, seed: int) -> Corpus:
    with path.open("rb") as fh:
        if fh.read(6) != b"\x93NUMPY":
            raise CLIError(f"{path.name}: not a NumPy .npy file (no .npy header)")
    try:
        arr = np.load(path, allow_pickle=allow_pickle)
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise CLIError(
                f"{path.name}: holds Python objects; pass --allow-pickle to load it "
                "(only for files you trust: unpickling can run code)"
            ) from None
        raise CLIError(f"cannot read {path.name}: {exc}") from None
    except (EOFError, pickle.UnpicklingError) as exc:  # pickled objects (--allow-pickle) cut short or corrupt
        raise CLIError(f"cannot read {path.name}: its pickled objects are damaged ({_reason(exc)})") from None
    if arr.dtype == object and arr.ndim == 1:
        return Corpus.from_sequences(list(arr), path.name)
    if arr.ndim == 1:
        return Corpus.from_lengths(arr, path.name, seed)
    if arr.ndim == 2 and arr.dtype.kind in "iu":
        return Corpus.from_sequences([_strip(row, pad_id) for row in arr], path.name)
    raise CLIError(
        f"{path.name}: expected 1-D lengths, a 2-D integer array of token ids or a 1-D object "
        f"array of sequences, but got shape {arr.shape} dtype {arr.dtype}"
    )


def _strip(row: np.ndarray, pad_id: int | None) -> np.ndarray:
    if pad_id is None:
        return row
    keep = np.flatnonzero(row != pad_id)
    return row[: keep[-1] + 1] if keep.size else row[:0]
