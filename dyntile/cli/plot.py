"""``--plot FILE.png``: length histogram with the bucket boundaries, and padding per method."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dyntile.cli.errors import CLIError

__all__ = ["plot_demo", "require_matplotlib"]


def require_matplotlib():
    """``matplotlib.pyplot`` (the Agg backend off a notebook), or ``CLIError`` saying how to install it."""
    try:
        import matplotlib

        if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CLIError("--plot needs matplotlib, which is not installed: pip install matplotlib") from None
    return plt


def plot_demo(
    path,
    lengths: np.ndarray,
    boundaries: Sequence[int],
    methods: Sequence[str],
    padded_fractions: Sequence[float],
) -> Path:
    """Write a two-panel figure to ``path`` (format from its extension) and return the path."""
    plt = require_matplotlib()
    path = Path(path)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.hist(lengths, bins=np.geomspace(max(1, lengths.min()), lengths.max() + 1, 60), color="0.6")
    ax1.set_xscale("log")
    for b in boundaries:
        ax1.axvline(b, color="tab:red", lw=1)
    ax1.set(
        xlabel="tokens per sample (log)",
        ylabel="samples",
        title=f"lengths and the {len(boundaries)} planned bucket boundaries",
    )
    bars = ax2.barh(list(methods)[::-1], [100 * f for f in padded_fractions][::-1], color="tab:blue")
    ax2.bar_label(bars, fmt="%.1f%%", padding=3)
    ax2.set(xlabel="padded slots (%)", title="padding per batching method")
    fig.tight_layout()
    try:
        fig.savefig(path)
    except (OSError, ValueError) as exc:
        raise CLIError(f"cannot write the plot to {str(path)!r}: {exc}") from None
    finally:
        plt.close(fig)
    return path
