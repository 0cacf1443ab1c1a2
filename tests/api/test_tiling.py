"""tile / untile against the loop reference; round trips; errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dyntile as dt
from reference import tile_reference
from test_padding import KERNEL_DTYPES, random_array


@settings(max_examples=50, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    lead=st.lists(st.integers(0, 3), max_size=2),
    M=st.integers(0, 19),
    N=st.integers(0, 19),
    tm=st.integers(1, 9),
    tn=st.integers(1, 9),
    dtype=st.sampled_from(KERNEL_DTYPES + ["complex128"]),
    view=st.sampled_from(["c", "T", "rev", "step"]),
)
def test_tile_matches_reference_and_round_trips(seed, lead, M, N, tm, tn, dtype, view):
    rng = np.random.default_rng(seed)
    shape = tuple(lead) + (M, N)
    if view == "T":
        x = random_array(rng, tuple(lead) + (N, M), dtype).swapaxes(-1, -2)
    elif view == "rev":
        x = random_array(rng, shape, dtype)[..., ::-1, ::-1]
    elif view == "step":
        x = random_array(rng, tuple(lead) + (M, 2 * N), dtype)[..., ::2]
    else:
        x = random_array(rng, shape, dtype)
    fill = 1
    t = dt.tile(x, (tm, tn), fill=fill)
    assert t.shape == dt.tiled_shape(shape, (tm, tn))
    np.testing.assert_array_equal(t, tile_reference(x, tm, tn, fill=np.array(fill).astype(dtype)))
    np.testing.assert_array_equal(dt.untile(t, (M, N)), x)
    np.testing.assert_array_equal(dt.untile(t, shape), x)


def test_tile_divides_exactly_and_out():
    x = np.arange(8 * 256, dtype=np.float32).reshape(8, 256)
    out = np.empty((1, 2, 8, 128), np.float32)
    assert dt.tile(x, (8, 128), out=out) is out
    np.testing.assert_array_equal(out[0, 1], x[:, 128:])
    back = np.empty((8, 256), np.float32)
    assert dt.untile(out, (8, 256), out=back) is back
    np.testing.assert_array_equal(back, x)
    nc = np.empty((2, 8, 256), np.float32)[0]
    dt.untile(out, (8, 256), out=nc[:, :])
    np.testing.assert_array_equal(nc, x)


def test_tile_errors():
    x = np.ones((5, 7))
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        dt.tile(np.ones(5), (2, 2))
    with pytest.raises(ValueError, match="tile should be a pair"):
        dt.tile(x, 4)
    with pytest.raises(ValueError, match=r"tile\[1\] should be a positive integer"):
        dt.tile(x, (2, 0))
    with pytest.raises(ValueError, match="out has shape"):
        dt.tile(x, (2, 2), out=np.empty((3, 3, 2, 2)))
    with pytest.raises(ValueError, match="out of range for uint8"):
        dt.tile(np.ones((5, 7), np.uint8), (2, 2), fill=-1)
    t = dt.tile(x, (2, 4))
    with pytest.raises(ValueError, match="untile never drops tiles"):
        dt.untile(t, (3, 7))
    with pytest.raises(ValueError, match="at least 4 dimensions"):
        dt.untile(x, (5, 7))
    with pytest.raises(ValueError, match="does not match the leading axes"):
        dt.untile(dt.tile(np.ones((2, 5, 7)), (2, 4)), (3, 5, 7))


def test_out_must_not_overlap_the_input():
    buf = np.arange(16.0)
    with pytest.raises(ValueError, match="out overlaps an input"):
        dt.tile(buf.reshape(4, 4), (2, 2), out=buf.reshape(2, 2, 2, 2))
    with pytest.raises(ValueError, match="out overlaps an input"):
        dt.untile(buf.reshape(2, 2, 2, 2), (4, 4), out=buf.reshape(4, 4))
    buf = np.arange(1.0, 9.0)
    with pytest.raises(ValueError, match="out overlaps an input"):
        dt.pad_to(buf[:4], (8,), side="left", out=buf)
    big = np.arange(20.0)
    assert dt.pad_to(big[:4], (8,), out=big[10:18]).tolist() == [0, 1, 2, 3, 0, 0, 0, 0]  # disjoint: fine


def test_untile_takes_nested_lists():
    assert dt.untile([[[[1, 2], [3, 4]]]], (2, 2)).tolist() == [[1, 2], [3, 4]]


def test_string_arrays_are_refused_not_padded_with_the_string_zero():
    """A fill of 0 in a string dtype is the string '0': tile wrote it into the edge tiles."""
    for tile in ((4, 4), (2, 2)):  # refused as pad_batch refuses them
        with pytest.raises(TypeError, match="<U2 is a string dtype; dyntile pads and tiles numbers"):
            dt.tile(np.array([["ab", "c"], ["d", "e"]]), tile)
