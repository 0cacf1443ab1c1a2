"""``python -m dyntile``: the command-line tool (see :mod:`dyntile.cli`)."""

from dyntile.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
