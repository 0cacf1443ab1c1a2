"""The padded shape of a batch: one rule for every padding route, host and CUDA.

Each padded axis goes to the batch maximum rounded up to ``multiple``, or to a bucket
plan's boundary, or to an explicit ``shape``; the other axes must agree across the
batch. Nothing is ever cut: a target smaller than a sample is an error naming it.
"""

from __future__ import annotations

import numpy as np

from dyntile import shapes as _shapes

__all__ = ["target_shape"]


def _shape(shapes: np.ndarray, i: int) -> tuple[int, ...]:
    return tuple(int(v) for v in shapes[i])


def _ragged_axes(shapes: np.ndarray, axes, plan) -> list[int]:
    ndim = shapes.shape[1]
    if axes is not None:
        axes = [axes] if np.ndim(axes) == 0 else list(axes)
        axes = [_shapes.normalize_axis(a, ndim) for a in axes]
        if len(set(axes)) != len(axes):
            raise ValueError(f"axes should not repeat an axis, but got {axes}")
        return axes
    if plan is not None:
        if plan.ndim > ndim:
            raise ValueError(f"the plan covers {plan.ndim} axes but samples have {ndim} dimensions")
        return list(range(plan.ndim))
    if ndim == 1:
        return [0]
    return [int(a) for a in np.flatnonzero(shapes.min(axis=0) != shapes.max(axis=0))]


def target_shape(shapes: np.ndarray, multiple, axes, shape, plan) -> tuple[int, ...]:
    """Per-sample padded shape for a batch whose sample shapes are ``shapes`` (B, ndim)."""
    ndim = shapes.shape[1]
    if ndim == 1 and shape is None and plan is None and axes is None:  # the common case, kept cheap
        return (-(-int(shapes.max()) // _shapes.check_multiple(multiple)) * int(multiple),)
    maxes = shapes.max(axis=0)
    if shape is not None:
        if plan is not None:
            raise ValueError("pass either shape= or plan=, not both")
        target = _shapes.check_shape(shape)
        if len(target) != ndim:
            raise ValueError(f"shape={target} has {len(target)} dimensions but samples have {ndim}")
        over = np.flatnonzero(maxes > np.array(target))
        if over.size:
            a = int(over[0])
            i = int(np.argmax(shapes[:, a]))
            raise ValueError(
                f"sample {i} has shape {_shape(shapes, i)}, larger than shape={target} along "
                f"axis {a}; pad_batch never cuts data (slice the sample first)"
            )
        return target
    m = _shapes.check_multiple(multiple)
    ragged = _ragged_axes(shapes, axes, plan)
    target = [int(v) for v in shapes[0]]
    for a in set(range(ndim)) - set(ragged):
        differ = np.flatnonzero(shapes[:, a] != shapes[0, a])
        if differ.size:
            i = int(differ[0])
            raise ValueError(
                f"samples differ along axis {a}, which is not padded (axes={ragged}): sample 0 has "
                f"shape {_shape(shapes, 0)} and sample {i} has {_shape(shapes, i)}; pass axes= to pad it"
            )
    if plan is not None:
        if len(ragged) != plan.ndim:
            raise ValueError(f"the plan covers {plan.ndim} axes but axes={ragged} names {len(ragged)}")
        padded = plan.round_up(tuple(int(maxes[a]) for a in ragged))
        for a, p in zip(ragged, padded):
            target[a] = int(p)
    else:
        for a in ragged:
            target[a] = -(-int(maxes[a]) // m) * m
    return tuple(target)
