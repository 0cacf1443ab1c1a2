"""pack_lengths / pack_rows / packing_shapes against slow references and invariants."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dyntile.planning.packing import PackedBatch, pack_lengths, pack_rows, packing_shapes
from shared_data import load_shared

# --------------------------------------------------------------------------- references


def best_fit_reference(sizes, open_caps, n_full):
    """Obviously correct best fit: scan every bin; least room that fits, ties to the last bin
    that reached that room (the kernel's LIFO stacks)."""
    from dyntile.cpu.packing import best_fit  # noqa: F401  (the thing under test lives there)

    room, stamp, caps, item_bin, clock = [], [], [], [], 0
    for s, cap, nf in zip(sizes, open_caps, n_full):
        best = None
        if nf == 0:
            for b, r in enumerate(room):
                if r is not None and r >= s and (best is None or (r, -stamp[b]) < (room[best], -stamp[best])):
                    best = b
        if best is None:
            for _ in range(nf):
                room.append(None), stamp.append(0), caps.append(cap)  # full chunk rows: out of the search
            room.append(cap), stamp.append(0), caps.append(cap)
            best = len(room) - 1
        room[best] -= s
        clock += 1
        stamp[best] = clock
        item_bin.append(best)
    return np.array(item_bin), np.array(caps)


def check_epoch(L, batches, shapes, overflow="extend", num_replicas=1):
    """Every invariant of an epoch of packed batches."""
    L = np.asarray(L)
    seen = np.concatenate([b.sample_order for b in batches]) if batches else np.zeros(0, int)
    counts = np.bincount(seen, minlength=L.size)
    assert counts.size == L.size and np.all(counts >= 1), "every sample at least once"
    repeats = int(counts.sum()) - L.size
    assert repeats <= (num_replicas - 1) * len({b.shape for b in batches}), "at most R - 1 repeats per shape"
    for b in batches:
        assert np.unique(b.sample_order).size == b.sample_order.size, "no sample twice in a batch"
    assert len(batches) % num_replicas == 0
    for k in range(0, len(batches), num_replicas):
        assert len({b.shape for b in batches[k : k + num_replicas]}) == 1, "one shape per step"
    for b in batches:
        B, T = b.shape
        assert b.shape in shapes
        assert np.all((b.rows >= 0) & (b.rows < B))
        assert np.all(b.offsets + b.sizes <= T), "no row over T"
        # pieces of one row tile [0, used) without gaps or overlaps, in order
        for r in np.unique(b.rows):
            m = b.rows == r
            assert np.array_equal(b.offsets[m], np.cumsum(b.sizes[m]) - b.sizes[m])
        # pieces of a sample cover it whole, in order
        for i in np.unique(b.indices):
            m = b.indices == i
            assert np.array_equal(b.starts[m], np.cumsum(b.sizes[m]) - b.sizes[m])
            assert b.sizes[m].sum() == L[i]
        # the decoder recovers the packer's rows from the lengths in yield order
        d = pack_rows(L[b.sample_order], shapes, overflow=overflow)
        assert d.shape == b.shape
        assert np.array_equal(b.sample_order[d.indices], b.indices)
        for f in ("rows", "offsets", "sizes", "starts"):
            assert np.array_equal(getattr(d, f), getattr(b, f)), f


# --------------------------------------------------------------------------- kernel


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=60), st.integers(0, 1))
def test_best_fit_kernel_matches_reference(sizes, split):
    from dyntile.cpu.packing import best_fit

    cap = 40
    sizes = np.array(sizes, np.int64)
    n_full = (np.arange(sizes.size) % 5 == 0).astype(np.int64) * split * 2
    open_caps = np.full(sizes.size, cap, np.int64)
    got_bin, got_cap = best_fit(sizes, open_caps, n_full, cap)
    ref_bin, ref_cap = best_fit_reference(sizes.tolist(), open_caps.tolist(), n_full.tolist())
    assert np.array_equal(got_bin, ref_bin) and np.array_equal(got_cap, ref_cap)


def test_best_fit_kernel_two_capacities():
    from dyntile.cpu.packing import best_fit

    rng = np.random.default_rng(3)
    sizes = rng.integers(0, 70, 300)
    caps = np.where(sizes > 32, 72, 32).astype(np.int64)
    got = best_fit(sizes, caps, np.zeros(300, np.int64), 72)
    ref = best_fit_reference(sizes.tolist(), caps.tolist(), [0] * 300)
    assert np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1])


# --------------------------------------------------------------------------- packer invariants


@settings(max_examples=40, deadline=None)
@given(
    L=st.lists(st.integers(0, 50), min_size=1, max_size=120),
    T=st.sampled_from([8, 16, 24, 48]),
    budget_rows=st.integers(1, 5),
    overflow=st.sampled_from(["extend", "split"]),
    R=st.integers(1, 3),
    pool=st.sampled_from([None, 1, 7]),
    seed=st.integers(0, 3),
)
def test_pack_invariants(L, T, budget_rows, overflow, R, pool, seed):
    L = np.array(L)
    kw = dict(max_tokens=max(budget_rows * T, int(L.max()) + 8, 8), multiple=8, overflow=overflow)
    try:
        shapes = packing_shapes(L, T, **kw)
        batches = pack_lengths(L, T, **kw, num_replicas=R, pool_size=pool, seed=seed)
    except ValueError as e:  # documented refusals only; never for the number of ranks
        assert "rows of one batch" in str(e), e
        return
    check_epoch(L, batches, shapes, overflow, R)
    assert len({b.shape for b in batches}) <= 2


def test_deterministic_per_seed_and_epoch():
    L = np.random.default_rng(0).integers(1, 100, 500)
    a = pack_lengths(L, 128, max_tokens=1024, seed=1, epoch=2)
    b = pack_lengths(L, 128, max_tokens=1024, seed=1, epoch=2)
    c = pack_lengths(L, 128, max_tokens=1024, seed=1, epoch=3)
    assert len(a) == len(b) and all(x.same_as(y) for x, y in zip(a, b))
    assert not all(x.same_as(y) for x, y in zip(a, c))


def test_no_shuffle_is_stable_and_full_rows():
    L = np.full(64, 8)
    batches = pack_lengths(L, 32, max_tokens=128, shuffle=False)
    assert [b.shape for b in batches] == [(4, 32)] * 4
    assert all(b.padded_fraction == 0 for b in batches)


def test_zero_length_samples_take_no_slot():
    L = np.array([0, 5, 0, 8, 0, 3, 0])
    batches = pack_lengths(L, 8, max_tokens=16)
    check_epoch(L, batches, ((2, 8),))
    assert sum(b.num_tokens for b in batches) == 16
    zero = np.concatenate([b.sizes[np.isin(b.indices, [0, 2, 4, 6])] for b in batches])
    assert zero.size == 4 and np.all(zero == 0)
    only_empty = pack_lengths([0, 0, 0], max_tokens=16)
    assert len(only_empty) == 1 and only_empty[0].num_tokens == 0
    assert pack_lengths(np.zeros(0, np.int64), 8, max_tokens=16) == []


def test_second_shape_and_split():
    L = np.array([3, 30, 5, 2, 17, 1, 6] + [9] * 12)
    two = pack_lengths(L, 16, max_tokens=64, overflow="extend")
    assert {b.shape for b in two} == {(4, 16), (2, 32)}
    for b in two:  # a batch is [B2, T2] exactly when it holds a long sample
        assert (b.shape == (2, 32)) == bool(np.any(L[b.sample_order] > 16))
    check_epoch(L, two, ((4, 16), (2, 32)))
    one = pack_lengths(L, 16, max_tokens=64, overflow="split")
    assert {b.shape for b in one} == {(4, 16)}
    check_epoch(L, one, ((4, 16),), "split")
    piece = [b for b in one if 1 in b.indices][0]
    m = piece.indices == 1
    assert piece.sizes[m].tolist() == [16, 14] and piece.starts[m].tolist() == [0, 16]


def test_replicas_balance_and_each_sample_once():
    L = np.random.default_rng(1).integers(1, 60, 333)
    for R in (1, 2, 3, 8):
        batches = pack_lengths(L, 64, max_tokens=256, num_replicas=R, seed=5)
        check_epoch(L, batches, packing_shapes(L, 64, max_tokens=256), num_replicas=R)


def test_replicas_need_breaking_rows():
    # 3 rows of 16, B = 1, 4 ranks: rows are broken up so that 4 batches exist, each sample once
    L = np.array([8, 8, 8, 8, 8, 8])
    batches = pack_lengths(L, 16, batch_rows=1, num_replicas=4)
    assert len(batches) == 4
    check_epoch(L, batches, ((1, 16),), num_replicas=4)
    assert sorted(np.concatenate([b.sample_order for b in batches]).tolist()) == list(range(6))
    # 8 ranks: 6 rows at most, so 2 samples are repeated rather than a rank left without a batch
    batches = pack_lengths(L, 16, batch_rows=1, num_replicas=8)
    assert len(batches) == 8 and all(b.sample_order.size == 1 for b in batches)
    check_epoch(L, batches, ((1, 16),), num_replicas=8)
    assert sorted(np.bincount(np.concatenate([b.sample_order for b in batches])).tolist()) == [
        1,
        1,
        1,
        1,
        2,
        2,
    ]


def sample_counts(batches, n):
    return np.bincount(np.concatenate([b.sample_order for b in batches]), minlength=n)


@pytest.mark.parametrize("n_long, R, repeats", [(6, 4, 2), (6, 3, 0), (130, 4, 2), (132, 4, 0)])
def test_one_row_long_batches_repeat_at_most_R_minus_1(n_long, R, repeats):
    # [1, 104] batches hold one long sample each: n_long batches, rounded up to a multiple of R
    L = np.array([100] * n_long + [10] * 40)
    shapes = packing_shapes(L, 64, max_tokens=150)
    assert shapes == ((2, 64), (1, 104))
    for epoch in range(3):
        batches = pack_lengths(L, 64, max_tokens=150, num_replicas=R, epoch=epoch)
        check_epoch(L, batches, shapes, num_replicas=R)
        counts = sample_counts(batches, L.size)
        assert counts.sum() - L.size == repeats
        assert np.all(counts[n_long:] == 1), "only long samples are repeated"
        assert sum(b.shape == (1, 104) for b in batches) == -(-n_long // R) * R


def test_short_samples_leave_long_rows_before_repeating():
    # five 5s top up long rows; 60 alone in the short shape: 3 ranks need 3 short batches,
    # so two 5s leave their long rows (each sample still exactly once)
    L = np.array([96] + [90] * 5 + [60] + [5] * 5)
    shapes = packing_shapes(L, 64, max_tokens=128)
    for epoch in range(4):
        batches = pack_lengths(L, 64, max_tokens=128, num_replicas=3, epoch=epoch)
        check_epoch(L, batches, shapes, num_replicas=3)
        assert np.all(sample_counts(batches, L.size) == 1)
        assert sum(b.shape == shapes[0] for b in batches) == 3


def test_small_pools_never_fail_by_epoch():
    # the packing (17 alone, or on top of 92) depends on the epoch's pools; no epoch fails
    L = np.array([92, 109, 17])
    shapes = packing_shapes(L, 64, max_tokens=506)
    for epoch in range(8):
        batches = pack_lengths(L, 64, max_tokens=506, pool_size=2, num_replicas=2, epoch=epoch)
        check_epoch(L, batches, shapes, num_replicas=2)


def test_random_small_configs_keep_ranks_in_step():
    rng = np.random.default_rng(2024)
    for trial in range(150):
        L = rng.integers(0, 120, int(rng.integers(1, 25)))
        T = int(rng.choice([16, 32, 64]))
        overflow = str(rng.choice(["extend", "split"]))
        kw = dict(max_tokens=int(rng.integers(max(T, 8), 8 * T)), multiple=8, overflow=overflow)
        try:
            shapes = packing_shapes(L, T, **kw)
        except ValueError as e:
            assert "needs" in str(e), e  # a sample over the budget: refused by the shapes already
            continue
        R, pool = int(rng.integers(1, 5)), int(rng.integers(2, 9))
        for epoch in range(4):
            batches = pack_lengths(L, T, **kw, num_replicas=R, pool_size=pool, seed=trial, epoch=epoch)
            check_epoch(L, batches, shapes, overflow, R)
            for b in batches:
                assert b.num_tokens <= b.shape[0] * b.shape[1]


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(seq_len=12, max_tokens=64), "multiple of multiple=8"),
        (dict(seq_len=16, max_tokens=8), "smaller than one row"),
        (dict(seq_len=16, max_tokens=40, overflow="extend"), "sample 1 of length 50 needs a row of 56"),
        (dict(seq_len=16, max_tokens=32, overflow="split"), "sample 1 of length 50 needs 4 rows"),
        (dict(seq_len=16, max_tokens=64, overflow="error"), "sample 1 has length 50"),
        (dict(seq_len=16, max_tokens=64, overflow="cut"), "overflow should be one of"),
        (dict(seq_len=16), "token budget"),
        (dict(seq_len=16, batch_rows=8, max_tokens=64), "exceed max_tokens=64"),
    ],
)
def test_bad_input_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        pack_lengths([3, 50, 7], **kw)


def test_bad_lengths():
    with pytest.raises(ValueError, match=r"lengths\[1\]=-2"):
        pack_lengths([3, -2], 8, max_tokens=8)
    with pytest.raises(TypeError, match="dtype float64"):
        pack_lengths([3.5, 2.0], 8, max_tokens=8)
    with pytest.raises(ValueError, match="shape"):
        pack_lengths([[3, 2]], 8, max_tokens=8)


def test_default_seq_len_from_data_and_plan():
    from dyntile.planning import BucketPlan

    assert packing_shapes([3, 17, 40], max_tokens=128) == ((1, 72),)  # 1 row of 72 < 3 rows of 40
    assert packing_shapes([3, 17, 40], batch_rows=3) == ((3, 40),)
    L = np.random.default_rng(0).integers(1, 200, 5000)
    ((B, T),) = packing_shapes(L, max_tokens=4096)
    assert T >= L.max() and T % 8 == 0 and B * T <= 4096
    with pytest.raises(ValueError, match="sample 2 of length 40 needs a row of 40"):
        packing_shapes([3, 17, 40], max_tokens=32)  # T capped at 32; a [1, 40] row is over budget
    assert packing_shapes([3, 17, 20], max_tokens=128, plan=BucketPlan((16, 64))) == ((2, 64),)


def test_pack_rows_decoder_reference():
    # next fit by hand
    d = pack_rows([6, 1, 5, 3, 0, 8], [(4, 8)])
    assert d.rows.tolist() == [0, 0, 1, 1, 1, 2] and d.offsets.tolist() == [0, 6, 0, 5, 8, 0]
    with pytest.raises(ValueError, match="need 3 rows"):
        pack_rows([6, 5, 4], [(2, 8)])
    with pytest.raises(ValueError, match="longer than the rows"):
        pack_rows([6, 9], [(2, 8)])
    assert isinstance(d, PackedBatch) and d.row_splits.tolist() == [0, 2, 5, 6, 6]


@settings(max_examples=60, deadline=None)
@given(
    L=st.lists(st.integers(0, 30), min_size=1, max_size=40),
    T=st.sampled_from([8, 16]),
    overflow=st.sampled_from(["split", "extend"]),
)
def test_pack_rows_pieces_lie_back_to_back(L, T, overflow):
    """The samples' tokens in order are the rows' contents without their padding tails
    (what collate_packed relies on to pad each leaf with one pad_jagged call)."""
    # 256 rows hold any draw: at most 40 samples of at most ceil(30 / 8) = 4 rows each
    shapes = [(256, T)] if overflow == "split" else [(256, T), (256, 32)]
    d = pack_rows(L, shapes, overflow=overflow)
    B, T = d.shape
    assert np.all(np.diff(d.indices) >= 0) and np.all(np.diff(d.rows) >= 0)
    token_slots = [np.arange(r * T + o, r * T + o + n) for r, o, n in zip(d.rows, d.offsets, d.sizes)]
    used = np.bincount(d.rows, weights=d.sizes, minlength=B).astype(int)
    row_prefixes = [np.arange(r * T, r * T + used[r]) for r in range(B)]
    np.testing.assert_array_equal(np.concatenate(token_slots), np.concatenate(row_prefixes))
    within = [np.arange(st, st + n) for st, n in zip(d.starts, d.sizes)]  # each sample's tokens in order
    np.testing.assert_array_equal(np.concatenate(within), np.concatenate([np.arange(n) for n in L]))


def test_real_lengths_padding_and_shapes():
    L = load_shared("lengths_cpython_docstrings.npy")
    for seq_len, n_shapes in ((1600, 1), (None, 2)):  # the longest sample's T; the T of least cost
        batches = pack_lengths(L, seq_len, max_tokens=8192, seed=0)
        shapes = packing_shapes(L, seq_len, max_tokens=8192)
        check_epoch(L, batches, shapes)
        tokens = sum(b.num_tokens for b in batches)
        slots = sum(b.shape[0] * b.shape[1] for b in batches)
        assert tokens == L.sum()
        assert 1 - tokens / slots < 0.02 and len({b.shape for b in batches}) == len(shapes) == n_shapes
    two = pack_lengths(L, 512, max_tokens=16384, seed=0)
    assert len({b.shape for b in two}) == 2
    seen = np.concatenate([b.sample_order for b in two])
    assert np.array_equal(np.sort(seen), np.arange(L.size))


@pytest.mark.parametrize("n, nbins", [(0, 1), (1, 1), (257, 3), (1000, 997)])
def test_group_by_bin_is_a_stable_argsort(n, nbins):
    from dyntile.cpu.packing import group_by_bin

    key = np.random.default_rng(n).integers(0, nbins, n).astype(np.int64)
    assert np.array_equal(group_by_bin(key, nbins), np.argsort(key, kind="stable"))


def test_uint64_lengths_past_int64_are_named():
    """They were cast to int64 first and reported wrapped (lengths[0]=-9223372036854775808)."""
    from dyntile.planning import pack_lengths

    with pytest.raises(
        ValueError, match=r"lengths should be below 2\*\*63, but got lengths\[0\]=9223372036854775808"
    ):
        pack_lengths(np.array([2**63], np.uint64), (4, 64))
