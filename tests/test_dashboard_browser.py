"""The dashboard's /status page in headless Chromium: with the ``dashboard`` extra (bokeh) installed, the
task stream and the progress plots are drawn, not only the navigation bar.

Bokeh draws into canvases inside shadow roots, which ``--dump-dom`` does not show: the page is read over
the DevTools protocol (tornado's websocket client, a dependency of distributed).  Skipped cleanly when bokeh
or Chromium is absent.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.request

import pytest

BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome", "chrome")
                if shutil.which(b)), None)
pytest.importorskip("bokeh", reason="the dashboard extra (bokeh) is not installed")
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no Chromium installed (apt-get install chromium)")

PLOTS = ("status-tasks", "status-progress")  # the task stream, the progress bars

# the canvases with a size drawn under each plot's element, through every shadow root
COUNT = """JSON.stringify(Object.fromEntries(%s.map(function (id) {
  var n = 0;
  function walk(root) { root.querySelectorAll('*').forEach(function (el) {
    if (el.tagName === 'CANVAS' && el.width > 0 && el.height > 0) n++;
    if (el.shadowRoot) walk(el.shadowRoot); }); }
  var host = document.getElementById(id); if (host) walk(host);
  return [id, n]; })))""" % json.dumps(list(PLOTS))


def _square(x):
    time.sleep(0.02)
    return x * x


def _evaluate(ws_url: str, expression: str) -> str:
    from tornado.ioloop import IOLoop
    from tornado.websocket import websocket_connect

    async def ask() -> str:
        conn = await websocket_connect(ws_url, max_message_size=1 << 26)
        conn.write_message(json.dumps({"id": 1, "method": "Runtime.evaluate",
                                       "params": {"expression": expression, "returnByValue": True}}))
        while True:
            msg = json.loads(await conn.read_message())
            if msg.get("id") == 1:
                conn.close()
                return msg["result"]["result"].get("value", "")

    return IOLoop.current().run_sync(ask, timeout=30)


def _drawn(link: str, profile) -> dict:
    proc = subprocess.Popen([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                             f"--user-data-dir={profile}", "--no-first-run", "--remote-debugging-port=0",
                             "--window-size=1300,1400", link], stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in proc.stderr:  # type: ignore[union-attr]
            m = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            if m:
                port = int(m.group(1))
                break
        assert port is not None, "Chromium did not open its DevTools port"
        counts: dict = {}
        for _ in range(60):  # the plots arrive over the dashboard's websocket: wait for them
            pages = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
            page = next(p for p in pages if p.get("type") == "page")
            counts = json.loads(_evaluate(page["webSocketDebuggerUrl"], COUNT) or "{}")
            if counts and all(counts.get(p, 0) > 0 for p in PLOTS):
                break
            time.sleep(0.5)
        return counts
    finally:
        proc.kill()
        proc.wait()


def test_the_status_page_draws_the_task_stream_and_the_progress(tmp_path):
    from tusk.workflows.graph import local_cluster_executor

    ex = local_cluster_executor(1, dashboard=True, local_directory=str(tmp_path / "dask"))
    try:
        link = ex.dashboard_link
        assert link and link.startswith("http://127.0.0.1:") and link.endswith("/status"), link
        ex.client.gather(ex.client.map(_square, range(30)))
        counts = _drawn(link, tmp_path / "profile")
    finally:
        ex.close()
    assert all(counts.get(p, 0) > 0 for p in PLOTS), counts
