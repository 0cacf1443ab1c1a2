"""One overflow vocabulary: every component checks ``overflow=`` through dyntile.overflow."""

import numpy as np
import pytest

from dyntile.overflow import BUCKET_OVERFLOWS, OVERFLOWS, PACKING_OVERFLOWS, check_overflow
from dyntile.planning.packing import pack_rows, packing_shapes


def test_each_component_takes_a_subset_of_one_vocabulary():
    assert set(BUCKET_OVERFLOWS) <= set(OVERFLOWS) and set(PACKING_OVERFLOWS) <= set(OVERFLOWS)
    assert set(BUCKET_OVERFLOWS) | set(PACKING_OVERFLOWS) == set(OVERFLOWS)
    for policy in PACKING_OVERFLOWS:
        assert check_overflow(policy, PACKING_OVERFLOWS) == policy


@pytest.mark.parametrize(
    "bad, match",
    [
        ("truncate", r"'truncate' \(cut it to the largest shape\), which does not apply here"),
        ("grow", r"one of \('extend', 'split', 'error'\), but got 'grow'$"),
        (None, "but got None"),
    ],
)
def test_a_word_another_component_takes_is_named_as_such(bad, match):
    with pytest.raises(ValueError, match=match):
        check_overflow(bad, PACKING_OVERFLOWS)
    with pytest.raises(ValueError, match="overflow should be one of"):
        pack_rows([3, 20], [(4, 8), (2, 24)], overflow=bad)


def test_the_old_packing_name_reads_as_extend_with_a_warning():
    with pytest.warns(FutureWarning, match="now called 'extend'"):
        assert packing_shapes([3, 20], 8, max_tokens=32, overflow="second_shape") == ((4, 8), (1, 24))
    with pytest.raises(ValueError):
        check_overflow("second_shape", BUCKET_OVERFLOWS)  # not a bucket word, old or new


def test_extend_gives_the_long_sample_a_second_shape():
    b = pack_rows(np.array([3, 20, 2]), [(4, 8), (2, 24)], overflow="extend")
    assert b.shape == (2, 24)
