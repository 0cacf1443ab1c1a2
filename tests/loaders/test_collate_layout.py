"""layout_batch, rule by rule: what each key of a flat dict batch becomes, from the reader's
report alone (the table of rules in docs/guides/bucketing.md)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from dyntile import tensor_reader
from dyntile.planning import BucketPlan
from loaders import DynTileCollate, _collate_layout
from loaders._collate_layout import (
    NUMBER_DTYPES,
    WIDTH_TABLE_ROWS,
    BatchLayout,
    DictSpec,
    KeyRule,
    counted,
    key_code,
    layout_batch,
    mask_of,
    size_of_rows,
    stacks,
    widens,
    width_table,
)
from loaders._collate_spec import plan_batch

native = tensor_reader.native_module()
pytestmark = pytest.mark.skipif(native is None, reason="dyntile.cpu._torch_tensors not built for this torch")


def spec_of(sample: dict, **options) -> DictSpec:
    """The DictSpec a DynTileCollate of ``options`` plans for batches like ``sample``."""
    spec = plan_batch(DynTileCollate(**options)._rules, sample).native
    assert spec is not None
    return spec


def rows(longest: int, total: int, dtype=None, grad=False) -> tuple:
    """The reader's report of a row key (lists of ints when ``dtype`` is None)."""
    return (native.LIST_ROWS if dtype is None else native.TENSOR_ROWS, dtype, longest, total, grad)


def number(kind: int, dtype=None, grad=False) -> tuple:
    return (kind, dtype, 0, 0, grad)


def facts_of(read: tuple) -> tuple:
    """The native reader's facts of a batch ``(B, per key (kind, dtype, longest, total, grad))``."""
    B, keys = read
    facts = [B]
    for kind, dtype, longest, total, grad in keys:
        one = kind in (native.LIST_ROWS, native.TENSOR_ROWS) and longest * B == total
        facts += [key_code(kind, dtype, grad, one), longest]
    return tuple(facts)


def lay(spec: DictSpec, read: tuple) -> BatchLayout | None:
    """The layout of a batch described as ``(B, per key (kind, dtype, longest, total, grad))``."""
    return layout_batch(spec, facts_of(read))


def real_of(layout: BatchLayout, read: tuple) -> int:
    return layout.real(tuple(total for _, _, _, total, _ in read[1]))


def test_the_rules_as_functions():
    assert stacks(False, True) and not stacks(True, True) and not stacks(False, False)
    assert mask_of(["b", "c"]) == "b" and mask_of(["b"], "a") == "a" and mask_of([]) is None
    assert widens(True, 4, 4, 8) and not widens(True, 4, 4, 4) and not widens(True, 4, None, 8)
    assert not widens(False, 4, 4, 8) and not widens(True, 3, 4, 8)
    assert counted(["a", "c"], ["b"]) == ["a", "c", "b"]
    assert NUMBER_DTYPES == {int: torch.int64, float: torch.float64, bool: torch.bool}


def test_a_row_key_of_one_length_that_is_no_declared_sequence_is_stacked():
    spec = spec_of({"ids": [1], "emb": [1]}, pad_values={"ids": 0})  # ids declared, emb a feature
    read = (3, (rows(4, 12), rows(4, 12)))
    layout = lay(spec, read)
    assert layout.widths == (8, 4)  # the declared sequence pads; the feature keeps its one length
    assert layout.shapes == (("ids", (3, 8)),) and (real_of(layout, read), layout.total) == (12, 24)
    ragged = lay(spec, (3, (rows(4, 12), rows(4, 10))))
    assert ragged.widths == (8, 8) and [k for k, _ in ragged.shapes] == ["ids", "emb"]


def test_without_mask_from_the_mask_and_lengths_come_from_the_first_padded_key():
    spec = spec_of({"a": [1], "b": [1], "c": [1]})
    assert lay(spec, (2, (rows(3, 6), rows(5, 6), rows(2, 3)))).mark == 1  # a is stacked
    assert lay(spec, (2, (rows(3, 5), rows(5, 6), rows(2, 3)))).mark == 0
    none = lay(spec, (2, (rows(3, 6), rows(5, 10), rows(2, 4))))
    assert none.mark == -1 and none.want == 0 and none.shapes == ()  # all stacked: no mask
    named = spec_of({"a": [1], "b": [1]}, mask_from="b")
    assert lay(named, (2, (rows(3, 5), rows(5, 6)))).mark == 1
    assert spec.want == 3 and spec_of({"a": [1]}, mask_key=None).want == 1
    assert spec_of({"a": [1]}, lengths_key=None).want == 2


def test_token_and_label_keys_of_the_mask_keys_length_take_its_width():
    sample = {"input_ids": [1], "labels": [1], "token_type_ids": [1], "emb": [1]}
    spec = spec_of(sample, pad_values={"input_ids": 0})
    read = (2, (rows(5, 10), rows(5, 10), rows(5, 10), rows(5, 10)))
    layout = lay(spec, read)
    assert layout.widths == (8, 8, 8, 5)  # emb: a feature of that length keeps its shape
    assert [k for k, _ in layout.shapes] == ["input_ids", "labels", "token_type_ids"]  # widened after
    assert (real_of(layout, read), layout.total) == (30, 48)
    other = lay(spec, (2, (rows(5, 10), rows(4, 8), rows(5, 10), rows(5, 10))))
    assert other.widths == (8, 4, 8, 5)  # another length: stacked as it is
    ragged = lay(spec, (2, (rows(5, 9), rows(5, 10), rows(5, 10), rows(5, 10))))
    assert ragged.widths == (8, 5, 5, 5)  # the mask key's rows differ in length: nothing to align to
    exact = lay(spec_of(sample, pad_values={"input_ids": 0}, multiple=1), (2, (rows(5, 10),) * 4))
    assert exact.widths == (5, 5, 5, 5) and [k for k, _ in exact.shapes] == ["input_ids"]


def test_the_counts_list_padded_keys_in_key_order_then_the_widened_ones():
    spec = spec_of({"labels": [1], "ids": [1], "x": [1]}, pad_values={"ids": 0, "x": 0})
    layout = lay(spec, (2, (rows(3, 6), rows(3, 6), rows(9, 10))))
    assert [k for k, _ in layout.shapes] == ["ids", "x", "labels"]
    assert layout.shapes == (("ids", (2, 8)), ("x", (2, 16)), ("labels", (2, 8)))


@pytest.mark.parametrize(
    "kind, dtype, want",
    [
        ("INTS", None, torch.int64),
        ("FLOATS", None, torch.float64),
        ("BOOLS", None, torch.bool),
        ("TENSOR_SCALARS", torch.bfloat16, torch.bfloat16),
    ],
)
def test_python_numbers_are_int64_float64_or_bool_and_0d_tensors_keep_their_dtype(kind, dtype, want):
    spec = spec_of({"ids": [1], "y": 1 if dtype is None else torch.tensor(1.0)})
    layout = lay(spec, (2, (rows(3, 5), number(getattr(native, kind), dtype))))
    assert layout.dtypes == (torch.int64, want) and layout.widths == (8, 0)


def test_row_dtypes_and_fill_bits():
    spec = spec_of({"ids": [1], "x": torch.ones(1, dtype=torch.int16)}, pad_values={"ids": -1, "x": 2})
    layout = lay(spec, (2, (rows(3, 5), rows(3, 4, torch.int16))))
    assert layout.dtypes == (torch.int64, torch.int16) and layout.bits == ((1 << 64) - 1, 2)
    half = lay(spec, (2, (rows(3, 5), rows(3, 4, torch.float16))))  # another dtype this batch
    assert half.dtypes[1] == torch.float16 and half.bits[1] == 0x4000  # 2.0 in float16


def test_a_plan_gives_the_width_and_left_padding_is_carried():
    spec = spec_of({"ids": [1]}, plan=BucketPlan((8, 24)), side="left")
    layout = lay(spec, (2, (rows(9, 12),)))
    assert layout.widths == (24,) and layout.left and layout.mark == 0 and layout.want == 3


@pytest.mark.parametrize(
    "sample, options, read",
    [
        ({"ids": [1]}, {}, (2, (number(2),))),  # a row key now holds numbers: the structure changed
        ({"ids": [1], "y": 1}, {}, (2, (rows(3, 5), rows(3, 5)))),  # a number key now holds rows
        ({"ids": [1]}, {"plan": BucketPlan((8,))}, (2, (rows(9, 12),))),  # past the plan: its overflow rule
        ({"ids": [1]}, {"plan": BucketPlan((8,))}, (2, (rows(9, 18),))),  # one length, past the plan too
        ({"x": torch.ones(1)}, {}, (2, (rows(3, 6, torch.float32, grad=True),))),  # stacked, requires grad
        ({"x": [1], "y": torch.tensor(1.0)}, {}, (2, (rows(3, 5), number(5, torch.float32, True)))),
        ({"ids": [1]}, {}, (1 << 16, (rows(1 << 10, 1 << 20),))),  # large enough for the threaded kernels
        ({"x": torch.ones(1, dtype=torch.int8)}, {"fill": 200}, (2, (rows(3, 5, torch.uint8),))),
        (
            {"x": torch.ones(1, dtype=torch.int8)},
            {"fill": 200},
            (2, (rows(3, 5, torch.int8),)),
        ),  # no int8 200
    ],
)
def test_what_the_layout_leaves_to_the_python_executor(sample, options, read):
    spec = plan_batch(DynTileCollate(**options)._rules, sample).native
    if spec is None:  # a fill sample 0's dtype cannot hold: left at planning already
        assert options.get("fill") == 200 and sample["x"].dtype == torch.int8
        return
    assert lay(spec, read) is None


def test_the_uint8_fill_that_int8_cannot_hold():
    spec = spec_of({"ids": [1], "x": torch.ones(1, dtype=torch.uint8)}, pad_values={"x": 200})
    assert lay(spec, (2, (rows(3, 5), rows(3, 5, torch.uint8)))).bits[1] == 200
    assert lay(spec, (2, (rows(3, 5), rows(3, 5, torch.int8)))) is None


def test_the_layout_is_what_the_collate_writes():
    """A layout run by the writer gives DynTileCollate's batch (the route end to end)."""
    samples = [
        {"input_ids": [1, 2, 3], "labels": [4, 5, 6], "y": 1.5},
        {"input_ids": [7], "labels": [8], "y": 2.0},
    ]
    spec = spec_of(samples[0], side="left")
    decided = []

    def decide(facts):
        decided.append(facts)
        return layout_batch(spec, facts)

    out, mask, lengths, layout, totals = native.collate_dicts(samples, spec.keys, spec.layouts, decide)
    assert isinstance(layout, BatchLayout) and spec.layouts[decided[0]] is layout  # kept for its facts
    assert layout.real(totals) == 8 and layout.counted is None  # every row key counted
    again = native.collate_dicts(samples, spec.keys, spec.layouts, decide)
    assert again[3] is layout and len(decided) == 1  # found there: not decided again
    want = DynTileCollate(side="left")(samples)
    for k in out:
        assert torch.equal(out[k], want[k]), k
    assert torch.equal(mask, want["attention_mask"]) and torch.equal(lengths, want["lengths"])


def test_a_spec_knows_its_keys_rules_and_sizes():
    spec = spec_of(
        {"ids": [1, 2], "x": torch.arange(3, dtype=torch.int16), "label": 3, "score": torch.tensor(0.5)},
        pad_values={"ids": -1},
        side="left",
        mask_from="x",
        mask_key=None,
    )
    assert (
        spec.keys == ("ids", "x", "label", "score") and spec.left and spec.mask_from == 1 and spec.want == 1
    )
    assert spec.rules == (
        KeyRule("ids", True, True, False, -1),
        KeyRule("x", True, True, False, 0),
        KeyRule("label", False, False, False, -100),  # a label key: the fill of labels
        KeyRule("score", False, False, False, 0),
    )
    assert spec.size_of == size_of_rows(8, None) and spec.size_of(9) == 16


def test_a_spec_keeps_a_layout_per_facts_and_starts_over_past_max_layouts(monkeypatch):
    spec = spec_of({"ids": [1]})
    first = lay(spec, (2, (rows(3, 5),)))
    assert lay(spec, (2, (rows(3, 4),))) is first  # the same facts: the totals enter the counts only
    monkeypatch.setattr(_collate_layout, "MAX_LAYOUTS", 3)
    for n in range(4, 12):
        assert lay(spec, (2, (rows(n, 2 * n - 1),))).widths == (-(-n // 8) * 8,)
        assert len(spec.layouts) <= 3


# ------------------------------------------------------------------ facts by width


SIZE_OFS = [
    size_of_rows(1, None),
    size_of_rows(8, None),
    size_of_rows(13, None),
    size_of_rows(1, [8, 16]),
    size_of_rows(1, [3, 100, 5000]),
]


@pytest.mark.parametrize("size_of", SIZE_OFS)
def test_a_width_table_holds_widths_its_size_of_keeps(size_of):
    table = np.frombuffer(width_table(size_of), np.int64)
    past = next((n for n in range(WIDTH_TABLE_ROWS) if size_of(n) < 0), WIDTH_TABLE_ROWS)
    assert len(table) == past
    assert table.tolist() == [size_of(n) for n in range(past)]
    assert all(size_of(w) == w for w in set(table.tolist()))  # a width stays itself: one layout for both


def coarse(spec: DictSpec, facts: tuple) -> tuple:
    """``facts`` as the native reader reports them under ``spec``'s table (an independent
    reading of its rule: ragged row keys by the width of their longest row)."""
    table = np.frombuffer(spec.widths, np.int64)
    out = list(facts)
    for j in range(1, len(facts), 2):
        code, longest = facts[j], facts[j + 1]
        rows = code & 7 in (native.LIST_ROWS, native.TENSOR_ROWS)
        if rows and not code & native.ONE_LENGTH and longest < len(table):
            out[j + 1] = int(table[longest])
    return tuple(out)


@pytest.mark.parametrize(
    "options",
    [{}, {"pad_values": {"ids": 0}}, {"plan": BucketPlan((8, 16, 48))}, {"mask_from": "emb", "side": "left"}],
)
def test_facts_by_width_are_laid_out_as_facts_by_longest_row(options):
    """The differential grid of the coarse facts: every batch's layout from the width of its
    ragged keys' longest rows is the layout from the rows themselves."""
    sample = {"ids": [1], "labels": [1], "emb": torch.ones(1, dtype=torch.int16), "y": 1.0}
    exact, by_width = spec_of(sample, **options), spec_of(sample, **options)
    rng = random.Random(5)
    seen = 0
    for _ in range(400):
        B = rng.choice([1, 2, 3, 7, 33])
        keys = []
        for dtype in (None, None, torch.int16):
            longest = rng.choice([0, 1, 5, 8, 9, 16, 17, 40, 49, rng.randrange(5000)])
            total = longest * B if rng.random() < 0.3 else max(0, longest * B - rng.randrange(1, 3))
            keys.append(rows(longest, total, dtype))
        facts = facts_of((B, (*keys, number(native.FLOATS))))
        want = layout_batch(exact, facts)
        assert layout_batch(by_width, coarse(by_width, facts)) == want, facts
        seen += want is not None
    assert seen > 100


def test_the_reader_reports_ragged_rows_by_their_width():
    spec = spec_of({"ids": [1], "emb": [1]}, pad_values={"ids": 0})
    decided = []

    def decide(facts):
        decided.append(facts)
        return layout_batch(spec, facts)

    L = WIDTH_TABLE_ROWS + 3
    batches = [
        [{"ids": [1] * 11, "emb": [2] * 5}, {"ids": [3] * 2, "emb": [4] * 5}],  # ids ragged; emb one length
        [{"ids": [1] * 13, "emb": [2] * 5}, {"ids": [3] * 9, "emb": [4] * 5}],  # ids: another row, one width
        [{"ids": [1] * L, "emb": [2]}, {"ids": [3], "emb": [4] * 2}],  # ids past the table
    ]
    code = native.LIST_ROWS
    outs = [native.collate_dicts(b, spec.keys, spec.layouts, decide, spec.widths) for b in batches]
    assert decided == [(2, code, 16, code | native.ONE_LENGTH, 5), (2, code, L, code, 8)]
    assert outs[1][3] is outs[0][3]  # the second batch's facts were the first's: its layout found
    for b, out in zip(batches, outs):
        want = DynTileCollate(pad_values={"ids": 0})(b)
        for k in ("ids", "emb"):
            assert torch.equal(out[0][k], want[k]), k
        assert torch.equal(out[1], want["attention_mask"]) and torch.equal(out[2], want["lengths"])


@pytest.mark.parametrize("options", [{}, {"plan": BucketPlan((8, 16, 64))}, {"side": "left", "multiple": 4}])
def test_a_collate_reusing_layouts_by_width_pads_as_the_reference(options):
    """Batches of many longest rows in one collate (layouts found by width) against NumPy:
    input_ids a declared sequence, labels stacked at one length (at the width of input_ids
    when it is theirs too), else padded."""
    collate = DynTileCollate(pad_values={"input_ids": 0}, **options)
    rng = np.random.default_rng(3)
    m, left = options.get("multiple", 8), options.get("side") == "left"

    def width(lengths):
        top = int(max(lengths))
        return next(b for b in (8, 16, 64) if b >= top) if "plan" in options else -(-top // m) * m

    for _ in range(150):
        B = int(rng.integers(1, 9))
        n = rng.integers(0, 60, B) if rng.random() < 0.7 else np.full(B, int(rng.integers(0, 60)))
        labels_n = n if rng.random() < 0.5 else rng.integers(0, 60, B)
        samples = [
            {"input_ids": rng.integers(0, 99, k).tolist(), "labels": rng.integers(0, 99, j).tolist()}
            for k, j in zip(n, labels_n)
        ]
        out = collate(samples)
        T = width(n)
        if (labels_n == labels_n[0]).all():
            W = T if (n == labels_n[0]).all() else int(labels_n[0])
        else:
            W = width(labels_n)
        for key, size, fill in (("input_ids", T, 0), ("labels", W, -100)):
            want = np.full((B, size), fill, np.int64)
            for i, s in enumerate(samples):
                k = len(s[key])
                want[i, size - k if left else 0 : size if left else k] = s[key]
            assert out[key].tolist() == want.tolist(), (key, n.tolist(), labels_n.tolist())
        assert out["lengths"].tolist() == n.tolist()
        mask = np.arange(T)[None, :] >= T - n[:, None] if left else np.arange(T)[None, :] < n[:, None]
        assert out["attention_mask"].tolist() == mask.tolist()
