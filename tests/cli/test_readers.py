"""User files: every accepted format, and a clear error for each kind of bad input."""

import json
import zipfile

import numpy as np
import pytest

from dyntile.cli.errors import CLIError
from dyntile.cli.readers import read_corpus


def test_txt_lengths(tmp_path):
    p = tmp_path / "l.txt"
    p.write_text("3\n\n 17 \n5\n")
    c = read_corpus(p)
    assert c.lengths.tolist() == [3, 17, 5] and c.synthetic


def test_npy_lengths_2d_and_object(tmp_path):
    np.save(tmp_path / "a.npy", np.array([4, 9, 1], np.int32))
    assert read_corpus(tmp_path / "a.npy").lengths.tolist() == [4, 9, 1]
    rows = np.array([[5, 6, 0, 0], [7, 0, 8, 0], [9, 9, 9, 9]])
    np.save(tmp_path / "b.npy", rows)
    assert read_corpus(tmp_path / "b.npy").lengths.tolist() == [4, 4, 4]
    c = read_corpus(tmp_path / "b.npy", pad_id=0)
    assert c.lengths.tolist() == [2, 3, 4] and c.sequence(1).tolist() == [7, 0, 8]
    obj = np.empty(2, object)
    obj[0], obj[1] = [1, 2, 3], [4]
    np.save(tmp_path / "c.npy", obj, allow_pickle=True)
    with pytest.raises(CLIError, match="--allow-pickle"):
        read_corpus(tmp_path / "c.npy")
    c = read_corpus(tmp_path / "c.npy", allow_pickle=True)
    assert c.lengths.tolist() == [3, 1] and c.sequence(0).tolist() == [1, 2, 3] and c.vocab_size >= 5


def test_npz_ids_offsets_and_lengths(tmp_path):
    np.savez(tmp_path / "t.npz", ids=np.array([5, 6, 7, 8, 9], np.int32), offsets=np.array([0, 2, 5]))
    c = read_corpus(tmp_path / "t.npz")
    assert c.lengths.tolist() == [2, 3] and c.sequence(1).tolist() == [7, 8, 9]
    np.savez(tmp_path / "l.npz", lengths=np.array([3, 4]))
    assert read_corpus(tmp_path / "l.npz").lengths.tolist() == [3, 4]
    np.savez(tmp_path / "u.npz", np.array([5, 2]))  # unnamed: np.savez(f, lengths)
    assert read_corpus(tmp_path / "u.npz").lengths.tolist() == [5, 2]
    np.savez(tmp_path / "bad.npz", ids=np.arange(4), offsets=np.array([0, 9]))
    with pytest.raises(CLIError, match="offsets"):
        read_corpus(tmp_path / "bad.npz")
    np.savez(tmp_path / "none.npz", x=np.arange(3))
    with pytest.raises(CLIError, match="'ids' and 'offsets'"):
        read_corpus(tmp_path / "none.npz")


def test_jsonl_ids_and_text(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in [{"ids": [4, 5, 6]}, {"ids": [7]}]) + "\n")
    c = read_corpus(p, field="ids")
    assert c.lengths.tolist() == [3, 1] and c.sequence(0).tolist() == [4, 5, 6]
    q = tmp_path / "t.jsonl"
    q.write_text(json.dumps({"text": "Return the sum."}) + "\n" + json.dumps({"text": "x"}) + "\n")
    c = read_corpus(q, field="text")
    assert c.lengths.tolist() == [2 + 4, 2 + 1]  # [CLS] return the sum . [SEP]


@pytest.mark.parametrize(
    "name, content, kwargs, message",
    [
        ("l.txt", "3\n4\nfive\n", {}, "line 3 is not an integer length: 'five'"),
        ("l.txt", "3\n\n-2\n", {}, "l.txt: lengths should be positive integers, but got -2 at line 3"),
        ("l.txt", "3\n" + "9" * 5000 + "\n", {}, "l.txt: line 2: a length of 5000 digits; lengths should be"),
        ("l.txt", "3\n\n" + "9" * 30 + "\n", {}, r"below 2\*\*63, but line 3 is 9{30}$"),
        ("l.txt", f"3\n{2**63}\n", {}, r"below 2\*\*63, but line 2 is 9223372036854775808$"),
        ("l.txt", "\n\n", {}, "non-empty"),
        ("d.jsonl", '{"ids": [1]}\n{"other": [2]}\n', {"field": "ids"}, "line 2 has no field 'ids'"),
        ("d.jsonl", '{"ids": [1]}\nnot json\n', {"field": "ids"}, "line 2 is not valid JSON"),
        ("d.jsonl", '{"ids": 3}\n', {"field": "ids"}, "line 1: field 'ids' should be a list"),
        ("d.jsonl", '{"ids": [1]}\n{"ids": "a"}\n', {"field": "ids"}, "mixes strings and lists"),
        ("d.jsonl", '{"ids": [1, -4]}\n', {"field": "ids"}, "non-negative"),
        ("d.jsonl", '{"ids": [1, 2.5]}\n', {"field": "ids"}, "integer token ids"),
        ("d.jsonl", '{"ids": [1]}\n\n{"ids": []}\n', {"field": "ids"}, "d.jsonl: line 3 holds no token ids"),
        ("d.jsonl", '\n{"ids": [[1, 2]]}\n', {"field": "ids"}, "d.jsonl: line 2 should be a 1-D list"),
        ("d.jsonl", '{"ids": [1]}\n{"ids": [1, -4]}\n', {"field": "ids"}, "but line 2 holds -4"),
        (
            "d.jsonl",
            '{"ids": [1]}\n\n{"ids": [1, ' + "9" * 5000 + "]}\n",
            {"field": "ids"},
            "d.jsonl: line 3 holds a number of more than 4300 digits; token ids should be below 2",
        ),
        (
            "d.jsonl",
            '{"ids": [3, ' + "9" * 30 + "]}\n",
            {"field": "ids"},
            "below 1048576 .*line 1 holds 9{30}$",
        ),
        ("d.jsonl", '{"ids": [1, 2]}\n{"ids": [2000000]}\n', {"field": "ids"}, r"is 2000000 \(line 2\)"),
        (
            "d.jsonl",
            '{"ids": [1]}\n{"ids": ' + "[" * 100_000 + "]" * 100_000 + "}\n",
            {"field": "ids"},
            "d.jsonl: line 2 is nested too deeply to read; token ids should be a flat list",
        ),
        (
            "d.jsonl",
            '{"ids": [1], "meta": ' + "[" * 100_000 + "]" * 100_000 + "}\n",
            {"field": "ids"},
            "d.jsonl: line 1 is nested too deeply",
        ),
        (
            "d.jsonl",
            '{"ids": [1]}\n{"ids": ' + "[" * 200 + "1" + "]" * 200 + "}\n",
            {"field": "ids"},
            "line 2",
        ),
        ("d.jsonl", '{"ids": [1]}\n', {}, "needs --field"),
        ("x.csv", "1\n", {}, "unknown extension '.csv'"),
    ],
    ids=lambda v: v[:48] if isinstance(v, str) else None,
)
def test_bad_files_give_clear_errors(tmp_path, name, content, kwargs, message):
    p = tmp_path / name
    p.write_text(content)
    with pytest.raises(CLIError, match=message):
        read_corpus(p, **kwargs)


def test_missing_file_and_bad_arrays(tmp_path):
    with pytest.raises(CLIError, match="no such file"):
        read_corpus(tmp_path / "missing.txt")
    np.save(tmp_path / "f.npy", np.array([1.5, 2.0]))
    with pytest.raises(CLIError, match="integers"):
        read_corpus(tmp_path / "f.npy")
    np.save(tmp_path / "3d.npy", np.zeros((2, 2, 2), np.int64))
    with pytest.raises(CLIError, match=r"shape \(2, 2, 2\)"):
        read_corpus(tmp_path / "3d.npy")
    (tmp_path / "junk.npy").write_bytes(b"not an npy file")
    with pytest.raises(CLIError, match="junk.npy: not a NumPy .npy file"):
        read_corpus(tmp_path / "junk.npy")


def test_damaged_archives_and_pickles_name_the_file(tmp_path):
    """What np.load raises for a damaged file (EOFError, BadZipFile, zlib.error, a pickle
    cut short) becomes a CLIError naming the file (and the entry)."""
    np.savez_compressed(tmp_path / "c.npz", ids=np.arange(2000), offsets=np.array([0, 1000, 2000]))
    data = bytearray((tmp_path / "c.npz").read_bytes())
    data[200:260] = b"x" * 60  # inside the compressed 'ids'
    (tmp_path / "c.npz").write_bytes(bytes(data))
    with pytest.raises(CLIError, match=r"c.npz: array 'ids' is damaged, cut short or corrupt \(zlib.error"):
        read_corpus(tmp_path / "c.npz")
    with zipfile.ZipFile(tmp_path / "t.npz", "w") as z:  # a zip whose entries are no .npy files
        z.writestr("lengths", "3 4 5")
    with pytest.raises(CLIError, match="t.npz: entry 'lengths' is not a NumPy array"):
        read_corpus(tmp_path / "t.npz")
    np.savez(tmp_path / "u.npz", ids=np.arange(4), offsets=np.array([0, 2**64 - 1], np.uint64))
    with pytest.raises(CLIError, match=r"u.npz: offsets should be below 2\*\*63, but got offsets\[1\]"):
        read_corpus(tmp_path / "u.npz")
    np.savez(tmp_path / "f.npz", ids=np.arange(4.0), offsets=np.array([0, 4]))
    with pytest.raises(
        CLIError, match=r"f.npz: 'ids' should be 1-D integer token ids, but got shape \(4,\) dtype float64"
    ):
        read_corpus(tmp_path / "f.npz")
    objects = np.empty(2, object)
    objects[0], objects[1] = [1, 2], list(range(40))
    np.save(tmp_path / "o.npy", objects, allow_pickle=True)
    (tmp_path / "o.npy").write_bytes((tmp_path / "o.npy").read_bytes()[:-20])
    with pytest.raises(CLIError, match="cannot read o.npy: its pickled objects are damaged"):
        read_corpus(tmp_path / "o.npy", allow_pickle=True)


def test_a_utf8_byte_order_mark_is_read_as_nothing(tmp_path):
    (tmp_path / "l.txt").write_text("3\n17\n", encoding="utf-8-sig")
    assert read_corpus(tmp_path / "l.txt").lengths.tolist() == [3, 17]
    (tmp_path / "d.jsonl").write_text('{"ids": [4, 5]}\n', encoding="utf-8-sig")
    assert read_corpus(tmp_path / "d.jsonl", field="ids").lengths.tolist() == [2]


def test_sequences_without_lines_are_named_by_index(tmp_path):
    np.save(tmp_path / "p.npy", np.array([[5, 6], [0, 0]]))  # row 1 is all padding
    with pytest.raises(CLIError, match="p.npy: sequence 1 holds no token ids"):
        read_corpus(tmp_path / "p.npy", pad_id=0)
