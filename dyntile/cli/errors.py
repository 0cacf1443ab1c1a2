"""The one exception the command turns into ``dyntile: error: ...`` and exit status 2."""

from __future__ import annotations

__all__ = ["CLIError"]


class CLIError(Exception):
    """Bad input or a missing optional dependency; the message is shown to the user as is.

    >>> str(CLIError("cannot read 'x.csv': unknown extension '.csv'"))
    "cannot read 'x.csv': unknown extension '.csv'"
    """
