"""The default run's report.html, as this kit renders it, opened in headless Chromium at 1280 px:
the answer block within the first 800 px, the page at most 6,000 px tall and never wider than the
window, every figure's text at least 10 px as drawn, the all-pass and per-sample tables collapsed.

A probe script appended to a temporary copy of the page measures the laid-out page and writes the
numbers into the DOM that --dump-dom prints. The page is the committed report of the default
config's reference run (reports/ref2-default), which tests/test_reference_runs.py regenerates
byte for byte from its records with this kit.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"
DEFAULT_RUN = REPO / "results" / "ref2-default"  # the reference run of config/config.yaml (results/README.md)
WIDTH, FIRST_SCREEN, MAX_HEIGHT, MIN_TEXT_PX = 1280, 800, 6000, 10.0

pytestmark = [
    pytest.mark.skipif(not Path(CHROMIUM).exists(),
                       reason="chromium is not installed here (Debian package 'chromium': apt-get install -y chromium)"),
]

PROBE = """<script>
window.addEventListener('load', () => {
  const doc = document.documentElement;
  const answers = document.getElementById('answers-block');
  const box = answers ? answers.getBoundingClientRect() : null;
  const out = {height: Math.max(doc.scrollHeight, document.body.scrollHeight), width: doc.scrollWidth,
               client: doc.clientWidth, answers: box ? [box.top + window.scrollY, box.bottom + window.scrollY] : null,
               open: [...document.querySelectorAll('details')].filter(d => d.open).length,
               collapsed: [...document.querySelectorAll('h2')].filter(h => h.closest('details')).map(h => h.id),
               visible_tables: [...document.querySelectorAll('table')].filter(t => t.offsetParent !== null).length};
  document.querySelectorAll('details').forEach(d => d.open = true);
  const sizes = [];
  document.querySelectorAll('svg text').forEach(t => {
    const m = t.getScreenCTM();
    if (!m || !t.textContent.trim()) return;
    sizes.push([parseFloat(getComputedStyle(t).fontSize) * Math.sqrt(Math.abs(m.a * m.d - m.b * m.c)),
                t.textContent.trim().slice(0, 40)]);
  });
  sizes.sort((a, b) => a[0] - b[0]);
  out.texts = sizes.length; out.smallest = sizes.slice(0, 5);
  out.svgs = document.querySelectorAll('svg').length;
  out.open_width = doc.scrollWidth;
  const pre = document.createElement('pre'); pre.id = 'kernelkit-probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def measure(page: Path, tmp_path: Path) -> dict:
    probed = tmp_path / f"probed-{page.name}"  # the page is self-contained: nothing it shows is a link
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>", 1), encoding="utf-8")
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--window-size={WIDTH},{FIRST_SCREEN}", f"--user-data-dir={tmp_path / 'profile'}",
                           "--virtual-time-budget=5000", "--dump-dom", probed.as_uri()],
                          capture_output=True, text=True, timeout=120, check=False)
    found = re.search(r'<pre id="kernelkit-probe">(.*?)</pre>', done.stdout, re.S)
    assert found, f"chromium printed no probe (exit {done.returncode}): {done.stderr[-500:]}"
    return json.loads(html.unescape(found.group(1)))


@pytest.fixture(scope="module")
def default_page() -> Path:
    """The committed report.html of the default run: tests/test_reference_runs.py shows it is, byte
    for byte, what this kit renders from the committed records, figures included."""
    page = REPO / "reports" / DEFAULT_RUN.name / "report.html"
    if not page.is_file():
        pytest.skip(f"{page.relative_to(REPO)} is not in this checkout")
    return page


def test_the_default_report_answers_on_the_first_screen_and_fits_the_window(default_page, tmp_path):
    probe = measure(default_page, tmp_path)
    top, bottom = probe["answers"]
    assert 0 <= top < bottom <= FIRST_SCREEN, probe["answers"]
    assert probe["height"] <= MAX_HEIGHT, probe["height"]
    assert probe["width"] <= min(WIDTH, probe["client"]) and probe["open_width"] <= WIDTH, probe
    # Figures: every text as drawn at 1280 px, every collapsed section opened.
    assert probe["svgs"] >= 3 and probe["texts"] > 100
    assert probe["smallest"][0][0] >= MIN_TEXT_PX, probe["smallest"]
    # All-pass checks, per-sample tables and per-repeat detail start collapsed.
    assert probe["open"] == 0
    for section in ("correctness", "negative-controls", "samples-per-repeat", "noise-within-and-between-processes",
                    "method", "environment"):
        assert section in probe["collapsed"], (section, probe["collapsed"])
    print(f"report.html at {WIDTH} px: {probe['height']} px tall, {probe['width']} px wide, answers {top:.0f}-{bottom:.0f} "
          f"px, smallest figure text {probe['smallest'][0][0]:.1f} px ({probe['smallest'][0][1]!r})")


def test_the_history_and_diff_pages_fit_the_window_with_readable_figures(tmp_path):
    from synthetic import write_run

    from kernelkit.cli import main

    for name, seed in (("a", 0), ("b", 1)):
        write_run(tmp_path, name, seed=seed)
    history, diff_page = tmp_path / "history.html", tmp_path / "diff.html"
    assert main(["history", str(tmp_path / "results"), "--html", str(history)]) == 0
    assert main(["diff", str(tmp_path / "results" / "a"), str(tmp_path / "results" / "b"), "--markdown",
                 str(tmp_path / "diff.md"), "--html", str(diff_page)]) == 0
    for page in (history, diff_page):
        probe = measure(page, tmp_path)
        assert probe["width"] <= WIDTH and probe["open_width"] <= WIDTH, (page.name, probe)
        assert not probe["smallest"] or probe["smallest"][0][0] >= MIN_TEXT_PX, (page.name, probe["smallest"])
    assert re.search(r"<h2 id=\"what-differs\">", diff_page.read_text()).start() < diff_page.read_text().index(
        'id="summary"')
