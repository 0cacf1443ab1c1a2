"""Import torch only where a subcommand needs it, with an install hint when it is missing."""

from __future__ import annotations

from dyntile.cli.errors import CLIError

__all__ = ["require_torch"]

INSTALL_HINT = "pip install torch==2.13.0"


def require_torch():
    """Return the ``torch`` module, or raise :class:`CLIError` saying how to install it."""
    try:
        import torch
    except ImportError:
        raise CLIError(
            f"this command needs PyTorch, which is not installed: {INSTALL_HINT} (a CPU build is enough)"
        ) from None
    return torch
