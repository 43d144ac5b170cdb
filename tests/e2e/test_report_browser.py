"""report.html in a real headless browser (Chromium): it loads with no console message (so
no blocked network load, no broken image), and the screenshot shows curves and contact
sheets where the page lays them out.

Marked `browser`: it runs in the default suite wherever Chromium is installed (CI installs
Debian's `chromium`) and is skipped, saying why, where it is not.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from support import make_run_dir

from genalign.reporting.report import write_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH = 1400
PLOT_LINE_COLOR = (31, 119, 180)  # matplotlib's C0, the first line of every panel

# Reads where the page put its plots and sheets; added to a probe copy only (the report
# itself has no script, and its Content-Security-Policy would refuse this one).
PROBE = """<script>
const box = e => { const r = e.getBoundingClientRect();
  return {id: e.closest('[id]').id, x: r.x, y: r.y + scrollY, w: r.width, h: r.height}; };
document.title = JSON.stringify({height: document.documentElement.scrollHeight,
  plots: [...document.querySelectorAll('.plots img')].map(box),
  sheets: [...document.querySelectorAll('details[open] .sheet')].map(box),
  status: document.getElementById('status').textContent});
</script>"""


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def console_lines(stderr: str) -> list[str]:
    """Chromium logs every console message (errors, CSP violations, failed loads) as INFO:CONSOLE."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


@pytest.mark.browser
@pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium is not installed (Debian: apt-get install -y chromium); the browser test of report.html needs it",
)
def test_report_renders_in_chromium(tmp_path):
    run_dir = make_run_dir(tmp_path / "run", num_steps=12, eval_every=4)
    report = write_report(run_dir)
    html = report.read_text()

    probe = run_dir / "probe.html"
    probe.write_text(
        re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html).replace("</body>", PROBE + "</body>")
    )
    dumped = chromium(tmp_path, f"--window-size={WIDTH},1000", "--dump-dom", probe.as_uri())
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    title = re.search(r"<title>(.*?)</title>", dumped.stdout, re.S).group(1)
    layout = json.loads(title.replace("&quot;", '"').replace("&amp;", "&"))
    assert layout["status"] == "finished · 12 steps"
    assert len(layout["plots"]) == 10 and len(layout["sheets"]) == 2  # step 0 beside step 12, open

    height = int(layout["height"]) + 10
    shot = tmp_path / "report.png"
    shown = chromium(tmp_path, f"--window-size={WIDTH},{height}", f"--screenshot={shot}", report.as_uri())
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert console_lines(shown.stderr) == []
    pixels = np.asarray(Image.open(shot).convert("RGB")).astype(np.int32)  # [H, W, 3]
    assert pixels.shape[:2] == (height, WIDTH)

    def region(item: dict) -> np.ndarray:
        x, y, w, h = (round(item[k]) for k in ("x", "y", "w", "h"))
        assert w > 200 and h > 100 and y + h <= height, item  # laid out big enough to read, on the page
        return pixels[y : y + h, x : x + w]

    for plot in layout["plots"]:
        crop = region(plot)
        line_pixels = (np.abs(crop - PLOT_LINE_COLOR).sum(-1) < 60).sum()
        assert line_pixels > 150, f"{plot['id']}: no curve drawn ({line_pixels} C0 pixels)"
        assert (crop.sum(-1) < 200).sum() > 300, f"{plot['id']}: no axis text/ticks"
    before, after = (region(sheet) for sheet in layout["sheets"])
    assert layout["sheets"][0]["x"] < layout["sheets"][1]["x"]  # side by side, before on the left
    for crop, step in ((before, 0), (after, 12)):
        assert crop.std() > 40, f"step {step} sheet is blank"
        # the made-up images of step s saturate channel s % 3 (0 and 12: red), so red dominates
        channel_means = crop.reshape(-1, 3).mean(0)
        assert channel_means[0] > channel_means[1] + 20 and channel_means[0] > channel_means[2] + 20


@pytest.mark.browser
@pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium is not installed (Debian: apt-get install -y chromium); the browser test of report.html needs it",
)
def test_plots_at_the_demos_magnitudes_show_every_label_whole(tmp_path):
    """KL of 1e-4, ratios 1 ± 1e-5, losses of 1e-6 (tests/support.py:make_demo_like_run): in the
    screenshot no plot has ink at its left or top edge (a label cut off there: the KL axis's
    was) and each plot's legend rows lie below its x axis (none over a curve)."""
    from support import make_demo_like_run

    run_dir = make_demo_like_run(tmp_path / "run")
    report = write_report(run_dir)
    probe = run_dir / "probe.html"
    probe.write_text(
        re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", report.read_text()).replace(
            "</body>", PROBE + "</body>"
        )
    )
    dumped = chromium(tmp_path, f"--window-size={WIDTH},1000", "--dump-dom", probe.as_uri())
    title = re.search(r"<title>(.*?)</title>", dumped.stdout, re.S).group(1)
    layout = json.loads(title.replace("&quot;", '"').replace("&amp;", "&"))
    height = int(layout["height"]) + 10
    shot = tmp_path / "report.png"
    shown = chromium(tmp_path, f"--window-size={WIDTH},{height}", f"--screenshot={shot}", report.as_uri())
    assert shown.returncode == 0 and console_lines(shown.stderr) == [], shown.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("RGB")).astype(np.int32)  # [H, W, 3]
    assert {plot["id"] for plot in layout["plots"]} >= {"plot-kl", "plot-ratio", "plot-loss"}
    for plot in layout["plots"]:
        x, y, w, h = (round(plot[k]) for k in ("x", "y", "w", "h"))
        crop = pixels[y + 1 : y + h - 1, x + 1 : x + w - 1]  # inside the image's own border pixels
        ink = crop.sum(-1) < 300  # text and axis lines (dark); curves are coloured, the page white
        assert not ink[:, :3].any(), f"{plot['id']}: ink at the left edge: a label is cut"
        assert not ink[:3, :].any(), f"{plot['id']}: ink at the top edge: the title is cut"
        rows = np.flatnonzero(ink.any(axis=1))
        assert rows.size and rows[-1] < h - 4, f"{plot['id']}: the legend runs off the bottom"
