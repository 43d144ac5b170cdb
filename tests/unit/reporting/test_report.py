"""report.html: what the page holds, that it loads nothing, and that the trainer hook never raises."""

from __future__ import annotations

import base64
import json
import logging
import re
import shutil

import pytest
from support import make_run_dir

from genalign.reporting import report as report_module
from genalign.reporting.plots import moving_average, panels, render_panel
from genalign.reporting.report import REPORT_FILE, refresh_report, write_report
from genalign.reporting.run_data import read_run
from genalign.tracking.sinks import CSVSink


def external_references(html: str) -> list[str]:
    """src/href/url() targets that are neither data URIs nor relative paths."""
    targets = re.findall(r'(?:src|href)="([^"]*)"', html) + re.findall(r'url\("?([^")]*)', html)
    return [target for target in targets if re.match(r"(?i)^(https?:|//|ftp:|file:)", target)]


def test_full_report_sections(tmp_path):
    run_dir = make_run_dir(tmp_path / "run", num_steps=8, eval_every=4)
    path = write_report(run_dir)
    assert path == run_dir / REPORT_FILE
    html = path.read_text()
    assert 'id="status">finished · 8 steps' in html
    for key in ("train_reward", "eval_reward", "kl", "clip", "advantages", "time", "throughput"):
        assert f'id="plot-{key}"' in html
    # before/after: the step-0 sheet beside steps 4 and 8, each sheet embedded exactly once
    assert 'id="eval-8" open' in html and 'id="eval-4">' in html
    assert html.count("<b>before: step 0</b>") == 2
    for step in (0, 4, 8):
        assert html.count(f".sheet-{step}{{background-image") == 1
        assert f'href="eval_epoch_{step}/contact_sheet.png"' in html
    assert "exact" in html and "Content-Security-Policy" in html and "<script" not in html
    assert "trainer:\n  num_steps: 8" in html  # the resolved config
    assert "no provenance.json" in html
    assert external_references(html) == []


def test_report_of_a_dir_with_only_metrics(tmp_path):
    sink = CSVSink(tmp_path / "metrics.csv")
    for step in (1, 2, 3):
        sink.log(step, {"reward_mean": 0.1 * step, "clip_frac": 0.2})
    html = write_report(tmp_path).read_text()
    assert 'id="plot-train_reward"' in html and 'id="plot-clip"' in html
    assert 'id="plot-kl"' not in html and 'id="plot-eval_reward"' not in html  # nothing logged for them
    assert "No evaluation contact sheets yet" in html and "No config.yaml" in html
    assert "step 3 of ? · in progress or stopped" in html
    assert "not recorded yet" in html  # no parity column


def test_panels_follow_the_columns(tmp_path):
    run = read_run(make_run_dir(tmp_path / "one", num_steps=3, components=("ocr",), gold=False))
    lines = {panel.key: [line.column for line in panel.drawn_lines(run)] for panel in panels(run)}
    # one component equal to the total is not drawn twice; no gold columns, no gold lines
    assert lines["train_reward"] == ["reward_mean"]
    assert lines["eval_reward"] == ["eval_reward_mean"]
    assert lines["clip"] == ["clip_frac", "clip_frac_low", "clip_frac_high"]
    run = read_run(make_run_dir(tmp_path / "two", num_steps=3))
    lines = {panel.key: [line.column for line in panel.drawn_lines(run)] for panel in panels(run)}
    assert lines["train_reward"] == ["reward_mean", "reward_jpeg_mean", "reward_ocr_mean"]
    # the one gold component equals the gold total: drawn once
    assert lines["eval_reward"] == ["eval_reward_mean", "eval_reward_jpeg_mean", "eval_reward_ocr_mean", "gold_mean"]


def test_panel_svg_is_deterministic_and_standalone(tmp_path):
    run = read_run(make_run_dir(tmp_path / "run", num_steps=40, eval_every=10))
    panel = panels(run)[0]
    svg = render_panel(panel, run)
    assert svg == render_panel(panel, run)  # no date, fixed id salt: same input, same bytes
    assert "<svg" in svg and "http://www.w3.org" in svg  # the xmlns namespace only, never loaded
    assert 'xlink:href="http' not in svg


def test_figures_are_the_pages_panels_as_files(tmp_path, capsys):
    from genalign.cli import report_main

    run_dir = make_run_dir(tmp_path / "run", num_steps=8, eval_every=4)
    assert report_main([str(run_dir), "--figures", str(tmp_path / "figs")]) == 0
    run = read_run(run_dir)
    written = sorted(p.name for p in (tmp_path / "figs").iterdir())
    assert written == sorted(f"{panel.key}.svg" for panel in panels(run)) and "eval_reward.svg" in written
    for panel in panels(run):
        assert (tmp_path / "figs" / f"{panel.key}.svg").read_text() == render_panel(panel, run)
    printed = capsys.readouterr().out.split()
    assert printed[0] == str(run_dir / REPORT_FILE) and len(printed) == 1 + len(written)


def test_moving_average_by_hand():
    # window 2: [1], [1,3], [3,5], [5,7] -> 1, 2, 4, 6
    assert moving_average([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    assert moving_average([2.0], 5) == [2.0]


def test_large_sheets_are_downscaled_to_jpeg(tmp_path, monkeypatch):
    run_dir = make_run_dir(tmp_path / "run", num_steps=2, eval_every=2)
    monkeypatch.setattr(report_module, "EMBED_PNG_MAX_BYTES", 10)
    monkeypatch.setattr(report_module, "EMBED_MAX_WIDTH", 64)
    uri, width, height = report_module.embedded_image(run_dir / "eval_epoch_0" / "contact_sheet.png")
    assert uri.startswith("data:image/jpeg;base64,")
    from io import BytesIO

    from PIL import Image

    with Image.open(BytesIO(base64.b64decode(uri.split(",", 1)[1]))) as image:
        assert image.width == 64 and image.height == round(height * 64 / width)
    assert (width, height) == Image.open(run_dir / "eval_epoch_0" / "contact_sheet.png").size


def test_provenance_section(tmp_path):
    run_dir = make_run_dir(tmp_path / "run", num_steps=2, eval_every=2)
    launch = {
        "started_at": "2026-01-01T00:00:00+00:00",
        "start_step": 1,
        "argv": ["genalign", "train"],
        "command": "genalign train --config <x>",
        "git": {"commit": "a" * 40, "dirty": True, "root": "/r"},
        "hostname": "box",
        "packages": {"torch": "2.13.0"},
        "python": "3.11",
        "devices": [],
    }
    (run_dir / "provenance.json").write_text(json.dumps({"launches": [launch, {**launch, "git": None}]}))
    html = write_report(run_dir).read_text()
    assert "aaaaaaaaaaaa (uncommitted changes)" in html and "not a git checkout" in html
    assert "genalign train --config &lt;x&gt;" in html  # escaped
    assert "torch 2.13.0" in html and "recipe <b>default (no --config)</b>" in html


def test_refresh_report_logs_a_failure_and_returns_none(tmp_path, caplog):
    run_dir = make_run_dir(tmp_path / "run", num_steps=2, eval_every=2)
    (run_dir / "metrics.csv").write_text("step,reward_mean\n1,not-a-number\n")
    with caplog.at_level(logging.WARNING, logger="genalign.reporting.report"):
        assert refresh_report(run_dir) is None
    assert "could not write" in caplog.text and "line 2 is malformed" in caplog.text
    assert "training continues" in caplog.text
    assert not (run_dir / REPORT_FILE).exists()


def test_write_report_to_another_place_links_sheets_relative_to_it(tmp_path):
    run_dir = make_run_dir(tmp_path / "run", num_steps=2, eval_every=2)
    html = write_report(run_dir, tmp_path / "pages" / "r.html").read_text()
    assert 'href="../run/eval_epoch_2/contact_sheet.png"' in html


@pytest.mark.parametrize("gap, text", [(0.0, "exact"), (2.5e-3, "2.50e-03")])
def test_parity_verdict(tmp_path, gap, text):
    run = read_run(make_run_dir(tmp_path / "run", num_steps=2, eval_every=2, parity_gap=gap))
    assert report_module.parity_verdict(run)[0] == text


def test_a_run_with_only_its_baseline_eval(tmp_path):
    run_dir = make_run_dir(tmp_path / "run", num_steps=3, eval_every=100, finished=False)
    (run_dir / "metrics.csv").unlink()  # as after the step-0 evaluation, before step 1 is logged
    shutil.rmtree(run_dir / "eval_epoch_3")
    rows = (run_dir / "eval_metrics.csv").read_text().splitlines()
    (run_dir / "eval_metrics.csv").write_text("\n".join(rows[:2]) + "\n")
    html = write_report(run_dir).read_text()
    assert 'id="eval-0" open' in html and "<b>baseline: step 0</b>" in html and "before:" not in html
    assert "step 0 of 3 · in progress or stopped" in html
    assert 'id="plot-eval_reward"' in html and 'id="plot-train_reward"' not in html


HOSTILE = '<form action="https://evil.example/"><input name=x><a href="https://evil.example/">$\\frac{1}{0}$'


def test_every_field_of_every_file_the_report_reads_is_escaped(tmp_path):
    """A run directory handed to you: hostile text in config.yaml, provenance.json (every
    field, and fields of the wrong type), metric column names and the directory's own name.
    The page and its inlined SVG panels must hold none of it as markup."""
    run_dir = make_run_dir(tmp_path / "run<b>dir", num_steps=4, eval_every=2, components=("ocr", HOSTILE))
    (run_dir / "config.yaml").write_text(
        json.dumps(
            {
                "recipe": HOSTILE,
                "model": {"family": HOSTILE, "path": HOSTILE, "train_mode": HOSTILE, "dtype": HOSTILE},
                "algorithm": {"name": HOSTILE},
                "reward": {"components": {HOSTILE: HOSTILE}},
                "eval": {"gold_rewards": {HOSTILE: 1.0}},
                "trainer": {"num_steps": HOSTILE, "parity_check": HOSTILE},
            }
        )
    )
    launch = {
        key: HOSTILE for key in ("started_at", "start_step", "command", "cwd", "hostname", "python", "platform", "cuda")
    }
    (run_dir / "provenance.json").write_text(
        json.dumps(
            {
                "launches": [
                    {
                        **launch,
                        "git": {"commit": HOSTILE, "dirty": HOSTILE},
                        "devices": [HOSTILE, 3],
                        "packages": {HOSTILE: HOSTILE},
                    },
                    {**launch, "git": HOSTILE, "devices": HOSTILE, "packages": [HOSTILE]},
                    HOSTILE,
                ]
            }
        )
    )
    html = write_report(run_dir).read_text()
    svgs = [base64.b64decode(uri).decode() for uri in re.findall(r"data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)", html)]
    assert svgs
    for text in [html, *svgs]:
        assert "<form" not in text.lower() and "<input" not in text.lower() and 'evil.example/"><' not in text
        assert '<a href="https://evil' not in text
    assert "&lt;form action=" in html  # shown, as text
