"""Run a check in a forked child, as a DataLoader worker would, with a deadline."""

import os
import signal
import time

import pytest


def check_in_forked_child(check, what: str, timeout: float = 20.0) -> None:
    """Fork; the child runs ``check()`` (truthy = pass) and exits; fail if it fails or
    has not finished within ``timeout`` seconds (a hang, e.g. OpenMP after fork)."""
    pid = os.fork()
    if pid == 0:
        try:
            ok = bool(check())
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0, f"{what} in a forked child gave a wrong result"
            return
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"{what} in a forked child hung (OpenMP thread pool after fork)")
