"""Headless Chromium driven over the DevTools protocol on a pipe, and a local HTTP server.

What ``dashboard.py check`` needs to open the published asv site in a real browser,
with the standard library only: Chromium's ``--remote-debugging-pipe`` takes JSON
commands on fd 3 and answers on fd 4, each message ended by a NUL byte.

>>> find_chromium() is None or find_chromium().startswith("/")
True
"""

from __future__ import annotations

import base64
import contextlib
import functools
import http.server
import json
import os
import select
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve ``directory`` over HTTP on a free local port; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (base signature)
        pass


class Browser:
    """Headless Chromium driven over the DevTools protocol on a pipe (no extra packages).

    Chromium reads commands from fd 3 and writes replies to fd 4, each a JSON message
    ended by a NUL byte.
    """

    def __init__(self, executable: str, timeout: float = 60.0) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        self._profile = tempfile.mkdtemp(prefix="dashboard-chromium-")
        self._proc = subprocess.Popen(
            [executable, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--remote-debugging-pipe", f"--user-data-dir={self._profile}", "--window-size=1280,900",
             "about:blank"],
            close_fds=False, preexec_fn=functools.partial(_pipe_fds, to_chrome_r, from_chrome_w),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next_id = 0
        self._timeout = timeout
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def call(self, method: str, session: str | None = None, **params: object) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session or getattr(self, "_session", None):
            message["sessionId"] = session or self._session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self._timeout
        while True:
            while b"\0" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                    raise TimeoutError(f"Chromium did not answer {method} in {self._timeout} s")
                chunk = os.read(self._from_chrome, 1 << 16)
                if not chunk:
                    raise RuntimeError(f"Chromium exited while answering {method}")
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"Chromium: {method} failed: {reply['error']}")
                return reply["result"]

    def evaluate(self, expression: str) -> object:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, what: str, timeout: float = 30.0) -> object:
        """Poll ``expression`` in the page until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.25)
        raise AssertionError(f"dashboard check: {what} did not render within {timeout} s")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.call("Browser.close", session=None)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=10)
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        for fd in (self._to_chrome, self._from_chrome):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(self._profile, ignore_errors=True)


def _pipe_fds(reader: int, writer: int) -> None:
    """In the browser's process: the command pipe on fd 3, the reply pipe on fd 4."""
    reader, writer = os.dup(reader), os.dup(writer)  # both above 2, so neither lands on the other
    os.dup2(reader, 3)
    os.dup2(writer, 4)
    os.set_inheritable(3, True)
    os.set_inheritable(4, True)


def find_chromium() -> str | None:
    """The Chromium executable on PATH, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None
