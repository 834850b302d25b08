"""Headless Chromium, driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
JSON messages separated by NUL bytes on file descriptors 3 and 4), so a test can open pages in a
real browser with nothing but Debian's ``chromium-headless-shell`` (or ``chromium``) package:
no WebDriver, no websocket library.

    with Browser(binary) as b:
        page = b.open("http://127.0.0.1:8000/")   # its console errors, links and element ids
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from dataclasses import dataclass, field

BINARIES = ("chromium-headless-shell", "chromium")
# Messages that arrive after the load event are collected for this long; a later one is not
# seen (it cannot fail a test by arriving late either).
SETTLE_S = 0.3
LINKS = "JSON.stringify(Array.from(document.querySelectorAll('a[href]'), a => a.href))"
IDS = "JSON.stringify(Array.from(document.querySelectorAll('[id]'), e => e.id))"


def find_binary() -> str | None:
    return next((path for name in BINARIES if (path := shutil.which(name))), None)


@dataclass
class Page:
    url: str
    errors: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)


def console_error(message: dict) -> str | None:
    """The text of a DevTools event that is a console error, an uncaught exception or a failed
    load (what a browser's console shows in red); None for anything else."""
    method, params = message.get("method"), message.get("params", {})
    if method == "Runtime.exceptionThrown":
        details = params.get("exceptionDetails", {})
        return details.get("exception", {}).get("description") or details.get("text", "")
    if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
        return " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
    if method == "Log.entryAdded" and params["entry"].get("level") == "error":
        entry = params["entry"]
        return f"{entry.get('text', '')} {entry.get('url', '')}".strip()
    return None


class Browser:
    """One headless browser with one tab; :meth:`open` loads a page in it."""

    def __init__(self, binary: str, timeout: float = 60) -> None:
        self.timeout = timeout
        to_browser, self._out = os.pipe()
        self._in, from_browser = os.pipe()

        def fds() -> None:  # the child's fd 3 reads our messages, fd 4 writes its own
            a, b = os.dup(to_browser), os.dup(from_browser)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [binary, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--no-first-run",
             "--disable-gpu", "about:blank"],
            preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(to_browser)
        os.close(from_browser)
        self._buf, self._id, self._events = b"", 0, []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=self.session)

    def _send(self, method: str, params: dict | None, session: str | None) -> int:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        return self._id

    def _recv(self, deadline: float) -> dict | None:
        """The next message, or None once ``deadline`` (time.monotonic) has passed."""
        while b"\0" not in self._buf:
            ready, _, _ = select.select([self._in], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(self._in, 1 << 16)
            if not chunk:
                raise RuntimeError(f"the browser exited: {self.proc.stderr.read().decode()}")
            self._buf += chunk
        message, self._buf = self._buf.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """Send a command and return its result; events meanwhile are kept."""
        wanted, deadline = self._send(method, params, session), time.monotonic() + self.timeout
        while (message := self._recv(deadline)) is not None:
            if message.get("id") == wanted:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._events.append(message)
        raise TimeoutError(f"{method}: no answer in {self.timeout} s")

    def _until_loaded(self) -> None:
        deadline = time.monotonic() + self.timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self._events):
            message = self._recv(deadline)
            if message is None:
                raise TimeoutError(f"no load event in {self.timeout} s")
            self._events.append(message)
        settle = time.monotonic() + SETTLE_S
        while (message := self._recv(settle)) is not None:
            self._events.append(message)

    def _evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                           session=self.session)
        return json.loads(result["result"]["value"])

    def open(self, url: str) -> Page:
        """Load ``url``; its console errors, the absolute URLs of its links, its element ids."""
        self._events = []
        self.call("Page.navigate", {"url": url}, session=self.session)
        self._until_loaded()
        errors = [e for m in self._events if (e := console_error(m)) is not None]
        return Page(url, errors, self._evaluate(LINKS), set(self._evaluate(IDS)))

    def close(self) -> None:
        try:
            self._send("Browser.close", None, None)
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            os.close(self._out)
            os.close(self._in)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
