"""The Python executor's two paths for a 1-D leaf, decided once per batch by the rules.

A 1-D leaf (lists of numbers, 1-D tensors or arrays) is padded either by one ``pad_rows``
call (the row path) or by the general path, which reads its shapes first (it pads under
batch padding, tiling and the overflow policies). The rules decide which before either
runs; the row path hands no leaf on, and names what it cannot pad as the general path
names it. Seen through DynTileCollate alone: on the row path, lists join tensors of a
dtype that holds their values; the general path takes one type per key.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dyntile.planning import BucketPlan
from loaders import DynTileCollate

PLAN = BucketPlan((8, 16))
#: tuple samples (no native route): a tensor, then a list the tensor's dtype holds
MIXED = [(torch.tensor([1, 2]),), ([3],)]
ONE_TYPE = "key '0': sample 1 has type list, but sample 0 has type Tensor"


@pytest.mark.parametrize(
    "options, row_path",
    [
        ({}, True),
        ({"multiple": 4, "side": "left"}, True),
        ({"plan": PLAN}, True),  # overflow="error": a row past the plan is named on the row path
        ({"plan": PLAN, "overflow": "truncate"}, False),  # the policy needs the shapes first
        ({"plan": PLAN, "overflow": "extend"}, False),
        ({"batch_multiple": 1}, False),  # batch padding needs the shape first
        ({"plan": PLAN, "bucket_rows": [2, 2]}, False),
        ({"tile": (2, 2)}, False),  # tiling too
    ],
)
def test_the_options_decide_the_path_of_a_row_leaf(options, row_path):
    collate = DynTileCollate(**options)
    if not row_path:
        with pytest.raises(TypeError, match=ONE_TYPE):
            collate(MIXED)
        return
    (out,) = collate(MIXED)
    width = out.shape[1]
    want = np.zeros((2, width), np.int64)
    rows = [[1, 2], [3]]
    for i, row in enumerate(rows):
        if options.get("side") == "left":
            want[i, width - len(row) :] = row
        else:
            want[i, : len(row)] = row
    assert width == options.get("multiple", 8)  # the plan's first boundary is 8 too
    assert out.tolist() == want.tolist()


def test_a_dtype_numpy_cannot_carry_takes_the_general_path():
    """Quantized rows go to the general path, which stacks them (the row path could not
    read them), or names their key when ragged."""
    q = [torch.quantize_per_tensor(torch.tensor([1.0, 2.0]), 0.5, 0, torch.qint8) for _ in range(2)]
    (out,) = DynTileCollate()([(x,) for x in q])
    assert torch.equal(out.int_repr(), torch.stack(q).int_repr())
    ragged = [(q[0],), (torch.quantize_per_tensor(torch.tensor([1.0]), 0.5, 0, torch.qint8),)]
    with pytest.raises((TypeError, ValueError, RuntimeError), match="key '0'"):
        DynTileCollate()(ragged)


#: batches neither path pads, each the row path's to take under DynTileCollate()
BAD = {
    "dtypes": [(torch.tensor([1, 2]),), (torch.tensor([3], dtype=torch.int32),)],
    "types": [(torch.tensor([1, 2]),), (np.array([3]),)],
    "ranks": [(torch.tensor([1, 2]),), (torch.ones(2, 2),)],
    "a string": [([1, 2],), ([3, "a"],)],
    "a nested list": [([1, 2],), ([[3]],)],
    "past uint64": [([1, 2],), ([2**64],)],
    "uint64 with int64": [([1, 2],), ([2**63 + 1],)],
    "int lists": [([1, 2],), (3,)],
    "arrays of two dtypes": [(np.arange(2),), (np.arange(3, dtype=np.int32),)],
    "a fill ints cannot hold": [(torch.tensor([1, 2]),), (torch.tensor([3]),)],
}


@pytest.mark.parametrize("name", list(BAD))
def test_the_row_path_names_its_errors_as_the_general_path_does(name):
    """What the row path cannot pad raises at once, naming the key and the sample in the
    words of the general path (the same error, to the letter), with nothing padded again."""
    options = {"pad_values": {"0": 0.5}} if name == "a fill ints cannot hold" else {}
    samples = BAD[name]
    with pytest.raises((TypeError, ValueError)) as general:
        DynTileCollate(batch_multiple=1, **options)(samples)
    with pytest.raises((TypeError, ValueError)) as row:
        DynTileCollate(**options)(samples)
    assert type(row.value) is type(general.value)
    assert str(row.value) == str(general.value)
    assert str(row.value).startswith("key '0': ")
    if name != "a fill ints cannot hold":
        assert "sample 1" in str(row.value)


@pytest.mark.parametrize("rows", [[list(range(3)), list(range(20))], [torch.arange(3), torch.arange(20)]])
def test_a_row_past_the_plan_is_named_on_the_row_path_as_on_the_general_path(rows):
    samples = [(r,) for r in rows]
    with pytest.raises(ValueError) as row:
        DynTileCollate(PLAN)(samples)
    with pytest.raises(ValueError) as general:
        DynTileCollate(PLAN, batch_multiple=1)(samples)
    assert str(row.value) == str(general.value)
    want = "key '0': sample 1 has shape (20,), over the plan's largest boundary (16,)"
    assert str(row.value).startswith(want)


def test_a_list_the_tensors_dtype_cannot_hold_is_named_with_why():
    """On the row path lists join tensors of a dtype that holds their values; one that it
    cannot hold is named with the reason (the general path takes one type per key)."""
    with pytest.raises(TypeError, match=r"key '0': .*sample 1") as row:
        DynTileCollate()([(torch.tensor([1, 2]),), ([1.5],)])
    assert "has type list" not in str(row.value)


def test_a_fill_the_rows_dtype_cannot_hold_is_named_by_the_row_path():
    """Lists of ints past int64 are uint64 rows; a negative fill is named with its key
    where the row path meets it (no second path reaches a torch dtype uint64 lacks)."""
    samples = [([2**63 + 5],), ([2**63 + 5, 2**63 + 6],)]
    with pytest.raises(ValueError, match=r"key '0': fill=-1 is out of range for uint64"):
        DynTileCollate(pad_values={"0": -1})(samples)
