"""A report and a diff of synthetic runs (tests/synthetic.py) opened in headless Chromium at 1280 px,
as a reader would.

Chromium runs the page with a probe script appended to a temporary copy: it records console
errors, failed loads and broken images, and where the Answers block starts, and writes them
into the DOM that --dump-dom prints. A screenshot of the first screen goes to the test's
tmp folder and its path is printed for the log.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1280,1500"]

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                reason="chromium is not installed here (Debian package 'chromium'; .ci/run installs it)")

# Runs before the page's own content, so it sees every error the page raises.
PROBE_HEAD = """<script>
window.__problems = [];
const original = console.error;
console.error = (...args) => { window.__problems.push('console.error: ' + args.join(' ')); original(...args); };
window.addEventListener('error', e => window.__problems.push(
  e.target && e.target !== window ? 'failed to load: ' + (e.target.src || e.target.href) : 'error: ' + e.message), true);
</script>"""
PROBE_TAIL = """<script>
window.addEventListener('load', () => {
  const broken = [...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src.slice(0, 80));
  const answers = document.getElementById('answers-block');
  const out = {problems: window.__problems, broken: broken, svgs: document.querySelectorAll('svg').length,
               answers_top: answers ? answers.getBoundingClientRect().top + window.scrollY : null,
               width: document.documentElement.clientWidth};
  const pre = document.createElement('pre'); pre.id = 'kernelkit-probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def _chromium(tmp_path: Path, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *arguments],
                          capture_output=True, text=True, timeout=120, check=False)


def _probe(tmp_path: Path, page: Path) -> dict:
    text = page.read_text(encoding="utf-8")
    probed = tmp_path / f"probed-{page.name}"
    probed.write_text(text.replace("<head>", "<head>" + PROBE_HEAD, 1).replace("</body>", PROBE_TAIL + "</body>", 1))
    done = _chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", probed.as_uri())
    found = re.search(r'<pre id="kernelkit-probe">(.*?)</pre>', done.stdout, re.S)
    assert found, f"chromium printed no probe (exit {done.returncode}): {done.stderr[-500:]}"
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))


def test_report_answers_on_the_first_screen_without_errors(tmp_path, synthetic_run):
    from synthetic import timing_files

    from kernelkit.cli import main

    figures = tmp_path / "report" / "figures"
    files = [str(p) for p in timing_files(synthetic_run)]
    assert main(["figure", "--kernel", "rmsnorm", "--output", str(figures / "rmsnorm.svg"), *files]) == 0
    assert main(["clock-figure", "--output", str(figures / "clocks.svg"), *files]) == 0
    page = figures.parent / "report.html"
    assert main(["report", str(synthetic_run), "--figures", str(figures), "--markdown", str(figures.parent / "report.md"),
                 "--html", str(page)]) == 0
    probe = _probe(tmp_path, page)
    assert probe["width"] <= 1280 and probe["problems"] == [] and probe["broken"] == []
    assert probe["svgs"] >= 3  # the answers charts at least
    assert probe["answers_top"] is not None and 0 <= probe["answers_top"] < 1500, probe
    shot = tmp_path / "report-first-screen.png"
    _chromium(tmp_path, f"--screenshot={shot}", page.as_uri())
    assert shot.stat().st_size > 10_000
    print(f"screenshot of the first screen: {shot}")


def test_diff_page_opens_without_errors(tmp_path, synthetic_pair):
    from kernelkit.cli import main

    page = tmp_path / "diff.html"
    assert main(["diff", *map(str, synthetic_pair), "--markdown", str(tmp_path / "diff.md"), "--html", str(page)]) == 0
    probe = _probe(tmp_path, page)
    assert probe["problems"] == [] and probe["broken"] == []
    shot = tmp_path / "diff-first-screen.png"
    _chromium(tmp_path, f"--screenshot={shot}", page.as_uri())
    assert shot.stat().st_size > 5_000
    print(f"screenshot of the diff: {shot}")


def test_the_probe_sees_a_broken_image_and_a_console_error(tmp_path):
    page = tmp_path / "planted.html"
    page.write_text('<!DOCTYPE html><html><head><meta charset="utf-8"></head><body><h2 id="x">x</h2>'
                    '<img src="missing.png"><script>console.error("planted")</script></body></html>')
    probe = _probe(tmp_path, page)
    assert "console.error: planted" in probe["problems"] and len(probe["broken"]) == 1
    assert probe["answers_top"] is None
