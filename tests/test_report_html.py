"""report.html as a page: tables, pictures, links, natural lane order, offline; and in a real browser.

The browser tests render the committed H200 demo run (tests/data/report/PROVENANCE.md) in headless
Chromium: the DOM must hold real tables, a click on a header must sort, and a screenshot's pixels
must show table rules with text between them (a page of raw Markdown in a <pre> has none).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from faulthunt.report import build_model, render, write_reports
from faulthunt.report.html import natural_key, sorted_lanes
from faulthunt.report.model import Lane

DATA = Path(__file__).parent / "data" / "report"
DEMO = DATA / "h200_demo_run"
SAMPLE = DATA / "sample_run"


def test_lanes_in_natural_order() -> None:
    lanes = [Lane(w, p, (), ()) for w, p in (("gw10", 1), ("gw2", 2), ("gw1", 3), ("gw2", 0), ("main", None))]
    assert [(ln.worker, ln.pid) for ln in sorted_lanes(lanes)] == [
        ("gw1", 3), ("gw2", 0), ("gw2", 2), ("gw10", 1), ("main", None)]
    assert natural_key("gw2") < natural_key("gw10")


def test_page_has_tables_pictures_and_links() -> None:
    html = render(build_model(DEMO), "html")
    assert 'id="markdown"' not in html and "| --- |" not in html and "|---|" not in html
    for table in ("tests-table", "failures-table", "xids-table", "sanitizer-table", "environment-table"):
        assert f'<table id="{table}"' in html
    assert '<svg id="rate-chart"' in html and '<svg id="timeline"' in html
    assert html.count('class="rate-row"') == 5  # the five failing tests of the demo run
    assert '<pre id="sanitizer-record"><code>Invalid __global__ read of size 4 bytes' in html
    # lanes in natural order: gw2 before gw10
    workers = re.findall(r'<g class="lane" data-worker="([^"]+)"', html)
    assert workers == sorted(workers, key=natural_key) and workers.index("gw2") < workers.index("gw10")
    # every link from the timeline lands on a row that exists
    targets = set(re.findall(r'<a href="#((?:failure|xid)-\d+)">', html))
    assert targets and all(f'<tr id="{t}"' in html for t in targets)
    assert any(t.startswith("xid-") for t in targets) and any(t.startswith("failure-") for t in targets)
    assert 'class="marker marker-xid"' in html  # real Xids reach the timeline (kernel time -> wall)


def test_offline_and_script_pinned_by_hash() -> None:
    html = render(build_model(DEMO), "html")
    assert "http://" not in html and "https://" not in html and "@import" not in html
    assert not re.search(r"<(link|img|iframe|object)\b", html)
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    assert "default-src 'none'" in csp
    script = re.search(r"<script>(.*?)</script>", html, re.S).group(1)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"'sha256-{digest}'" in csp
    assert html.count("<script>") == 1


def test_simulated_run_says_so(tmp_path: Path) -> None:
    from test_report_escape import simulated_run
    html = render(build_model(simulated_run(tmp_path)), "html")
    assert '<p class="simulated" id="simulated">SIMULATED run' in html
    assert '<p class="headline" id="headline">SIMULATED: ' in html
    assert "<td>0 (SIMULATED)</td>" in html  # the Xid rows' GPU


# --- in a real browser ---------------------------------------------------------------------------

def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _browser(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium not installed (apt-get install -y chromium; .ci/run installs it)")
    return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           "--no-first-run", "--force-device-scale-factor=1",
                           f"--user-data-dir={tmp_path / 'profile'}", *args],
                          capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def demo_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("demo") / "run"
    shutil.copytree(DEMO, run)
    return write_reports(run, ("html",))[0]


@pytest.mark.slow
def test_sample_run_timeline_in_chromium(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    html = write_reports(run, ("html",))[0]
    out = _browser(tmp_path, "--dump-dom", html.resolve().as_uri())
    dom = out.stdout
    assert dom.count('class="lane"') == 4, out.stderr[-2000:]
    for marker in ("crash", "xid", "hang"):
        assert f'class="marker marker-{marker}"' in dom
    assert "outcome-hung" in dom and "outcome-crashed" in dom


@pytest.mark.slow
def test_demo_tables_in_chromium_dom(demo_html: Path, tmp_path: Path) -> None:
    """The browser's DOM of the H200 demo report holds real tables, with the run's rows."""
    out = _browser(tmp_path, "--dump-dom", demo_html.resolve().as_uri())
    dom = out.stdout
    assert "<table" in dom, out.stderr[-2000:]
    tables = re.findall(r'<table id="([a-z-]+)"', dom)
    assert tables == ["tests-table", "failures-table", "xids-table", "sanitizer-table", "environment-table"]
    body = dom.split('<table id="failures-table"', 1)[1].split("</table>", 1)[0]
    assert body.count("<tr id=\"failure-") == 14  # summary.json's 14 failures
    assert "test_planted[wild_write-cuda-2-4]" in body
    # the sort script ran (it marks each sortable header), under the page's own CSP
    assert dom.count('title="sort by ') >= 5


@pytest.mark.slow
def test_header_click_sorts_in_chromium(demo_html: Path, tmp_path: Path) -> None:
    """Click 'Xids' twice (descending, then ascending): the rows reorder."""
    page = demo_html.read_text()
    click = ("var th=document.querySelectorAll('#tests-table th')[4];th.click();th.click();")
    digest = base64.b64encode(hashlib.sha256(click.encode()).digest()).decode()
    page = page.replace("script-src ", f"script-src 'sha256-{digest}' ").replace(
        "</body>", f"<script>{click}</script></body>")
    clicked = tmp_path / "clicked.html"
    clicked.write_text(page)
    dom = _browser(tmp_path, "--dump-dom", clicked.resolve().as_uri()).stdout
    body = dom.split('<table id="tests-table"', 1)[1].split("</tbody>", 1)[0]
    xids = [int(v) for v in re.findall(r'<td class="num">(\d+)</td></tr>', body)]
    assert xids == sorted(xids) and xids != [4, 0, 0, 6, 0], xids


@pytest.mark.slow
def test_demo_screenshot_shows_tables(demo_html: Path, tmp_path: Path) -> None:
    """Pixels, not markup: the screenshot has table rules, and text between consecutive rules."""
    Image = pytest.importorskip("PIL.Image", reason="pillow is in the test extra")
    shot = tmp_path / "report.png"
    out = _browser(tmp_path, "--window-size=1400,4200", f"--screenshot={shot}", demo_html.resolve().as_uri())
    assert shot.exists(), out.stderr[-2000:]
    if os.environ.get("FAULTHUNT_SCREENSHOT_DIR"):  # to look at it: the page as a person sees it
        shutil.copy(shot, Path(os.environ["FAULTHUNT_SCREENSHOT_DIR"]) / "h200_demo_report.png")
    img = Image.open(shot).convert("RGB")
    w, h = img.size
    px = img.load()
    border = (0xd0, 0xd7, 0xde)  # the tables' cell border colour (html._STYLE)

    def is_rule(y: int) -> bool:
        return sum(1 for x in range(0, w, 2) if px[x, y] == border) * 2 >= 500

    rules = [y for y in range(h) if is_rule(y)]
    assert len(rules) >= 20, f"only {len(rules)} table rules in the screenshot"
    # between two consecutive rules of a table row: dark text pixels, so the cells are not blank
    rows_with_text = 0
    for a, b in zip(rules, rules[1:]):
        if 12 <= b - a <= 80:
            dark = sum(1 for y in range(a + 2, b - 1) for x in range(0, w, 3) if sum(px[x, y]) < 250)
            rows_with_text += dark > 20
    assert rows_with_text >= 15, rows_with_text
