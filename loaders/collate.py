"""``DynTileCollate``: a ``collate_fn`` that pads ragged leaves to planned shapes.

A batch is planned once per structure (:func:`loaders._collate_spec.plan_batch`, cached
by the samples' key signature) and run by one of two executors of that plan: for flat
dicts of rows and numbers the native reader and writer, each batch laid out in between by
:func:`loaders._collate_layout.layout_batch`; the Python executor for every plan
(:mod:`loaders._collate_python`). A batch that does not match its plan is planned again.
The option reference is the docs' bucketing guide (``docs/guides/bucketing.md``).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Collection, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import torch
from torch.utils.data import get_worker_info

from dyntile.overflow import BUCKET_OVERFLOWS, check_overflow
from dyntile.planning.buckets import BucketPlan
from dyntile.shapes import check_multiple, check_tile

from . import _collate_python
from ._collate_python import map_tensors
from ._collate_spec import LABEL_KEYS, CollateRules, Mismatch, plan_batch, signature
from .collate_stats import STATS_KEY, CollateStats, batch_counts
from .key_names import key_mapping, key_names
from .pinning import pinning_available, warn_no_pinning_in_worker
from .worker_transfer import WorkerBatch

__all__ = ["DynTileCollate"]

WORKER_TRANSFERS = ("one_buffer", "torch")
#: the renames Hugging Face's collators apply to a label key
HF_RENAMES = MappingProxyType({"label": "labels", "label_ids": "labels"})
_MAX_PLANS = 256  # structures planned per collate before the cache starts over


class DynTileCollate:
    """A ``collate_fn`` that pads the ragged leaves of a batch to a bucket plan's shapes.

    It takes what ``torch.utils.data.default_collate`` takes (dicts, tuples, namedtuples,
    lists, tensors, arrays, numbers, strings) and gives what it gives, except that
    sequences are padded (to ``plan``'s boundaries, else to a ``multiple``) instead of
    refused, and dict batches get a mask and the lengths of their sequences. Every row
    sequence of a dict sample has one width; label keys are padded with -100. The docs'
    bucketing guide ("Padded batches: DynTileCollate") describes the rules and every option.

    >>> collate = DynTileCollate(plan=BucketPlan((8, 16)))
    >>> batch = collate([{"input_ids": [5, 6, 7], "labels": [1, 2, 3]},
    ...                  {"input_ids": [8, 9], "labels": [4, 5]}])
    >>> batch["input_ids"].shape, batch["labels"][1].tolist()
    (torch.Size([2, 8]), [4, 5, -100, -100, -100, -100, -100, -100])
    >>> batch["attention_mask"][1].tolist()[:3], batch["lengths"].tolist()
    ([True, True, False], [3, 2])
    """

    def __init__(
        self,
        plan: BucketPlan | None = None,
        *,
        multiple: int = 8,
        pad_values: Mapping[str, Any] | None = None,
        fill=0,
        side: str = "right",
        pad_keys: Collection[str] | None = None,
        axes: Sequence[int] | None = None,
        batch_multiple: int | None = None,
        bucket_rows: Sequence[int] | None = None,
        mask_key: str | None = "attention_mask",
        lengths_key: str | None = "lengths",
        mask_from: str | None = None,
        mask_dtype: torch.dtype = torch.bool,
        tile: tuple[int, int] | None = None,
        pin_memory: bool = False,
        overflow: str = "error",
        return_stats: bool = False,
        worker_transfer: str = "one_buffer",
        label_keys: Collection[str] = LABEL_KEYS,
        rename: Mapping[str, str] | None = None,
    ):
        _check_choices(plan, side, overflow, worker_transfer, axes)
        pad_values = key_mapping(pad_values, "pad_values", "DynTileCollate")
        rename = key_mapping(rename, "rename", "DynTileCollate")
        pad_keys = None if pad_keys is None else key_names(pad_keys, "pad_keys", "DynTileCollate")
        label_keys = key_names(label_keys, "label_keys", "DynTileCollate")
        self.plan, self.fill, self.side, self.overflow = plan, fill, side, overflow
        self.multiple = check_multiple(multiple)
        self.pad_values = _read_only(pad_values or {})
        self.pad_keys = frozenset(self.pad_values if pad_keys is None else pad_keys)
        self._plans_sequences = _plans_sequences(plan, pad_keys, self.pad_values, mask_from)
        self.axes = None if axes is None else tuple(int(a) for a in axes)
        self.batch_multiple = (
            None if batch_multiple is None else check_multiple(batch_multiple, "batch_multiple")
        )
        self.bucket_rows = _read_only(_bucket_rows(plan, bucket_rows, batch_multiple))
        self.mask_key, self.lengths_key, self.mask_from = mask_key, lengths_key, mask_from
        self.mask_dtype = mask_dtype
        self.tile = None if tile is None else check_tile(tile)
        self.pin_memory, self.return_stats = bool(pin_memory), bool(return_stats)
        self.label_keys, self.rename = frozenset(label_keys), _read_only(rename)
        self.worker_transfer = worker_transfer
        self.stats = CollateStats()
        self._reset_rules(self.pin_memory and pinning_available("DynTileCollate"))

    @classmethod
    def from_tokenizer(cls, tokenizer, *, pad_to_multiple_of: int | None = 8, **options) -> DynTileCollate:
        """A collate that pads as ``transformers.DataCollatorWithPadding(tokenizer,
        pad_to_multiple_of=...)`` does: the tokenizer's pad ids and padding side, an
        int64 ``attention_mask``, no lengths, ``label``/``label_ids`` renamed ``labels``.
        ``options`` are the other options of :class:`DynTileCollate` (``plan``...)."""
        if tokenizer.pad_token_id is None:
            raise ValueError(
                "the tokenizer has no pad token (pad_token_id is None); set tokenizer.pad_token, "
                "e.g. to its eos_token, before collating with it"
            )
        pad_values = {
            "input_ids": tokenizer.pad_token_id,
            "attention_mask": 0,
            "token_type_ids": getattr(tokenizer, "pad_token_type_id", 0),
            "special_tokens_mask": 1,
        }
        defaults = dict(
            multiple=pad_to_multiple_of or 1,
            side=tokenizer.padding_side,
            lengths_key=None,
            mask_dtype=torch.int64,
            rename=HF_RENAMES,
        )
        options["pad_values"] = {**pad_values, **dict(options.get("pad_values") or {})}
        return cls(**{**defaults, **options})

    def _reset_rules(self, pin: bool) -> None:
        """The rules of this collate's options (``pin``: whether it pins here), its plans forgotten."""
        options = {name: getattr(self, name) for name in _RULE_OPTIONS}
        rules = CollateRules(**options, plans_sequences=self._plans_sequences, pin=pin)
        object.__setattr__(self, "_rules", rules)
        object.__setattr__(self, "_plans", {})
        object.__setattr__(self, "_last", None)

    def __setattr__(self, name: str, value) -> None:
        if name in _OPTIONS and name in self.__dict__:
            raise _fixed_option(name, f"build a new DynTileCollate with {name}={value!r}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if name in _OPTIONS:
            raise _fixed_option(name, "it cannot be deleted")
        object.__delattr__(self, name)

    def __getstate__(self) -> dict:
        state = {k: v for k, v in self.__dict__.items() if k not in ("_rules", "_plans", "_last")}
        for name in _MAPPING_OPTIONS:  # a mappingproxy does not pickle
            state[name] = _writable(state.get(name))
        state["_pin"] = self._rules.pin
        return state

    def __setstate__(self, state: dict) -> None:
        state = {k: v for k, v in state.items() if k not in _OLD_STATE}
        pin = state.pop("_pin", False)
        self.__dict__.update(state, **{name: _read_only(state.get(name)) for name in _MAPPING_OPTIONS})
        self.__dict__.setdefault("label_keys", frozenset(LABEL_KEYS))
        self.__dict__.setdefault("rename", None)
        self._reset_rules(pin)

    # ---- collate_fn protocol

    def __call__(self, samples: Sequence) -> Any:
        if self._rules.pin and get_worker_info() is not None:
            self._no_pinning_in_worker()
        out = self._collate(samples)
        if self.worker_transfer == "one_buffer" and type(out) is dict and get_worker_info() is not None:
            return WorkerBatch(out)  # crosses to the main process as one buffer
        return out

    def _collate(self, samples: Sequence) -> Any:
        """The batch of ``samples``: by the native route of the last plan when it takes the
        batch, else by the plan of this structure (the Python executor when the native
        route leaves the batch, planned again only when it does not match the plan)."""
        if len(samples) == 0:
            raise ValueError("DynTileCollate needs at least one sample, but got an empty batch")
        last = self._last
        listed = type(samples) is list
        if last is not None and last.run_native is not None and listed:
            got = last.run_native(samples, last.native)
            if got is not None:
                return self._finish(*got)
        spec = self._plans.get(signature(samples[0])) or self._plan(samples[0])
        object.__setattr__(self, "_last", spec)
        if spec is not last and spec.run_native is not None and listed:
            got = spec.run_native(samples, spec.native)
            if got is not None:
                return self._finish(*got)
        return self._collate_python(spec, samples)

    def _plan(self, sample) -> Any:
        """The plan of batches like ``sample``'s, kept under its signature."""
        plans = self._plans
        if len(plans) >= _MAX_PLANS:
            plans.clear()
        spec = plans[signature(sample)] = plan_batch(self._rules, sample)
        return spec

    def _collate_python(self, spec, samples: Sequence) -> Any:
        samples = samples if type(samples) is list else list(samples)  # the executor never mutates it
        try:
            got = _collate_python.run(self._rules, spec, samples)
        except Mismatch:  # a plan of another structure under this signature
            spec = self._plan(samples[0])
            object.__setattr__(self, "_last", spec)
            got = _collate_python.run(self._rules, spec, samples)
        # overflow="extend" pads this batch to the plan grown by its own sizes; the plan
        # stays as built, so a batch's width never depends on the batches before it
        return self._finish(
            got.out, got.mask, got.lengths, got.real, got.total, got.shapes, got.truncated, got.extended
        )

    def _finish(
        self, out, mask, lengths, real: int, total: int, shapes: list, truncated: int = 0, extended: int = 0
    ) -> Any:
        """An executor's batch with the mask and lengths added (a sample's own keys of those
        names kept), renamed, pinned and counted."""
        if type(out) is dict:
            if mask is not None and self.mask_key not in out:
                out[self.mask_key] = mask if self.mask_dtype is torch.bool else mask.to(self.mask_dtype)
            if lengths is not None and self.lengths_key not in out:
                out[self.lengths_key] = lengths
            if self.rename:
                _rename(out, self.rename)
        if self._rules.pin:  # padded leaves were allocated pinned; the rest is copied
            out = map_tensors(out, lambda t, key: t if t.is_pinned() else t.pin_memory())
        if self.return_stats and isinstance(out, dict):
            out[STATS_KEY] = batch_counts(real, total, shapes, truncated, extended)
        self.stats.add(real, total, shapes, truncated, extended)
        return out

    def _no_pinning_in_worker(self) -> None:
        """This worker's copy of the collate stops pinning, with one warning per worker."""
        self._reset_rules(False)
        warn_no_pinning_in_worker("DynTileCollate")

    def reset_stats(self) -> None:
        """Zero the counters of this process."""
        self.stats = CollateStats()

    def __repr__(self) -> str:
        plan = self.plan.boundaries if self.plan is not None else None
        return (
            f"DynTileCollate(plan={plan}, multiple={self.multiple}, pad_values={dict(self.pad_values)}, "
            f"side={self.side!r}, batch_multiple={self.batch_multiple}, tile={self.tile}, "
            f"pin_memory={self.pin_memory}, overflow={self.overflow!r}, "
            f"worker_transfer={self.worker_transfer!r})"
        )


#: DynTileCollate's options (its __init__ arguments), fixed once it is built
_OPTIONS = frozenset(inspect.signature(DynTileCollate.__init__).parameters) - {"self"}
#: the options the rules read as they are (the rest of CollateRules is worked out here)
_RULE_OPTIONS = tuple(f.name for f in dataclasses.fields(CollateRules) if f.name in _OPTIONS)
#: what a collate pickled by an older dyntile holds besides its options: its caches, worked out again
_OLD_STATE = frozenset({"_row_specs", "_native_args", "_direct", "_worker_buffer"})
#: the options held as read-only mappings (their nested dicts too)
_MAPPING_OPTIONS = ("pad_values", "bucket_rows", "rename")


def _check_choices(plan, side: str, overflow: str, worker_transfer: str, axes) -> None:
    if plan is not None and not isinstance(plan, BucketPlan):
        raise TypeError(f"plan should be a dyntile BucketPlan, but got {type(plan).__name__}")
    if side not in ("right", "left"):
        raise ValueError(f"side should be 'right' or 'left', but got {side!r}")
    check_overflow(overflow, BUCKET_OVERFLOWS)
    if worker_transfer not in WORKER_TRANSFERS:
        raise ValueError(f"worker_transfer should be one of {WORKER_TRANSFERS}, but got {worker_transfer!r}")
    if isinstance(axes, (str, bytes)):
        raise TypeError(f"axes should be a sequence of ints (axes to pad), but got the string {axes!r}")
    if axes is not None and not tuple(axes):
        raise ValueError("axes should name at least one axis to pad (or be None: pad the axes that differ)")


def _plans_sequences(plan, pad_keys, pad_values, mask_from) -> bool:
    """Whether every 1-D leaf is a sequence: a 1-axis plan, and no sequence key named."""
    return pad_keys is None and not pad_values and mask_from is None and plan is not None and plan.ndim == 1


def _rename(out: dict, rename: Mapping[str, str]) -> None:
    """Rename ``out``'s keys in place (a renamed key goes last, as Hugging Face's collators put it)."""
    for old, new in rename.items():
        if old in out:
            if new in out:
                raise ValueError(
                    f"the batch has both {old!r} and {new!r}, and {old!r} is renamed {new!r}; "
                    f"drop one of them, or pass rename=None"
                )
            out[new] = out.pop(old)


def _fixed_option(name: str, what_to_do: str) -> AttributeError:
    return AttributeError(
        f"DynTileCollate's {name!r} is fixed once it is built (its plans are worked out "
        f"from its options); {what_to_do}"
    )


def _remap(options: Mapping | None, make):
    """A copy of a dict option, it and its nested dicts built by ``make`` (None stays None)."""
    if options is None:
        return None
    return make({k: _remap(v, make) if isinstance(v, Mapping) else v for k, v in options.items()})


def _read_only(options: Mapping | None) -> MappingProxyType | None:
    """A read-only view of a dict option, nested dicts included."""
    return _remap(options, MappingProxyType)


def _writable(options: Mapping | None) -> dict | None:
    """The plain dicts behind :func:`_read_only` (for pickling)."""
    return _remap(options, dict)


def _bucket_rows(plan, bucket_rows, batch_multiple) -> dict | None:
    """``{bucket sizes: rows}`` from one row count per bucket of ``plan``."""
    if bucket_rows is None:
        return None
    if plan is None:
        raise ValueError("bucket_rows needs a plan: one row count per bucket of plan.bucket_shapes()")
    if batch_multiple is not None:
        raise ValueError("pass either bucket_rows or batch_multiple, not both")
    shapes = plan.bucket_shapes()
    rows = [check_multiple(r, "bucket_rows[i]") for r in bucket_rows]
    if len(rows) != len(shapes):
        raise ValueError(f"bucket_rows has {len(rows)} entries but the plan has {len(shapes)} buckets")
    return dict(zip(shapes, rows))
