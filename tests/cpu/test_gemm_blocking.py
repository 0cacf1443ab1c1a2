"""The GEMM block-size table (include/gemm_blocking.h): one entry per ISA and dtype,
each cache block a multiple of its register block, blocks sized for the caches."""
import pytest

from dyntile.cpu import gemm

TABLE = gemm.blocking_table()
ITEMSIZE = {"float32": 4, "float64": 8}


def test_one_entry_per_isa_and_dtype():
    assert set(TABLE) == {(isa, dt) for isa in ("ref", "avx2", "avx512") for dt in ITEMSIZE}


@pytest.mark.parametrize("key", sorted(TABLE))
def test_cache_blocks_are_multiples_of_register_blocks(key):
    bs = TABLE[key]
    assert all(bs[name] > 0 for name in ("mr", "nr", "mc", "kc", "nc")), bs
    assert bs["mc"] % bs["mr"] == 0, f"{key}: MC={bs['mc']} is not a multiple of MR={bs['mr']}"
    assert bs["nc"] % bs["nr"] == 0, f"{key}: NC={bs['nc']} is not a multiple of NR={bs['nr']}"


@pytest.mark.parametrize("key", sorted(TABLE))
def test_register_blocks_fit_the_edge_tile_scratch(key):
    mr_max, nr_max = gemm.REGISTER_BLOCK_MAX
    assert TABLE[key]["mr"] <= mr_max and TABLE[key]["nr"] <= nr_max


@pytest.mark.parametrize("key", sorted(TABLE))
def test_blocks_fit_their_cache_level(key):
    """MR x KC micro-panel of A in 3/4 of a 48 KiB L1d, KC x NC block of B in 3/4 of a 2 MiB L2."""
    bs, item = TABLE[key], ITEMSIZE[key[1]]
    assert bs["mr"] * bs["kc"] * item <= 36 * 1024
    assert bs["kc"] * bs["nc"] * item <= 1536 * 1024


@pytest.mark.parametrize("key", [k for k in sorted(TABLE) if k[0] in ("avx2", "avx512")])
def test_simd_register_tiles_fit_the_register_file(key):
    """Accumulators + two B vectors + one A broadcast fit 16 ymm (AVX2) / 32 zmm (AVX-512)."""
    isa, dtype = key
    lanes = (32 if isa == "avx2" else 64) // ITEMSIZE[dtype]
    bs = TABLE[key]
    assert bs["nr"] % lanes == 0
    vectors = bs["mr"] * bs["nr"] // lanes + bs["nr"] // lanes + 1
    assert vectors <= (16 if isa == "avx2" else 32)


def test_packing_buffer_bytes_follow_the_table():
    bs = TABLE[gemm.isa(), "float32"]
    m, n, k = 2 * bs["mc"] + 1, bs["nc"] + 3, bs["kc"] + 5
    kc = -(-k // 2)                       # k splits into two equal KC blocks
    ap = bs["mc"] * kc
    bp = bs["nc"] * kc
    assert gemm.packing_buffer_bytes("float32", m, n, k, threads=1) == 4 * (ap + bp)
    # a team packs both KC blocks of B at once
    assert gemm.packing_buffer_bytes("float32", m, n, k, threads=2) == 4 * (2 * ap + 2 * bp)
    small = gemm.packing_buffer_bytes("float64", 3, 5, 7)
    assert small == 8 * 7 * (-(-3 // TABLE[gemm.isa(), "float64"]["mr"]) * TABLE[gemm.isa(), "float64"]["mr"]
                             + -(-5 // TABLE[gemm.isa(), "float64"]["nr"]) * TABLE[gemm.isa(), "float64"]["nr"])


def test_best_isa_is_available():
    assert "ref" in gemm.available_isas()
    assert gemm.isa() == gemm.available_isas()[-1]
