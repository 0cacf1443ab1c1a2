"""Options that name keys: a lone string, a mapping given as pairs, refused everywhere alike."""

import pytest
import torch

from dyntile.planning.buckets import BucketPlan
from loaders import DynTileCollate, PackedCollate

NAME_OPTIONS = [
    (DynTileCollate, {"label_keys": "target"}, "label_keys"),
    (DynTileCollate, {"pad_keys": "input_ids"}, "pad_keys"),
    (lambda **o: PackedCollate([(2, 8)], **o), {"label_keys": "labels"}, "label_keys"),
]


@pytest.mark.parametrize("make, options, name", NAME_OPTIONS)
def test_a_string_where_key_names_belong_is_refused(make, options, name):
    with pytest.raises(TypeError, match=rf"{name} should be a collection of key names, but got the string"):
        make(**options)


@pytest.mark.parametrize("make, options, name", NAME_OPTIONS)
def test_a_list_of_one_name_works(make, options, name):
    make(**{name: [options[name]]})


def test_a_one_name_list_of_label_keys_pads_with_the_ignore_index():
    b = [{"input_ids": [5, 6, 7], "target": [1, 0, 1]}, {"input_ids": [8], "target": [1]}]
    out = DynTileCollate(plan=BucketPlan((8,)), label_keys=["target"])(b)
    assert out["target"][1].tolist() == [1] + [-100] * 7


def test_a_one_name_list_of_pad_keys_pads_that_key():
    b = [{"input_ids": [5, 6, 7], "x": torch.ones(2)}, {"input_ids": [8], "x": torch.ones(2)}]
    out = DynTileCollate(pad_keys=["input_ids"])(b)
    assert out["input_ids"].shape == (2, 8) and out["x"].shape == (2, 2)


@pytest.mark.parametrize(
    "make, options",
    [
        (DynTileCollate, {"rename": [("label", "labels")]}),
        (DynTileCollate, {"pad_values": [("input_ids", 1)]}),
        (lambda **o: PackedCollate([(2, 8)], **o), {"pad_values": [("input_ids", 1)]}),
    ],
)
def test_pairs_where_a_mapping_belongs_are_refused(make, options):
    (name,) = options
    with pytest.raises(TypeError, match=rf"{name} should be a mapping .* pass dict\(\[\.\.\.\]\)"):
        make(**options)


def test_a_string_of_axes_is_refused():
    with pytest.raises(TypeError, match="axes should be a sequence of ints"):
        DynTileCollate(axes="01")
