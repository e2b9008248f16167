"""The HTML report opened in a real browser: Debian's chromium, headless, from disk, offline.

The DOM chromium built is read back (a lane per rank, the culprit's marked, the workers folded
under their rank); the page's own Content-Security-Policy (no script, nothing fetched) is
enforced by chromium, which reports no violation, so the page asked for nothing outside itself;
the layout chromium computed is measured on a laptop-sized window (lanes wide enough to read,
no sideways scrolling, every span inside its lane, a rank's exit right of the verdict line),
by a script added to a copy of the page only; and a screenshot is compared loosely: the states'
colours and the culprit's tint must be on the screen in some quantity, which they are only
when the inline SVG drew. `make install` installs chromium where apt can; elsewhere these tests
skip and say so.
"""
from __future__ import annotations

import html
import json
import re
import shutil
import struct
import subprocess
import zlib
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest

from hangdoc.bundle.files import load_bundle
from hangdoc.render.html import CSP, report_html
from hangdoc.report import judge

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
CHROMIUM = shutil.which("chromium")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
# What must show on the screen, in pixels of a 1280x900 window: (name, RGB).
COLOURS = [("collective-wait orange", (0xE6, 0x9F, 0x00)), ("dataloader-wait sky blue", (0x56, 0xB4, 0xE9)),
           ("decompressing purple", (0xCC, 0x79, 0xA7)), ("culprit tint", (0xFD, 0xEE, 0xE4))]
MIN_PIXELS = 500
LAPTOP = "--window-size=1280,900"
MIN_LANE_PX = 700       # a lane's plot on a 1280-pixel screen: about a pixel per 1/700 of the watched time

needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (`make install` installs "
                                    "Debian's chromium with apt where it can: no apt or no root here)")


def chromium(tmp_path: Path, page: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile{len(list(tmp_path.glob('profile*')))}"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
                          capture_output=True, text=True, timeout=30, check=False)


def golden_page(tmp_path_factory, case: str) -> Path:
    path = tmp_path_factory.mktemp("html") / f"{case}.html"
    path.write_text(report_html(judge(load_bundle(GOLDEN / case / "bundle.json")).report))
    return path


@pytest.fixture(scope="module")
def hang_page(tmp_path_factory) -> Path:
    """GIVEN the HTML report of a real hang (bz2-shards: rank 1's workers decompress, rank 0 waits), on disk."""
    return golden_page(tmp_path_factory, "bz2-shards")


@pytest.fixture(scope="module")
def crash_page(tmp_path_factory) -> Path:
    """GIVEN the HTML report of a real crash (rank-sigkill: rank 1 killed, seen gone at the last sample)."""
    return golden_page(tmp_path_factory, "rank-sigkill")


class Dom(HTMLParser):
    """The elements of the DOM chromium dumped, with their attributes and where they sit."""

    def __init__(self, text: str):
        super().__init__()
        self.elements: list[tuple[str, dict, tuple[str, ...]]] = []
        self.path: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.elements.append((tag, attrs, tuple(self.path)))
        if tag not in ("meta", "br", "img", "input", "link"):
            self.path.append(attrs.get("id") or tag)

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, dict(attrs), tuple(self.path)))

    def handle_endtag(self, tag):
        if self.path:
            self.path.pop()

    def lanes(self, kind: str) -> list[tuple[dict, tuple[str, ...]]]:
        return [(a, where) for _, a, where in self.elements
                if {"lane", kind} <= set((a.get("class") or "").split())]


@needs_chromium
def test_chromium_builds_a_lane_per_rank_with_the_culprit_marked(hang_page, tmp_path):
    # WHEN chromium loads the page from disk and dumps the DOM it built
    done = chromium(tmp_path, hang_page, "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    dom = Dom(done.stdout)
    # THEN the timeline holds a lane for rank 0 and for rank 1, and only rank 1's is the culprit's
    ranks = dom.lanes("rank")
    assert [a["data-rank"] for a, _ in ranks] == ["0", "1"]
    assert all("timeline" in where for _, where in ranks)
    assert [a["data-rank"] for a, _ in ranks if "culprit" in a["class"].split()] == ["1"]
    # AND each rank's two DataLoader workers are lanes folded in a <details> under it, the culprit's open
    workers = dom.lanes("worker")
    assert sorted(a["data-rank"] for a, _ in workers) == ["0", "0", "1", "1"]
    assert all("details" in where for _, where in workers)
    details = [a for tag, a, _ in dom.elements if tag == "details" and "workers" in (a.get("class") or "")]
    assert ["open" in a for a in details] == [False, True]
    # AND every span is an SVG rect the browser kept, and no script ran or was there to run
    assert sum(1 for tag, a, _ in dom.elements if tag == "rect" and a.get("class") == "span") == 6
    assert not [tag for tag, _, _ in dom.elements if tag == "script"]


@needs_chromium
@pytest.mark.parametrize("page", ["hang_page", "crash_page"])
def test_chromium_enforces_the_pages_policy_and_it_asks_for_nothing(page, request, tmp_path):
    # GIVEN a report page, and a copy of it with one image fetched from the network added
    path = request.getfixturevalue(page)
    text = path.read_text()
    assert f'<meta http-equiv="Content-Security-Policy" content="{CSP}">' in text
    tampered = tmp_path / "tampered.html"
    tampered.write_text(text.replace("<body>", "<body><img src=\"http://127.0.0.1:9/x.png\">", 1))
    # WHEN chromium loads each from disk, its console on stderr
    clean = chromium(tmp_path, path, "--enable-logging=stderr", "--v=0", "--dump-dom")
    caught = chromium(tmp_path, tampered, "--enable-logging=stderr", "--v=0", "--dump-dom")
    # THEN the page loads with no policy violation: it tried no script and no fetch
    assert clean.returncode == 0 and "lane rank" in clean.stdout, clean.stderr[-2000:]
    assert "Content Security Policy" not in clean.stderr
    # AND the policy is live: the added fetch is blocked and reported (the check above can fail)
    assert "violates the following Content Security Policy" in caught.stderr


MEASURE = """<script>
const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; };
const lanes = [...document.querySelectorAll('.lane.rank, .lane.worker')].map(lane => {
  const svg = lane.querySelector('svg');
  return {rank: lane.dataset.rank, worker: lane.dataset.worker || null, visible: lane.checkVisibility(),
          label: box(lane.querySelector('.label')),
          svg: box(svg), verdict: box(svg.querySelector('.verdict-mark')),
          spans: [...svg.querySelectorAll('rect.span')].map(r => ({state: r.dataset.state,
                  atVerdict: r.classList.contains('at-verdict'), box: box(r)}))};
});
const out = document.createElement('pre');
out.id = 'measured';
out.textContent = JSON.stringify({scrollWidth: document.documentElement.scrollWidth, innerWidth, lanes});
document.body.appendChild(out);
</script>"""


def measured(tmp_path: Path, page: Path) -> dict:
    """The boxes chromium laid the page's lanes and spans out in (CSS pixels), on a laptop-sized window;
    measured by a script added to a copy of the page, its policy lifted for that script alone."""
    copy = tmp_path / f"measured-{page.name}"
    text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page.read_text())
    copy.write_text(text.replace("</body>", MEASURE + "</body>"))
    done = chromium(tmp_path, copy, LAPTOP, "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'<pre id="measured">(.*?)</pre>', done.stdout, re.S)
    assert found, "the measuring script did not run"
    return json.loads(html.unescape(found.group(1)))


@needs_chromium
def test_the_lanes_are_laid_out_readably_on_a_laptop_screen(hang_page, tmp_path):
    # WHEN chromium lays the hang's page out in a 1280-pixel window
    m = measured(tmp_path, hang_page)
    # THEN nothing scrolls sideways, and each rank's lane is wide enough to read, its label beside it
    assert m["scrollWidth"] <= m["innerWidth"]
    shown = [lane for lane in m["lanes"] if lane["visible"]]
    ranks = [lane for lane in shown if lane["worker"] is None]
    assert [lane["rank"] for lane in ranks] == ["0", "1"]
    for lane in ranks:
        assert lane["svg"][2] >= MIN_LANE_PX, lane["svg"]
        assert lane["label"][0] + lane["label"][2] <= lane["svg"][0] + 0.5
    # AND the culprit's workers are shown under it, rank 0's stay folded out of sight
    assert sorted((lane["rank"], lane["worker"]) for lane in shown if lane["worker"]) == [("1", "0"), ("1", "1")]
    assert sum(1 for lane in m["lanes"] if lane["rank"] == "0" and lane["worker"] and not lane["visible"]) == 2
    # AND the lanes stack without overlapping, every span drawn inside its lane up to the verdict line
    tops = [(lane["svg"][1], lane["svg"][1] + lane["svg"][3]) for lane in shown]
    assert all(b[0] >= a[1] - 0.5 for a, b in zip(tops, tops[1:])), tops
    for lane in shown:
        verdict = lane["verdict"][0] + lane["verdict"][2]
        for span in lane["spans"]:
            left, _, width, _ = span["box"]
            assert width >= 1 and left >= lane["svg"][0] - 0.5 and left + width <= verdict + 0.5, (lane["rank"], span)


@needs_chromium
def test_a_rank_seen_gone_at_the_verdict_shows_right_of_the_line(crash_page, tmp_path):
    # WHEN chromium lays out the crash's page (rank 1 read as exited at the last sample only)
    m = measured(tmp_path, crash_page)
    rank1 = next(lane for lane in m["lanes"] if lane["rank"] == "1" and lane["worker"] is None)
    # THEN its exit is a box a reader sees, right of the verdict line and inside the page
    gone = rank1["spans"][-1]
    assert gone["state"] == "exited" and gone["atVerdict"]
    left, _, width, height = gone["box"]
    assert left >= rank1["verdict"][0] and width >= 8 and height >= 8
    assert left + width <= rank1["svg"][0] + rank1["svg"][2]
    assert m["scrollWidth"] <= m["innerWidth"]


@needs_chromium
def test_the_screenshot_shows_the_states_and_the_culprit(hang_page, tmp_path):
    # WHEN chromium draws the page in a laptop-sized window
    shot = tmp_path / "hang.png"
    done = chromium(tmp_path, hang_page, f"--screenshot={shot}", LAPTOP)
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    width, height, pixels = read_png(shot.read_bytes())
    assert (width, height) == (1280, 900)
    # THEN each state's colour and the culprit's tint cover a fair area: the inline SVG drew, no network needed
    seen = Counter(pixels)
    for name, rgb in COLOURS:
        count = sum(n for p, n in seen.items() if all(abs(a - b) <= 6 for a, b in zip(p, rgb)))
        assert count >= MIN_PIXELS, f"{name}: {count} pixels"


def read_png(data: bytes) -> tuple[int, int, list[tuple[int, int, int]]]:
    """A PNG of 8-bit RGB or RGBA (what chromium writes) as (width, height, RGB pixels); stdlib only."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 3
    while pos < len(data):
        size, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + size]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + size
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = prev[i], prev[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        rows.append(line)
        prev = line
    pixels = [tuple(row[x * channels:x * channels + 3]) for row in rows for x in range(width)]
    return width, height, pixels
