"""Options that name keys: a collection of names, read the same way everywhere.

A string is a collection of its characters, so ``label_keys="target"`` would name the
keys ``"t"``, ``"a"``, ``"r"``... and match nothing, silently. Every option that takes
key names reads it through :func:`key_names`, which refuses a lone string.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["key_names"]


def key_names(names, option: str, owner: str) -> tuple:
    """``names`` (an option ``option`` of ``owner``) as a tuple of key names, in order.

    ``TypeError`` for a lone ``str``/``bytes`` (with the fix: a list of it), a mapping
    (its keys would be taken without their values) or anything that is not an iterable
    of hashable names.

    >>> key_names(["labels", "target"], "label_keys", "DynTileCollate")
    ('labels', 'target')
    >>> key_names("target", "label_keys", "DynTileCollate")
    Traceback (most recent call last):
    TypeError: DynTileCollate's label_keys should be ... the string 'target'; pass ['target'] for one key
    """
    if isinstance(names, (str, bytes)):
        raise TypeError(
            f"{owner}'s {option} should be a collection of key names, but got the string {names!r}; "
            f"pass [{names!r}] for one key"
        )
    if isinstance(names, Mapping) or not isinstance(names, Iterable):
        raise TypeError(
            f"{owner}'s {option} should be a collection of key names (a list, tuple or set of "
            f"strings), but got a {type(names).__name__}"
        )
    got = tuple(names)
    for name in got:
        try:
            hash(name)
        except TypeError:
            raise TypeError(
                f"{owner}'s {option} should hold key names, but holds {name!r} "
                f"(a {type(name).__name__}, not hashable)"
            ) from None
    return got


def key_mapping(mapping, option: str, owner: str) -> Mapping | None:
    """``mapping`` (an option ``option`` of ``owner`` keyed by key names: ``pad_values``,
    ``rename``) as it is, ``None`` staying ``None``; ``TypeError`` for anything that is
    not a mapping (a list of pairs included: pass ``dict(pairs)``).

    >>> key_mapping([("label", "labels")], "rename", "DynTileCollate")
    Traceback (most recent call last):
    TypeError: DynTileCollate's rename should be a mapping ...; pass dict([...]) for a list of pairs
    """
    if mapping is None or isinstance(mapping, Mapping):
        return mapping
    pairs = "; pass dict([...]) for a list of pairs" if isinstance(mapping, (list, tuple)) else ""
    raise TypeError(
        f"{owner}'s {option} should be a mapping {{key: value}}, but got a {type(mapping).__name__}{pairs}"
    )
