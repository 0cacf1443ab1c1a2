"""The GEMM block-size tables (include/gemm_blocking.h): one entry per ISA and dtype,
each cache block a multiple of its register block, blocks sized for the caches; the
generic table and AMD Zen 4's AVX-512 rows alike."""

import numpy as np
import pytest

import dyntile
from dyntile.cpu import gemm

TABLE = gemm.blocking_table()
TUNINGS = ("generic", "zen4")
BUILTIN = {(t, isa, dt): bs for t in TUNINGS for (isa, dt), bs in gemm.blocking_table(t).items()}
ITEMSIZE = {"float32": 4, "float64": 8}


def test_one_entry_per_isa_and_dtype():
    for tuning in TUNINGS:
        assert set(gemm.blocking_table(tuning)) == {
            (isa, dt) for isa in ("ref", "avx2", "avx512") for dt in ITEMSIZE
        }


def test_zen4_differs_only_in_avx512_cache_blocks():
    generic, zen4 = gemm.blocking_table("generic"), gemm.blocking_table("zen4")
    for key in generic:
        if key[0] != "avx512":
            assert zen4[key] == generic[key]
        else:
            assert {zen4[key][r] for r in ("mr", "nr")} == {generic[key][r] for r in ("mr", "nr")}


def test_table_in_use_is_this_cpus():
    assert TABLE == gemm.blocking_table(gemm.cpu_tuning())


def cpuinfo_is_zen4():
    """AMD family 25 (19h) with AVX-512, read from /proc/cpuinfo (an independent check)."""
    try:
        text = open("/proc/cpuinfo").read().split("\n\n")[0]
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    return (
        fields.get("vendor_id") == "AuthenticAMD"
        and fields.get("cpu family") == "25"
        and "avx512f" in fields.get("flags", "").split()
    )


def test_cpu_tuning_matches_cpuinfo():
    assert gemm.cpu_tuning() == ("zen4" if cpuinfo_is_zen4() else "generic")


def test_unknown_tuning_is_rejected():
    with pytest.raises(ValueError, match="unknown GEMM tuning 'zen9'"):
        gemm.blocking_table("zen9")


@pytest.mark.parametrize("key", sorted(BUILTIN))
def test_cache_blocks_are_multiples_of_register_blocks(key):
    bs = BUILTIN[key]
    assert all(bs[name] > 0 for name in ("mr", "nr", "mc", "kc", "nc")), bs
    assert bs["jr_outer"] in (False, True), bs
    assert bs["mc"] % bs["mr"] == 0, f"{key}: MC={bs['mc']} is not a multiple of MR={bs['mr']}"
    assert bs["nc"] % bs["nr"] == 0, f"{key}: NC={bs['nc']} is not a multiple of NR={bs['nr']}"


@pytest.mark.parametrize("key", sorted(BUILTIN))
def test_register_blocks_fit_the_edge_tile_scratch(key):
    mr_max, nr_max = gemm.REGISTER_BLOCK_MAX
    assert BUILTIN[key]["mr"] <= mr_max and BUILTIN[key]["nr"] <= nr_max


@pytest.mark.parametrize("key", sorted(BUILTIN))
def test_blocks_fit_their_cache_level(key):
    """BLIS's order (jr_outer): the KC x NR micro-panel of B in 3/4 of a 32 KiB L1d, the
    MC x KC block of A in 7/8 of a 256 KiB L2, B's block in 8 MiB of L3. Swapped order:
    the MR x KC micro-panel of A in 3/4 of a 48 KiB L1d, KC x NC of B in 3/4 of 2 MiB.
    Zen 4's AVX-512 rows (half the operand bandwidth per cycle): A's MC x KC block in
    3/4 of its 1 MiB L2, B's block in 8 MiB of L3."""
    tuning, isa, dtype = key
    bs, item = BUILTIN[key], ITEMSIZE[dtype]
    if tuning == "zen4" and isa == "avx512":
        assert bs["mc"] * bs["kc"] * item <= 768 * 1024
        assert bs["kc"] * bs["nc"] * item <= 8 * 1024 * 1024
    elif bs["jr_outer"]:
        assert bs["kc"] * bs["nr"] * item <= 24 * 1024
        assert bs["mc"] * bs["kc"] * item <= 224 * 1024
        assert bs["kc"] * bs["nc"] * item <= 8 * 1024 * 1024
    else:
        assert bs["mr"] * bs["kc"] * item <= 36 * 1024
        assert bs["kc"] * bs["nc"] * item <= 1536 * 1024


@pytest.mark.parametrize("key", [k for k in sorted(BUILTIN) if k[1] in ("avx2", "avx512")])
def test_simd_register_tiles_fit_the_register_file(key):
    """Accumulators + two B vectors + one A broadcast fit 16 ymm (AVX2) / 32 zmm (AVX-512)."""
    _, isa, dtype = key
    lanes = (32 if isa == "avx2" else 64) // ITEMSIZE[dtype]
    bs = BUILTIN[key]
    assert bs["nr"] % lanes == 0
    vectors = bs["mr"] * bs["nr"] // lanes + bs["nr"] // lanes + 1
    assert vectors <= (16 if isa == "avx2" else 32)


@pytest.fixture
def restore_blocks():
    direct = gemm._set_direct_flops(0)  # the small products below take the packed kernels
    yield
    gemm._set_direct_flops(direct)
    gemm._reset_cache_blocks()
    assert gemm.blocking_table() == gemm.blocking_table(gemm.cpu_tuning())


@pytest.mark.parametrize("dtype", sorted(ITEMSIZE))
@pytest.mark.parametrize("blocks", [{"kc": 7}, {"kc": 3000}, "one panel", {"jr_outer": True}])
def test_products_stay_exact_under_other_cache_blocks(dtype, blocks, restore_blocks):
    """Any legal cache blocks give NumPy's product: tiny KC (many passes over C), one
    MR x NR panel per block, the other loop order; one and two threads."""
    isa = gemm.isa()
    bs = TABLE[isa, dtype]
    if blocks == "one panel":
        blocks = {"mc": bs["mr"], "nc": bs["nr"]}
    old = gemm._set_cache_blocks(isa, dtype, **blocks)
    assert old == {name: bs[name] for name in ("mc", "kc", "nc", "jr_outer")}
    assert all(gemm.blocking_table()[isa, dtype][name] == v for name, v in blocks.items())
    rng = np.random.default_rng(3)
    tol = 1e-4 if dtype == "float32" else 1e-12
    # edge panels of B of under and over half NR wide, a row edge of A, and a C that is
    # not row-major (the edge kernels' masked stores need one)
    for m, k, n in ((131, 77, 45), (60, 50, bs["nr"] + bs["nr"] // 2 + 3), (29, 40, bs["nr"] - 1)):
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        for threads in (1, 2):
            got = dyntile.matmul(a, b, threads=threads)
            np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * 10)
            out = np.zeros((n, m), dtype).T
            dyntile.matmul(a, b, out=out, threads=threads)
            np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * 10)
            wide = np.full((m, n + 40), 7, dtype)  # the masked stores stay inside C's columns
            dyntile.matmul(a, b, out=wide[:, 3 : n + 3], threads=threads)
            np.testing.assert_allclose(wide[:, 3 : n + 3], ref, rtol=tol, atol=tol * 10)
            assert (wide[:, :3] == 7).all() and (wide[:, n + 3 :] == 7).all()


def test_set_cache_blocks_rejects_bad_blocks(restore_blocks):
    isa = gemm.isa()
    mr = TABLE[isa, "float32"]["mr"]
    with pytest.raises(ValueError, match=f"MC a multiple of {mr}"):
        gemm._set_cache_blocks(isa, "float32", mc=mr + 1)
    with pytest.raises(ValueError, match="positive"):
        gemm._set_cache_blocks(isa, "float32", kc=0)
    with pytest.raises(ValueError, match="expected an ISA"):
        gemm._set_cache_blocks("sse9", "float32", kc=8)
    assert gemm.blocking_table() == TABLE


def round_up(x, unit):
    return -(-x // unit) * unit


def test_packing_buffer_bytes_follow_the_table():
    bs = TABLE[gemm.isa(), "float32"]
    m, n, k = 2 * bs["mc"] + 1, bs["nc"] + 3, bs["kc"] + 5
    kc = -(-k // 2)  # k splits into two equal KC blocks
    nc = round_up(-(-n // 2), bs["nr"])  # n into two equal NC blocks
    ap = bs["mc"] * kc
    bp = nc * kc
    assert gemm.packing_buffer_bytes("float32", m, n, k, threads=1) == 4 * (ap + bp)
    # a team packs both KC blocks of B at once, within its byte budget
    kgroup_max, kgroup_bytes = gemm.KGROUP_LIMITS
    kgroup = max(1, min(2, kgroup_max, kgroup_bytes // (4 * bp)))
    assert gemm.packing_buffer_bytes("float32", m, n, k, threads=2) == 4 * (2 * ap + kgroup * bp)
    small = gemm.packing_buffer_bytes("float64", 3, 5, 7)
    assert small == 8 * 7 * (
        -(-3 // TABLE[gemm.isa(), "float64"]["mr"]) * TABLE[gemm.isa(), "float64"]["mr"]
        + -(-5 // TABLE[gemm.isa(), "float64"]["nr"]) * TABLE[gemm.isa(), "float64"]["nr"]
    )


def test_packed_b_group_stays_within_its_byte_budget():
    kgroup_max, kgroup_bytes = gemm.KGROUP_LIMITS
    for dtype, item in ITEMSIZE.items():
        bs = TABLE[gemm.isa(), dtype]
        n, k = 4 * bs["nc"], 8 * bs["kc"]
        one = gemm.packing_buffer_bytes(dtype, 1000, n, k, threads=1)
        two = gemm.packing_buffer_bytes(dtype, 1000, n, k, threads=2)
        a_block = bs["mc"] * bs["kc"] * item
        assert two - 2 * a_block <= max(kgroup_bytes, one - a_block)


@pytest.mark.parametrize("threads", [2, 3, 8])
def test_row_slabs_need_enough_rows_per_thread(threads):
    slab_rows, per_thread = gemm.ROW_SLABS
    for m in (1, slab_rows, threads * slab_rows - 1):
        assert gemm.row_slab_count(m, threads) == 0  # the team shares short products
    for m in (threads * slab_rows, 2 * threads * slab_rows - 1, 10**6):
        slabs = gemm.row_slab_count(m, threads)
        assert slabs % threads == 0 and threads <= slabs <= per_thread * threads
        assert m // slabs >= slab_rows
    assert gemm.row_slab_count(10**6, threads) == per_thread * threads
    assert gemm.row_slab_count(10**6, 1) == 0  # one thread: one product


def test_row_slabs_pack_b_per_thread():
    slab_rows, _ = gemm.ROW_SLABS
    bs = TABLE[gemm.isa(), "float32"]
    m, n, k = 2 * slab_rows, bs["nc"], bs["kc"]
    one = gemm.packing_buffer_bytes("float32", m, n, k, threads=1)
    a_block = bs["mc"] * bs["kc"] * 4
    assert gemm.packing_buffer_bytes("float32", m, n, k, threads=2) == 2 * one
    assert gemm.packing_buffer_bytes("float32", m - 1, n, k, threads=2) == 2 * a_block + (one - a_block)


@pytest.mark.parametrize("dtype", sorted(ITEMSIZE))
@pytest.mark.parametrize("size", [1, 5, 383, 385, 1000, 2048, 4097, 9000])
def test_k_and_n_split_into_equal_blocks(dtype, size):
    """KC and NC split k and n evenly (no thin last block); NC stays a multiple of NR."""
    bs = TABLE[gemm.isa(), dtype]
    run = gemm.block_sizes(dtype, 64, size, size)
    assert run["mr"] == bs["mr"] and run["nr"] == bs["nr"] and run["mc"] == bs["mc"]
    assert 1 <= run["kc"] <= bs["kc"] and run["nc"] <= bs["nc"] and run["nc"] % bs["nr"] == 0
    blocks_k, blocks_n = -(-size // bs["kc"]), -(-size // bs["nc"])
    assert -(-size // run["kc"]) == blocks_k  # as few blocks as the table allows
    assert -(-size // run["nc"]) == blocks_n
    assert blocks_k * run["kc"] - size < blocks_k  # the blocks are equal
    assert blocks_n * run["nc"] - size < blocks_n * bs["nr"]


def test_best_isa_is_available():
    assert "ref" in gemm.available_isas()
    assert gemm.isa() == gemm.available_isas()[-1]


def test_tuning_sweep_script_runs_and_restores_the_table(capsys):
    """asv_benches/gemm_tune.py: the table's row first, every combination after, and
    the table back in force when it ends."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[2] / "asv_benches" / "gemm_tune.py"
    spec = importlib.util.spec_from_file_location("gemm_tune", path)
    tune = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tune)
    bs = TABLE[gemm.isa(), "float32"]
    tune.main(["--sizes", "40", "--rounds", "1", "--kc", "16", "24", "--mc", str(bs["mr"])])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("40x40x40 float32 threads=1")
    assert len(lines) == 1 + 1 + 2 and lines[1].endswith("table")
    assert "KC=16" in lines[2] and "KC=24" in lines[3]
    assert gemm.blocking_table() == TABLE
