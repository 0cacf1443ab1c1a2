"""What models take from DynTileCollate: one width per sample's sequences, labels that the
loss ignores on padding, and batches equal to Hugging Face's ``DataCollatorWithPadding``."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from dyntile.planning import BucketPlan
from loaders import DynTileCollate


def python_only(collate: DynTileCollate) -> DynTileCollate:
    """``collate`` whose plans have no native form: every batch runs in the Python executor."""
    plan = collate._plan
    collate._plan = lambda sample: dataclasses.replace(plan(sample), native=None, run_native=None)
    return collate


def tokenized(lengths, leaf=list):
    """Samples as a tokenizer gives them: input ids, token type ids and a mask of ones."""
    return [
        {
            "input_ids": leaf(list(range(1, n + 1))),
            "token_type_ids": leaf([0] * n),
            "attention_mask": leaf([1] * n),
        }
        for n in lengths
    ]


@pytest.mark.parametrize("leaf", [list, torch.tensor])
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("executor", ["dispatched", "python"])
def test_every_token_key_of_a_sample_has_one_width(leaf, side, executor):
    """input_ids is declared (pad_values) and padded to 8; the tokenizer's mask and type
    ids of the same one length 4 were stacked at 4, a silent mismatch a model runs on."""
    collate = DynTileCollate(pad_values={"input_ids": 0}, side=side)
    out = (python_only(collate) if executor == "python" else collate)(tokenized([4, 4, 4], leaf))
    assert {k: tuple(v.shape) for k, v in out.items()} == {
        "input_ids": (3, 8),
        "token_type_ids": (3, 8),
        "attention_mask": (3, 8),
        "lengths": (3,),
    }
    data = slice(0, 4) if side == "right" else slice(4, 8)
    assert out["attention_mask"][:, data].eq(1).all() and out["attention_mask"].sum() == 12
    assert out["token_type_ids"].eq(0).all()


def test_a_fixed_size_feature_of_the_token_length_keeps_its_shape():
    samples = [{"input_ids": [1, 2, 3, 4], "embedding": [0.5] * 4} for _ in range(3)]
    out = DynTileCollate(pad_values={"input_ids": 0})(samples)
    assert out["input_ids"].shape == (3, 8) and out["embedding"].shape == (3, 4)


@pytest.mark.parametrize(
    "options", [{"batch_multiple": 4}, {"plan": BucketPlan((8, 16)), "bucket_rows": [4, 4]}]
)
@pytest.mark.parametrize("executor", ["dispatched", "python"])
def test_padding_rows_carry_the_ignore_index_in_label_keys(options, executor):
    """The extra rows of batch padding held label 0, a real class, and counted in the loss."""
    collate = DynTileCollate(pad_values={"input_ids": 0}, **options)
    collate = python_only(collate) if executor == "python" else collate
    samples = [
        {"input_ids": [1, 2, 3], "labels": [5, 6, 7], "label": 2, "label_ids": 1.5},
        {"input_ids": [4], "labels": [8], "label": 1, "label_ids": 0.5},
    ]
    out = collate(samples)
    assert out["label"].tolist() == [2, 1, -100, -100] and out["label_ids"].tolist() == [1.5, 0.5, -100, -100]
    assert out["labels"][2:].eq(-100).all() and out["labels"][1, 1:].eq(-100).all()
    assert out["input_ids"][2:].eq(0).all() and out["attention_mask"][2:].eq(False).all()
    loss = torch.nn.functional.cross_entropy(torch.zeros(4, 3), out["label"], reduction="sum")
    assert loss.item() == pytest.approx(2 * torch.log(torch.tensor(3.0)).item())  # the two real rows


def test_a_label_keys_pad_value_and_other_label_keys():
    samples = [{"input_ids": [1, 2], "labels": 3, "target": 1}, {"input_ids": [3], "labels": 4, "target": 0}]
    out = DynTileCollate(batch_multiple=4, pad_values={"labels": -1})(samples)
    assert out["labels"].tolist() == [3, 4, -1, -1] and out["target"].tolist() == [1, 0, 0, 0]
    out = DynTileCollate(batch_multiple=4, label_keys=("target",))(samples)
    assert out["labels"].tolist() == [3, 4, 0, 0] and out["target"].tolist() == [1, 0, -100, -100]


def test_a_label_key_whose_dtype_cannot_hold_the_ignore_index_is_named():
    samples = [{"ids": [1, 2], "label": True}, {"ids": [3], "label": False}]
    with pytest.raises(ValueError, match=r"key 'label'.*give pad_values\['label'\]"):
        DynTileCollate(batch_multiple=4)(samples)
    assert DynTileCollate(batch_multiple=4, pad_values={"label": False})(samples)["label"].tolist() == [
        True,
        False,
        False,
        False,
    ]


# ------------------------------------------------------------------ Hugging Face tokenizers

WORDS = (
    "the a cat dog sat on mat ran far away big small red blue green house tree under over quick brown fox "
    "jumps lazy"
).split()
TEXTS = [
    "the cat sat",
    "a big red dog ran far away on the mat",
    "dog",
    "the quick brown fox jumps over the lazy dog",
    "a small blue house under a green tree",
    "red",
]


@pytest.fixture(scope="module")
def tokenizer():
    """A BERT tokenizer of a small vocabulary, built here (nothing is downloaded)."""
    transformers = pytest.importorskip("transformers")
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    return transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(words)})


def assert_same_batch(got: dict, want) -> None:
    assert list(got) == list(want.keys())
    for k in want.keys():
        assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("label", [None, "label", "label_ids", "labels"])
@pytest.mark.parametrize("texts", [TEXTS, TEXTS[:1], ["big dog", "red cat"]], ids=["ragged", "one", "equal"])
def test_from_tokenizer_equals_data_collator_with_padding(tokenizer, side, label, texts):
    from transformers import DataCollatorWithPadding

    tokenizer.padding_side = side
    samples = [dict(tokenizer(t), **({label: i % 2} if label else {})) for i, t in enumerate(texts)]
    assert any(s["input_ids"][1] > 4 for s in samples)  # real words, not [UNK]
    want = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8)([dict(s) for s in samples])
    collate = DynTileCollate.from_tokenizer(tokenizer, pad_to_multiple_of=8)
    assert_same_batch(collate(samples), want)
    assert_same_batch(python_only(DynTileCollate.from_tokenizer(tokenizer))(samples), want)


def test_from_tokenizer_takes_the_pad_id_and_the_other_options(tokenizer):
    tokenizer.padding_side = "right"
    samples = [{"input_ids": tokenizer("the cat")["input_ids"]}, {"input_ids": tokenizer("dog")["input_ids"]}]
    out = DynTileCollate.from_tokenizer(tokenizer, plan=BucketPlan((16, 32)), lengths_key="lengths")(samples)
    assert out["input_ids"].shape == (2, 16) and out["attention_mask"].dtype == torch.int64
    assert out["lengths"].tolist() == [4, 3] and out["input_ids"][1, 3:].eq(tokenizer.pad_token_id).all()


def test_from_tokenizer_without_a_pad_token_says_what_to_do():
    class NoPad:
        pad_token_id = None
        padding_side = "right"

    with pytest.raises(ValueError, match="no pad token"):
        DynTileCollate.from_tokenizer(NoPad())


def test_a_rename_onto_a_key_of_the_batch_is_refused():
    with pytest.raises(ValueError, match="both 'label' and 'labels'"):
        DynTileCollate(rename={"label": "labels"})([{"ids": [1], "label": 1, "labels": 2}])
