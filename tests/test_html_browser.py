"""report.html in a real browser (headless Chromium over the DevTools protocol on a pipe): it renders, logs no
error, every figure decodes, and the hostile capture's markup shows up as text, not as elements."""
from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from detector.commands import analyze
from detector.report.timeline import TITLE as TIMELINE_TITLE

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
CHROMIUM = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(name)), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make system-tools as root)")
# generous: a cold Chromium start on a loaded 2-core machine; a hang fails the test instead of blocking it
DEADLINE_S = 90
HOSTILE_NAME = '<script>alert(1)</script>"><img src=x onerror=alert(2)>.example'


class DevTools:
    """The Chrome DevTools Protocol over --remote-debugging-pipe (fd 3 in, fd 4 out; NUL-separated JSON)."""

    def __init__(self, profile: Path):
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire_fds():
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", f"--user-data-dir={profile}", "--remote-debugging-pipe",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            # close_fds would close 3 and 4 after wire_fds ran; the pipes are non-inheritable, the dup2 copies
            # are not, so nothing else leaks into the browser
            preexec_fn=wire_fds, close_fds=False)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        self.deadline = time.monotonic() + DEADLINE_S

    def _message(self) -> dict:
        while b"\0" not in self._buffer:
            left = self.deadline - time.monotonic()
            ready, _, _ = select.select([self._from_browser], [], [], max(left, 0))
            if not ready:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise EOFError("Chromium closed the pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, session: str | None = None, **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._message()
            if reply.get("id") == self._next_id:
                assert "error" not in reply, reply
                return reply["result"]
            self.events.append(reply)

    def wait_for(self, method: str) -> dict:
        for event in self.events:
            if event.get("method") == method:
                return event
        while True:
            event = self._message()
            self.events.append(event)
            if event.get("method") == method:
                return event

    def close(self):
        try:
            self.call("Browser.close")
        except (TimeoutError, EOFError, OSError, AssertionError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


PROBE = """JSON.stringify({
    images: Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.src.slice(0, 22)]),
    alts: Array.from(document.images).map(i => i.alt),
    scripts: document.scripts.length,
    injected: document.querySelectorAll('img[onerror], img[src="x"]').length,
    text: document.body.innerText,
    title: document.title,
    dissected: Array.from(document.querySelectorAll('p.dissected')).map(p => p.textContent),
    details: Array.from(document.querySelectorAll('pre.dissection')).map(p => [p.textContent, p.offsetHeight,
                                                                             p.closest('details').open]),
    expert: Array.from(document.querySelectorAll('ul.expert li')).map(li => li.textContent),
    elements: document.querySelectorAll('pre.dissection *, ul.expert li *').length,
    width: [document.documentElement.scrollWidth, document.documentElement.clientWidth, window.innerWidth]})"""
# The width of a laptop's browser window: the report reads there without scrolling sideways.
WINDOW_PX = 1300


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """load(capture name) -> (the page's state, the DevTools events of loading it): the capture analysed, its
    report.html opened in one headless Chromium shared by the module."""
    tools = DevTools(tmp_path_factory.mktemp("profile"))
    try:
        target = tools.call("Target.createTarget", url="about:blank")["targetId"]
        session = tools.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            tools.call(f"{domain}.enable", session)
        tools.call("Emulation.setDeviceMetricsOverride", session, width=WINDOW_PX, height=900, deviceScaleFactor=1,
                   mobile=False)

        def load(name: str):
            out = tmp_path_factory.mktemp("browser")
            analyze([str(CAPTURES / name)], out)
            tools.deadline = time.monotonic() + DEADLINE_S      # each page its own time, whatever came before
            tools.events.clear()
            tools.call("Page.navigate", session, url=(out / "report.html").as_uri())
            tools.wait_for("Page.loadEventFired")
            result = tools.call("Runtime.evaluate", session, expression=PROBE, returnByValue=True)
            return json.loads(result["result"]["value"]), list(tools.events)
        yield load
    finally:
        tools.close()


@pytest.fixture(scope="module")
def rendered(browser):
    return browser("hostile-markup.pcapng")


def test_renders_without_console_errors(rendered):
    state, events = rendered
    assert state["title"] == "Incident report"
    errors = [e for e in events if e.get("method") in ("Runtime.exceptionThrown",)
              or (e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] == "error")
              or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")]
    assert errors == []
    # nothing but the page itself is fetched: figures are data: URLs
    requests = [e["params"]["request"]["url"] for e in events if e.get("method") == "Network.requestWillBeSent"]
    assert [url for url in requests if not url.startswith(("file://", "data:"))] == []


def test_the_page_does_not_scroll_sideways(rendered):
    state, _events = rendered
    scroll, client, window = state["width"]
    assert window == WINDOW_PX and scroll <= client


def test_every_figure_loaded(rendered):
    state, _events = rendered
    assert len(state["images"]) == 4           # the findings' time axis, packets/s, copies/s, top talkers
    for complete, width, src in state["images"]:
        assert complete and width > 0 and src == "data:image/png;base64,"


def test_hostile_markup_is_shown_as_text(rendered):
    state, _events = rendered
    assert state["scripts"] == 0 and state["injected"] == 0
    assert '<script>alert(1)</script>"><img src=x onerror=alert(2)>' in state["text"]


def test_timeline_and_wiresharks_view_render(rendered):
    state, _events = rendered
    assert state["alts"][0] == TIMELINE_TITLE and state["images"][0][1] > 0
    # the echo loop's first three evidence frames, each with tshark's packet details laid out, the first open
    assert len(state["dissected"]) == len(state["details"]) == 3
    assert [open_ for _text, _height, open_ in state["details"]] == [True, False, False]
    first_text, first_height, _open = state["details"][0]
    assert first_height > 0 and first_text.startswith("Frame 1: 123 bytes on wire")
    assert f"Name: {HOSTILE_NAME}" in first_text              # tshark's reading of the DNS name, as text
    assert state["elements"] == 0                            # no element made of packet text
    assert "Expert Info (Warning/Protocol), dns: DNS query retransmission. Original request in frame 1" \
        in state["expert"]


@pytest.mark.parametrize("name, rules", [("echo-loop-rip-ipv4.pcapng", {"echo-loop", "rip-trigger"}),
                                         ("pmtud-blackhole-ipv4.pcapng", {"pmtud-blackhole", "mss-violation"}),
                                         ("unicast-flood-vrrp-chain.pcapng", {"vrrp-dual-master", "garp-war",
                                                                              "unicast-flood"})])
def test_bundled_incidents_render_timeline_and_dissections(browser, name, rules):
    state, events = browser(name)
    assert [e for e in events if e.get("method") == "Runtime.exceptionThrown"] == []
    assert state["alts"][0] == TIMELINE_TITLE
    for complete, width, src in state["images"]:
        assert complete and width > 0 and src == "data:image/png;base64,"
    assert state["details"] and all(height > 0 and text.startswith("Frame ") for text, height, _ in state["details"])
    # every finding's section names its frames: "Frame N of the capture (frame k of evidence/<rule>-<n>.pcap)"
    cited = {heading.split(" of evidence/")[1].rsplit("-", 1)[0] for heading in state["dissected"]}
    assert cited == rules
    assert "Wireshark's view:" in state["text"] and "dissected by sharkd" in state["text"]
    scroll, client, window = state["width"]
    assert window == WINDOW_PX and scroll <= client
