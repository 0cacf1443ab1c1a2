"""The two executors of a collate plan against an independent reference, on one grid of cases.

Every case runs three ways: ``DynTileCollate`` as it dispatches (the native executor for the
flat dicts it takes), the Python executor alone, and :func:`reference`, a plain walk written
from the rules in docs/guides/bucketing.md (torch's ``default_collate`` for what is stacked, padding by
hand). The outputs must be equal: keys, order, dtypes, shapes and values.
"""

from __future__ import annotations

import collections
import functools
import itertools
import math

import numpy as np
import pytest
import torch
from torch.utils.data import default_collate

from dyntile import tensor_reader
from dyntile.planning import BucketPlan
from loaders import DynTileCollate
from test_collate_outputs import python_only

Point = collections.namedtuple("Point", "x y")
LABELS = ("labels", "label", "label_ids")
TOKENS = ("input_ids", "attention_mask", "token_type_ids", "special_tokens_mask", "position_ids")


def make_samples(structure: str, lengths: list[int]) -> list:
    rng = np.random.default_rng(len(lengths) * 31 + sum(lengths))
    ids = [rng.integers(1, 900, n) for n in lengths]
    if structure == "flat lists":
        return [
            {"input_ids": a.tolist(), "labels": (a + 1).tolist(), "label": i % 3} for i, a in enumerate(ids)
        ]
    if structure == "flat tensors":
        return [
            {
                "input_ids": torch.from_numpy(a.astype(np.int32)),
                "attention_mask": torch.ones(len(a), dtype=torch.int64),
                "score": i / 4,
                "y": torch.tensor(i, dtype=torch.float16),
            }
            for i, a in enumerate(ids)
        ]
    if structure == "tokenizer":
        return [
            {"input_ids": a.tolist(), "token_type_ids": [0] * len(a), "attention_mask": [1] * len(a)}
            for a in ids
        ]
    if structure == "nested":
        return [
            {
                "text": {"ids": a.tolist()},
                "pair": (torch.ones(len(a), 3) * i, f"s{i}"),
                "point": Point(i, i / 2),
                "name": f"n{i}",
            }
            for i, a in enumerate(ids)
        ]
    return [
        {
            "ids": a.tolist(),
            "w": (a / 7).tolist(),
            "emb": np.full(4, i, np.float32),  # 4: the length of "one length", a feature kept as it is
            "flag": i % 2 == 0,
            "np": np.float32(i),
            "t0": torch.tensor(i),
        }
        for i, a in enumerate(ids)
    ]


STRUCTURES = ("flat lists", "flat tensors", "tokenizer", "nested", "mixed leaves")


# ------------------------------------------------------------------ the reference


class Reference:
    """A plain walk of the collate's rules, as docs/guides/bucketing.md states them."""

    def __init__(
        self, plan=None, multiple=8, pad_values=None, side="right", batch_multiple=None, bucket_rows=None
    ):
        self.plan, self.multiple, self.side = plan, multiple, side
        self.pad_values = dict(pad_values or {})
        self.batch_multiple, self.bucket_rows = batch_multiple, bucket_rows
        self.padded = []  # (key, sizes (B, ndim), padded shape) in walk order

    def fill(self, key):
        last = key.rsplit(".", 1)[-1]
        return self.pad_values.get(key, self.pad_values.get(last, -100 if last in LABELS else 0))

    def declared(self, key, ndim):
        if self.pad_values:
            return key.rsplit(".", 1)[-1] in self.pad_values or key in self.pad_values
        return self.plan is not None and ndim == 1

    def size(self, longest):
        if self.plan is not None:
            return self.plan.round_up((longest,))[0]
        return -(-longest // self.multiple) * self.multiple

    def leaf(self, items, key):
        x0 = items[0]
        if isinstance(x0, (list, torch.Tensor, np.ndarray)) and np.ndim(x0) > 0:
            ts = [as_tensor(x) for x in items]
            dtype = functools.reduce(
                torch.promote_types, [t.dtype for t in ts]
            )  # the batch's lists: one dtype
            ts = [t.to(dtype) for t in ts]
            sizes = np.array([t.shape for t in ts])
            if not (self.declared(key, ts[0].dim()) or (sizes != sizes[0]).any()):
                return torch.stack(ts)
            T = self.size(int(sizes[:, 0].max()))
            out = torch.full((len(ts), T, *ts[0].shape[1:]), self.fill(key), dtype=ts[0].dtype)
            for i, t in enumerate(ts):
                start = 0 if self.side == "right" else T - t.shape[0]
                out[i, start : start + t.shape[0]] = t
            self.padded.append((key, sizes, tuple(out.shape)))
            return out
        if isinstance(x0, str):
            return list(items)
        return default_collate(items)

    def walk(self, items, key=""):
        x0 = items[0]
        if isinstance(x0, dict):
            return {k: self.walk([x[k] for x in items], f"{key}.{k}" if key else k) for k in x0}
        if isinstance(x0, tuple):
            parts = [
                self.walk(list(col), f"{key}.{f}" if key else f)
                for f, col in zip(getattr(x0, "_fields", None) or map(str, range(len(x0))), zip(*items))
            ]
            return type(x0)(*parts) if hasattr(x0, "_fields") else parts
        return self.leaf(items, key)

    def __call__(self, samples):
        out = self.walk(samples)
        B = len(samples)
        mark = self.padded[0] if self.padded else None
        if mark is not None and len(mark[2]) == 2 and (mark[1] == mark[1][0]).all():
            L, T = int(mark[1][0, 0]), mark[2][1]
            for k, v in list(
                out.items()
            ):  # stacked token and label keys of the mask's one length take its width
                if (
                    k in TOKENS + LABELS
                    and isinstance(v, torch.Tensor)
                    and v.dim() == 2
                    and v.shape[1] == L != T
                ):
                    self.padded.append((k, np.full((B, 1), L), (B, T)))
                    out[k] = self.leaf_widened(v, T, k)
        rows = B
        if self.batch_multiple:
            rows = -(-B // self.batch_multiple) * self.batch_multiple
        if self.bucket_rows and mark is not None:
            rows = self.bucket_rows[mark[2][1]]
        if rows > B:
            out = grow(out, B, rows, self.fill)
        if mark is not None:
            sizes = mark[1]
            lengths = np.concatenate((sizes, np.zeros((rows - B, sizes.shape[1]), np.int64)))
            T = mark[2][1]
            pos = torch.arange(T)
            n = torch.from_numpy(lengths[:, 0].copy())[:, None]
            out.setdefault(
                "attention_mask", pos < n if self.side == "right" else pos >= T - n
            )  # a sample's own
            out.setdefault("lengths", torch.from_numpy(lengths[:, 0] if lengths.shape[1] == 1 else lengths))
        return out

    def leaf_widened(self, v, T, key):
        out = torch.full((v.shape[0], T), self.fill(key), dtype=v.dtype)
        if self.side == "right":
            out[:, : v.shape[1]] = v
        else:
            out[:, T - v.shape[1] :] = v
        return out


def as_tensor(x) -> torch.Tensor:
    """A leaf as a tensor: a list of numbers as NumPy reads it (int64, float64, bool; an
    empty list carries no dtype: int64)."""
    if isinstance(x, list):
        return torch.from_numpy(np.asarray(x) if x else np.zeros(0, np.int64))
    return torch.as_tensor(x)


def grow(value, B, rows, fill, key=""):
    """Every tensor of ``B`` rows grown to ``rows`` with its key's fill."""
    if isinstance(value, torch.Tensor):
        if value.dim() == 0 or value.shape[0] != B:
            return value
        return torch.cat((value, torch.full((rows - B, *value.shape[1:]), fill(key), dtype=value.dtype)))
    if isinstance(value, dict):
        return {k: grow(v, B, rows, fill, f"{key}.{k}" if key else k) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(grow(v, B, rows, fill, f"{key}.{f}") for f, v in zip(value._fields, value)))
    if isinstance(value, list) and value and isinstance(value[0], torch.Tensor):
        return [grow(v, B, rows, fill, f"{key}.{j}") for j, v in enumerate(value)]
    return value


# ------------------------------------------------------------------ the grid


def assert_same(a, b, where="batch"):
    if isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, (where, a, b)
        assert torch.equal(a, b), (where, a, b)
    elif isinstance(b, dict):
        assert isinstance(a, dict) and list(a) == list(b), (where, list(a), list(b))
        for k in b:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(b, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


PLAN = BucketPlan((8, 16, 32))
OPTIONS = {
    "multiple": {},
    "multiple 4, left": {"multiple": 4, "side": "left"},
    "pad values": {"pad_values": {"input_ids": 1, "labels": -7, "ids": 2}},
    "plan": {"plan": PLAN},
    "plan, pad values, left": {"plan": PLAN, "pad_values": {"input_ids": 0, "ids": 0}, "side": "left"},
    "batch multiple": {"batch_multiple": 4, "pad_values": {"input_ids": 0, "ids": 0}},
    "bucket rows": {"plan": PLAN, "bucket_rows": (6, 8, 8)},
}
LENGTHS = {"ragged": [3, 9, 1, 5, 12], "one length": [4, 4, 4], "one sample": [7], "empty rows": [0, 2, 0]}


def reference_options(options: dict) -> dict:
    ref = {k: v for k, v in options.items() if k != "bucket_rows"}
    if "bucket_rows" in options:
        ref["bucket_rows"] = dict(zip((8, 16, 32), options["bucket_rows"]))
    return ref


@pytest.mark.parametrize("structure, option, lengths", list(itertools.product(STRUCTURES, OPTIONS, LENGTHS)))
def test_both_executors_equal_the_reference(structure, option, lengths):
    samples = make_samples(structure, LENGTHS[lengths])
    options = OPTIONS[option]
    want = Reference(**reference_options(options))(samples)
    dispatched = DynTileCollate(**options)
    assert_same(dispatched(samples), want, "dispatched")
    python = python_only(DynTileCollate(**options))
    assert_same(python(samples), want, "python executor")
    assert python.stats.as_dict() == dispatched.stats.as_dict()
    assert python.stats.shapes == dispatched.stats.shapes
    flat = (
        structure != "nested"
        and structure != "mixed leaves"
        and "batch_multiple" not in options
        and "bucket_rows" not in options
    )
    if tensor_reader.native_module() is not None:  # the flat batches ran natively
        assert (dispatched._last.native is not None) == flat


def test_the_counts_are_the_padded_leaves():
    samples = make_samples("flat lists", [3, 9])
    collate = DynTileCollate()
    collate(samples)
    shapes = {("input_ids", (2, 16)): 1, ("labels", (2, 16)): 1}
    assert collate.stats.shapes == shapes and collate.stats.real_elements == 24
    assert collate.stats.padded_elements == sum(math.prod(s) for _, s in shapes)
