"""A real headless Chromium driven over the Chrome DevTools Protocol, for the page tests of
``pt2serde view`` and ``pt2serde diff --html``.

The protocol runs over ``--remote-debugging-pipe`` (JSON messages ended by a NUL byte, commands on
the browser's fd 3, replies and events on its fd 4), so no port is opened and nothing beyond the
standard library is needed: selenium and chromedriver would add a dependency and a second process
for the few commands these tests send.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import threading
import time
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-extensions",
         "--disable-default-apps", "--mute-audio", "--remote-debugging-pipe"]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


class BrowserError(RuntimeError):
    pass


class Browser:
    """One browser with one page. ``errors`` collects uncaught exceptions and console errors,
    ``requests`` every URL the page asked for."""

    def __init__(self, profile: Path, width: int = 1300, height: int = 900, timeout: float = 60) -> None:
        exe = chromium()
        if exe is None:
            raise BrowserError("no chromium")
        self.timeout = timeout
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire() -> None:  # runs in the child: our pipe ends become its fds 3 and 4
            a = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [exe, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(3, 4, to_browser_r, from_browser_w), preexec_fn=wire)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next = 0
        self._replies: dict[int, dict] = {}
        self._events: queue.Queue[dict] = queue.Queue()
        self._cond = threading.Condition()
        self.errors: list[str] = []
        self.requests: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=False)

    # -- protocol

    def _read(self) -> None:
        buf = b""
        while True:
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                with self._cond:
                    self._cond.notify_all()
                return
            buf += chunk
            *msgs, buf = buf.split(b"\0")
            for raw in msgs:
                msg = json.loads(raw)
                if "id" in msg:
                    with self._cond:
                        self._replies[msg["id"]] = msg
                        self._cond.notify_all()
                else:
                    self._event(msg)

    def _event(self, msg: dict) -> None:
        method, p = msg.get("method"), msg.get("params", {})
        if method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            self.errors.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
        elif method == "Runtime.consoleAPICalled" and p.get("type") == "error":
            self.errors.append("console.error: " + " ".join(str(a.get("value")) for a in p.get("args", [])))
        elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
            self.errors.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        elif method == "Network.requestWillBeSent":
            self.requests.append(p["request"]["url"])
        self._events.put(msg)

    def call(self, method: str, session: str | None = None, **params) -> dict:
        self._next += 1
        msg_id = self._next
        msg = {"id": msg_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        with self._cond:
            while msg_id not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise BrowserError(f"no reply to {method}")
                self._cond.wait(left)
            reply = self._replies.pop(msg_id)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def send(self, method: str, **params) -> dict:
        return self.call(method, self.session, **params)

    def wait_event(self, method: str) -> dict:
        deadline = time.monotonic() + self.timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"no {method} event")
            try:
                msg = self._events.get(timeout=left)
            except queue.Empty:
                continue
            if msg.get("method") == method:
                return msg.get("params", {})

    # -- page

    def open(self, url: str) -> float:
        """Navigate and wait for the load event; returns the seconds it took."""
        while not self._events.empty():
            self._events.get_nowait()
        t = time.perf_counter()
        self.send("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")
        return time.perf_counter() - t

    def js(self, expression: str):
        """The value of a JavaScript expression in the page (awaited if it is a promise)."""
        r = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise BrowserError(f"{expression}: {r['exceptionDetails'].get('exception', {}).get('description')}")
        return r["result"].get("value")

    def click(self, selector: str) -> None:
        """A real mouse click in the middle of the first element matching ``selector``."""
        box = self.js(f"(function(){{var e=document.querySelector({json.dumps(selector)});"
                      "e.scrollIntoView({block:'center'});var b=e.getBoundingClientRect();"
                      "return [b.left+Math.min(b.width/2,40),b.top+b.height/2];})()")
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def type(self, selector: str, text: str) -> None:
        self.js(f"document.querySelector({json.dumps(selector)}).focus()")
        self.send("Input.insertText", text=text)

    def key(self, key: str, code: int) -> None:
        for kind in ("rawKeyDown", "keyUp"):
            self.send("Input.dispatchKeyEvent", type=kind, key=key, code=key, windowsVirtualKeyCode=code)

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except BrowserError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
