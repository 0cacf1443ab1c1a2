"""Bad input to the loaders gets an error that names the sample, key or parameter, and the fix."""

import numpy as np
import pytest

from loaders import BucketBatchSampler, DynTileCollate, PackedCollate, PackingBatchSampler


@pytest.mark.parametrize(
    "batch, message",
    [
        ([{"input_ids": [1, 2], "src": "a"}, {"input_ids": [3]}], "sample 1 is missing key 'src'"),
        ([{"input_ids": [1, 2]}, {"input_ids": [3], "src": 1}], "sample 1 has extra key 'src'"),
        ([{"input_ids": [1]}, {"input_ids": [3]}, {"input_ids": [3], "n": 1}], "sample 2 has extra key 'n'"),
    ],
)
def test_packed_collate_names_a_sample_whose_keys_differ(batch, message):
    with pytest.raises(KeyError, match=message):
        PackedCollate([(2, 8)])(batch)
    with pytest.raises(KeyError, match=message):  # as DynTileCollate says it
        DynTileCollate()(batch)


@pytest.mark.parametrize("big_first", [True, False])
def test_ints_past_int64_with_int64_ones_are_named_not_blamed_on_floats(big_first):
    batch = [{"input_ids": [2**63 + 1, 2**63 + 3]}, {"input_ids": [5]}]
    batch = batch if big_first else batch[::-1]
    big = 0 if big_first else 1
    with pytest.raises(TypeError, match=rf"sample {big} holds ints that do not fit int64") as e:
        DynTileCollate()(batch)
    assert "floats" not in str(e.value)


@pytest.mark.parametrize("make", [DynTileCollate, lambda: PackedCollate([(2, 8)])])
@pytest.mark.parametrize("value", [2**70, -(2**63) - 1, 2**700])
def test_a_number_key_past_int64_names_key_and_sample(make, value):
    batch = [{"input_ids": [1], "n": 3}, {"input_ids": [5], "n": value}]
    with pytest.raises(ValueError, match=r"key 'n': sample 1 holds .* which int64 .* cannot hold"):
        make()(batch)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"max_tokens": 2**63}, r"max_tokens=9223372036854775808 is past int64's range"),
        ({"max_tokens": 64, "seq_len": 2**64}, r"seq_len=18446744073709551616 is past int64's range"),
        ({"batch_rows": 2**62, "seq_len": 64}, r"batch_rows=4611686018427387904 rows of seq_len=64 .* int64"),
    ],
)
def test_packing_sizes_past_int64_name_the_parameter(options, message):
    with pytest.raises(ValueError, match=message):
        PackingBatchSampler([5, 3, 6, 2, 7, 1], **options)


def test_packed_collate_shapes_past_int64_name_the_parameters():
    with pytest.raises(ValueError, match=r"batch_rows=.* rows of seq_len=64 .* past int64's range"):
        PackedCollate([(2**62, 64)])


def test_lengths_that_disagree_with_the_sampler_are_named_under_bucket_rows():
    lengths = np.array([3, 4, 5, 6, 30, 31])
    sampler = BucketBatchSampler(lengths, max_tokens=64, max_buckets=2, shuffle=False)
    collate = DynTileCollate(plan=sampler.plan, bucket_rows=sampler.batch_sizes)
    small_bucket = next(b for b in sampler if len(b) > sampler.batch_sizes[-1])
    wrong = [{"input_ids": list(range(31))} for _ in small_bucket]  # the dataset's lengths differ
    with pytest.raises(ValueError, match="the samples' lengths disagree with the lengths the sampler"):
        collate(wrong)


@pytest.mark.parametrize("make", [DynTileCollate, lambda: PackedCollate([(1, 8)])])
def test_a_label_fill_that_float8_would_round_is_refused(make):
    import torch

    def labels(n):
        return torch.ones(n, dtype=torch.float8_e4m3fn)

    batch = [{"input_ids": [1, 2, 3], "labels": labels(3)}, {"input_ids": [1], "labels": labels(1)}]
    with pytest.raises(ValueError, match=r"'labels'.*fill=-100 cannot be stored exactly .* would be -96"):
        make()(batch)


@pytest.mark.parametrize(
    "options, key",
    [({}, "packing"), ({"flash_attention_kwargs": True}, "cu_seq_lens_q"), ({"return_stats": True}, None)],
)
def test_packed_collate_refuses_a_sample_key_its_output_would_replace(options, key):
    from loaders.collate_stats import STATS_KEY

    key = key or STATS_KEY
    batch = [{"input_ids": [1, 2], key: 0}, {"input_ids": [3], key: 1}]
    with pytest.raises(ValueError, match=rf"the samples have the key '{key}', which PackedCollate's output"):
        PackedCollate([(2, 8)], **options)(batch)
    PackedCollate([(2, 8)])([{"input_ids": [1, 2], "mine": 0}, {"input_ids": [3], "mine": 1}])  # others kept


@pytest.mark.parametrize("make", [DynTileCollate, lambda: PackedCollate([(2, 8)])])
@pytest.mark.parametrize("second", ["int32", "float64"])
def test_both_collates_refuse_to_promote_one_key_across_samples(make, second):
    import torch

    first = torch.float32 if second == "float64" else torch.int64
    batch = [
        {"input_ids": torch.ones(2, dtype=first)},
        {"input_ids": torch.ones(1, dtype=getattr(torch, second))},
    ]
    with pytest.raises(TypeError, match=rf"sample 1 has dtype torch.{second}, but sample 0 has dtype"):
        make()(batch)
