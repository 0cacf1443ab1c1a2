"""``CollateStats``: counters a :class:`~loaders.collate.DynTileCollate` keeps per process.

Every ``DataLoader`` worker holds its own copy of the collate function, so its
counters see only that worker's batches. For global figures either run with
``num_workers=0``, or build the collate with ``return_stats=True`` (each batch then
carries its own counts under ``"collate_stats"``) and fold them in the main
process with :meth:`CollateStats.update`.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping

__all__ = ["CollateStats"]


@dataclasses.dataclass
class CollateStats:
    """Running counts over collated batches.

    ``real_elements``/``padded_elements`` sum, over every padded leaf, the data
    elements and the elements of the padded output (batch-dimension padding
    included); ``shapes`` counts each ``(key, padded shape)`` produced.

    >>> s = CollateStats()
    >>> s.update({"real_elements": 30, "padded_elements": 40, "shapes": [("input_ids", (4, 10))]})
    >>> s.batches, s.padding_ratio, s.distinct_shapes
    (1, 0.25, 1)
    """

    batches: int = 0
    real_elements: int = 0
    padded_elements: int = 0
    truncated_samples: int = 0
    plan_extensions: int = 0
    shapes: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    @property
    def padding_ratio(self) -> float:
        """Fraction of the padded elements that are padding (0.0 before any batch)."""
        if not self.padded_elements:
            return 0.0
        return 1.0 - self.real_elements / self.padded_elements

    @property
    def distinct_shapes(self) -> int:
        """Number of distinct ``(key, shape)`` pairs seen."""
        return len(self.shapes)

    def update(self, batch_stats: Mapping) -> None:
        """Add one batch's counts (the ``"collate_stats"`` entry of a batch)."""
        self.add(
            int(batch_stats["real_elements"]),
            int(batch_stats["padded_elements"]),
            [(key, tuple(shape)) for key, shape in batch_stats["shapes"]],
            int(batch_stats.get("truncated_samples", 0)),
            int(batch_stats.get("plan_extensions", 0)),
        )

    def add(self, real: int, padded: int, shapes, truncated: int = 0, extended: int = 0) -> None:
        """Add one batch's counts given as ints and its ``(key, shape tuple)`` pairs
        (what a collate calls per batch: no dict, no conversions)."""
        self.batches += 1
        self.real_elements += real
        self.padded_elements += padded
        if truncated:
            self.truncated_samples += truncated
        if extended:
            self.plan_extensions += extended
        seen = self.shapes
        for shape in shapes:  # Counter.update's Mapping check costs more than this
            seen[shape] = seen.get(shape, 0) + 1

    def as_dict(self) -> dict:
        """Plain-Python summary (for logging): the counts, the padding ratio and the number
        of distinct shapes (not the shapes themselves)."""
        counts = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "shapes"}
        return {**counts, "padding_ratio": self.padding_ratio, "distinct_shapes": self.distinct_shapes}


#: the key under which a batch carries its counts (``return_stats=True``)
STATS_KEY = "collate_stats"


def batch_counts(real: int, padded: int, shapes, truncated: int = 0, extended: int = 0) -> dict:
    """One batch's counts, as a collate with ``return_stats=True`` adds them under
    :data:`STATS_KEY` (and :meth:`CollateStats.update` reads them back); ``shapes`` is
    copied into a list of the batch's own (a collate's may be shared with later batches)."""
    return {
        "real_elements": real,
        "padded_elements": padded,
        "shapes": list(shapes),
        "truncated_samples": truncated,
        "plan_extensions": extended,
    }
