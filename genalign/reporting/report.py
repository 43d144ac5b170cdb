"""`report.html`: one self-contained page that shows a run — curves, images, checks, provenance.

Where it fits: `genalign report RUN_DIR` calls `write_report`; the trainer (rank 0) calls
`refresh_report` after each evaluation and at the end, so a long run can be watched by
reloading the page. The page needs no network: plots are inline SVG data URIs, contact sheets
inline PNG/JPEG, no script, and a Content-Security-Policy that forbids any other load (a
browser refuses and reports one, which the browser test catches).

Contact sheets are embedded once each (a CSS class per sheet), so the "before" sheet shown
beside every evaluation costs its bytes once. A sheet over `EMBED_PNG_MAX_BYTES` (SD3 sheets
at 512², not the toy ones) is downscaled to `EMBED_MAX_WIDTH` and embedded as JPEG; the
page links the full-size PNG beside it.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import statistics
import time
from datetime import datetime, timezone
from html import escape
from pathlib import Path

from genalign.atomic import write_text_atomically
from genalign.reporting.plots import panels, render_panel, svg_data_uri
from genalign.reporting.run_data import RunData, read_run

log = logging.getLogger(__name__)

REPORT_FILE = "report.html"
EMBED_PNG_MAX_BYTES = 600_000
EMBED_MAX_WIDTH = 2048
JPEG_QUALITY = 88
CONTENT_SECURITY_POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

STYLE = """
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#1d2430;
 background:#f4f6f9}
header{background:#1f2a3c;color:#fff;padding:18px 28px 14px}
header h1{margin:0;font-size:22px;font-weight:600;display:flex;gap:14px;align-items:center;flex-wrap:wrap}
header p{margin:6px 0 0;color:#c9d3e3}
.badge{font-size:13px;font-weight:600;padding:3px 10px;border-radius:12px;background:#3b82f6;color:#fff}
.badge.finished{background:#16a34a}
main{padding:18px 28px 40px;max-width:1800px}
h2{font-size:17px;margin:26px 0 10px;color:#1f2a3c}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(180px,1fr));gap:12px}
.card{background:#fff;border-radius:8px;padding:10px 14px;box-shadow:0 1px 2px #0002}
.card .label{font-size:12px;color:#5b6677;text-transform:uppercase;letter-spacing:.04em}
.card .value{font-size:19px;font-weight:600}
.card .note{font-size:12px;color:#5b6677}
.up{color:#15803d}.down{color:#b91c1c}
.warning{background:#fef2f2;border:1px solid #fca5a5;color:#991b1b;border-radius:8px;padding:10px 14px;margin-top:14px}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(400px,1fr));gap:14px}
.plots figure{margin:0;background:#fff;border-radius:8px;padding:6px;box-shadow:0 1px 2px #0002}
.plots img{width:100%;height:auto;display:block}
details.eval{background:#fff;border-radius:8px;margin-bottom:12px;box-shadow:0 1px 2px #0002}
details.eval summary{padding:10px 14px;cursor:pointer;font-weight:600}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:14px;padding:0 14px 14px}
.pair figure{margin:0}
.pair figcaption{font-size:13px;color:#3b4658;margin-bottom:6px}
.sheet{width:100%;background-size:100% 100%;background-repeat:no-repeat;border:1px solid #d5dbe4}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px #0002;border-radius:8px}
td,th{padding:5px 12px;text-align:left;border-bottom:1px solid #e6eaf0;vertical-align:top;font-size:13px}
th{color:#5b6677;font-weight:600}
pre{background:#fff;padding:12px 16px;border-radius:8px;box-shadow:0 1px 2px #0002;overflow:auto;font-size:12px}
code{font-size:12px}
.muted{color:#5b6677}
"""


def number(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}g}"


def change(before: float | None, after: float | None) -> str:
    """'+0.031' in green / '-0.012' in red (HTML), '' when either is missing."""
    if before is None or after is None:
        return ""
    delta = after - before
    return f'<span class="{"up" if delta >= 0 else "down"}">{delta:+.3g}</span>'


def card(label: str, value: str, note: str = "") -> str:
    return (
        f'<div class="card"><div class="label">{escape(label)}</div><div class="value">{value}</div>'
        f'<div class="note">{note}</div></div>'
    )


# ---------------------------------------------------------------- header and summary
def status(run: RunData) -> tuple[str, str]:
    """(badge text, css class): finished, or how far the run has got."""
    total = run.setting("trainer.num_steps")
    if run.finished:
        return f"finished · {total} steps", "finished"
    done = run.last_step or 0
    return f"step {done} of {total if total is not None else '?'} · in progress or stopped", "running"


def recipe_line(run: RunData) -> str:
    parts = []
    if run.provenance is not None:
        parts.append(f"recipe <b>{escape(run.recipe or 'default (no --config)')}</b>")
    model = run.setting("model") or {}
    if model:
        parts.append(
            f"model {escape(str(model.get('family')))} ({escape(str(model.get('path')))}, "
            f"{escape(str(model.get('train_mode')))}, {escape(str(model.get('dtype')))})"
        )
    if run.setting("algorithm.name"):
        parts.append(f"algorithm {escape(str(run.setting('algorithm.name')))}")
    for key, label in (("reward.components", "reward"), ("eval.gold_rewards", "gold")):
        weights = run.setting(key) or {}
        if weights:
            parts.append(f"{label} " + " + ".join(f"{escape(str(w))}·{escape(name)}" for name, w in weights.items()))
    return " · ".join(parts)


def summary_cards(run: RunData) -> str:
    cards = []
    if run.train.has("reward_mean"):
        steps, values = run.train.values("reward_mean")
        tail = values[-10:]
        cards.append(
            card(
                "training reward",
                number(statistics.fmean(tail)),
                f"mean of the last {len(tail)} steps; step {steps[0]}: {number(values[0])}",
            )
        )
    for column, label in (("eval_reward_mean", "eval reward"), ("gold_mean", "gold reward")):
        if run.eval.has(column):
            steps, values = run.eval.values(column)
            cards.append(
                card(
                    label,
                    f"{number(values[-1])} {change(values[0], values[-1])}",
                    f"step {steps[-1]}; step {steps[0]}: {number(values[0])}",
                )
            )
    cards.append(card("parity preflight", *parity_verdict(run)[:2]))
    if run.train.has("step_images_per_s"):
        cards.append(
            card(
                "throughput",
                f"{number(statistics.median(run.train.values('step_images_per_s')[1]), 3)} img/s",
                f"median over steps; rollout only: "
                f"{number(statistics.median(run.train.values('images_per_s')[1]), 3)} img/s"
                if run.train.has("images_per_s")
                else "median over steps",
            )
        )
    if run.train.has("gpu_peak_allocated_gib"):
        steps, peaks = run.train.values("gpu_peak_allocated_gib")
        cards.append(
            card(
                "peak GPU memory",
                f"{number(max(peaks), 3)} GiB",
                f"max over {len(steps)} steps of torch.cuda.max_memory_allocated; last step: "
                f"{number(peaks[-1], 3)} GiB",
            )
        )
    phases = [column for column in run.train.columns if column.startswith("time_") and column.endswith("_s")]
    if phases:
        seconds = sum(sum(run.train.values(column)[1]) for column in phases)
        cards.append(
            card("time in logged phases", f"{seconds / 60:.1f} min", f"{len(run.train.steps)} steps, evals included")
        )
    return f'<div class="cards">{"".join(cards)}</div>'


def parity_verdict(run: RunData) -> tuple[str, str, str]:
    """(value, short note, explanation) of the rollout/replay parity preflight."""
    gap = run.parity_gap
    if gap is None:
        if run.setting("trainer.parity_check") is False:
            return "off", "trainer.parity_check=false", "The preflight was switched off for this run."
        return "—", "not recorded yet", "The preflight runs on step 1; this run has no step-1 row yet."
    if gap == 0:
        return (
            "exact",
            f"max |Δ log p| = {gap:.3g}",
            "Replaying step 1's trajectories with the unchanged weights reproduced the rollout's log-probs "
            "exactly: every importance ratio starts at 1 (docs/algorithms.md §2.10).",
        )
    return (
        f"{gap:.2e}",
        "max |Δ log p| (nats)",
        "Replay with unchanged weights differs from the rollout by up to this many nats. Expected with "
        "reduced precision (bf16/fp16) or a train micro-batch different from the rollout's; otherwise the "
        "replay is not scoring the policy that sampled (docs/algorithms.md §2.10). Per-step gaps are in the "
        "run log.",
    )


# ---------------------------------------------------------------- sections
def curves_section(run: RunData) -> str:
    figures = [
        f'<figure id="plot-{panel.key}"><img alt="{escape(panel.title)}" '
        f'src="{svg_data_uri(render_panel(panel, run))}"></figure>'
        for panel in panels(run)
    ]
    if not figures:
        return '<h2>Curves</h2><p class="muted">No metrics logged yet.</p>'
    return f'<h2>Curves</h2><div class="plots">{"".join(figures)}</div>'


def embedded_image(path: Path) -> tuple[str, int, int]:
    """(data URI, width, height) of a contact sheet; large sheets are downscaled to JPEG."""
    from PIL import Image

    raw = path.read_bytes()
    with Image.open(io.BytesIO(raw)) as image:
        width, height = image.size
        if len(raw) <= EMBED_PNG_MAX_BYTES:
            return "data:image/png;base64," + base64.b64encode(raw).decode("ascii"), width, height
        image = image.convert("RGB")
        if width > EMBED_MAX_WIDTH:
            image = image.resize((EMBED_MAX_WIDTH, round(height * EMBED_MAX_WIDTH / width)), Image.Resampling.LANCZOS)
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=JPEG_QUALITY)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii"), width, height


EVAL_HEADLINES = (("eval_reward_mean", "eval reward"), ("gold_mean", "gold"))
"""The numbers shown with each contact sheet (gold only when the run has gold rewards)."""


def eval_numbers(run: RunData, step: int, baseline: int | None = None) -> str:
    """'eval reward 0.44 · gold 0.47', each followed by its change since `baseline` if given."""
    return " · ".join(
        f"{label} {number(run.eval.at(column, step))}"
        + (f" {change(run.eval.at(column, baseline), run.eval.at(column, step))}" if baseline is not None else "")
        for column, label in EVAL_HEADLINES
        if run.eval.has(column)
    )


def evals_section(run: RunData, output: Path) -> tuple[str, str]:
    """(section HTML, CSS rules holding each sheet once). Newest evaluation first and open;
    each shows the first evaluation (before) beside it (after)."""
    if not run.sheets:
        return '<h2>Evaluations</h2><p class="muted">No evaluation contact sheets yet.</p>', ""
    rules, sizes = [], {}
    for step, path in run.sheets.items():
        uri, width, height = embedded_image(path)
        rules.append(f'.sheet-{step}{{background-image:url("{uri}")}}')
        sizes[step] = (width, height)

    def sheet(step: int, role: str) -> str:
        width, height = sizes[step]
        link = Path(os.path.relpath(run.sheets[step], output.parent)).as_posix()
        return (
            f"<figure><figcaption><b>{role}: step {step}</b> · {eval_numbers(run, step)} · "
            f'<a href="{escape(link)}">full size</a></figcaption>'
            f'<div class="sheet sheet-{step}" role="img" aria-label="contact sheet, step {step}" '
            f'style="aspect-ratio:{width}/{height}"></div></figure>'
        )

    baseline, *later = run.sheets
    blocks = []
    for index, step in enumerate(reversed(later or [baseline])):
        deltas = eval_numbers(run, step, None if step == baseline else baseline)
        pair = sheet(step, "baseline") if step == baseline else sheet(baseline, "before") + sheet(step, "after")
        blocks.append(
            f'<details class="eval" id="eval-{step}"{" open" if index == 0 else ""}>'
            f"<summary>step {step}{' (baseline)' if step == baseline else ''} · {deltas}</summary>"
            f'<div class="pair">{pair}</div></details>'
        )
    title = f"Evaluations: step {baseline} (before) beside each later one (after)"
    return f"<h2>{escape(title)}</h2>{''.join(blocks)}", "\n".join(rules)


def parity_section(run: RunData) -> str:
    value, note, explanation = parity_verdict(run)
    return (
        f'<h2>Parity preflight</h2><table id="parity"><tr><th>result</th><td><b>{escape(value)}</b> '
        f"({escape(note)})</td></tr><tr><th>meaning</th><td>{escape(explanation)}</td></tr>"
        f"<tr><th>settings</th><td>model.dtype={setting_text(run, 'model.dtype')}, "
        f"trainer.parity_check={setting_text(run, 'trainer.parity_check')}</td></tr></table>"
    )


def text(value) -> str:
    """Any value read from the run directory, as escaped text (files there may be hostile)."""
    return escape(str(value))


def setting_text(run: RunData, dotted: str) -> str:
    """A config value as the YAML shows it (true, not True), escaped."""
    return escape(json.dumps(run.setting(dotted)).strip('"'))


def provenance_section(run: RunData) -> str:
    if run.provenance is None:
        return (
            '<h2>Provenance</h2><p class="muted">This run directory has no provenance.json '
            "(written by runs of genalign that record it).</p>"
        )
    rows = []
    for launch in run.provenance["launches"]:
        git = launch.get("git")
        if isinstance(git, dict):
            commit = f"{str(git.get('commit'))[:12]}{' (uncommitted changes)' if git.get('dirty') is True else ''}"
        else:
            commit = "not a git checkout" if git is None else str(git)
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{cell}</td>"
                for cell in (
                    text(launch.get("started_at")),
                    text(launch.get("start_step")),
                    f"<code>{text(launch.get('command'))}</code>",
                    text(commit),
                    text(launch.get("hostname")),
                )
            )
            + "</tr>"
        )
    latest = run.provenance["launches"][-1] if run.provenance["launches"] else {}
    packages = latest.get("packages")
    packages = (
        " · ".join(f"{text(name)} {text(version)}" for name, version in packages.items())
        if isinstance(packages, dict)
        else text(packages or "")
    )
    devices = latest.get("devices")
    devices = ", ".join(map(str, devices)) if isinstance(devices, list) else str(devices or "")
    machine = (
        f"Python {text(latest.get('python'))} · {text(latest.get('platform'))} · CUDA "
        f"{text(latest.get('cuda'))} · devices: {text(devices or 'CPU')} · cwd {text(latest.get('cwd'))}"
    )
    return (
        f'<h2>Provenance</h2><table id="provenance"><tr><th>started (UTC)</th><th>from step</th><th>command</th>'
        f"<th>git commit</th><th>host</th></tr>{''.join(rows)}</table>"
        f'<p>{packages}</p><p class="muted">{machine}</p>'
    )


def config_section(run: RunData) -> str:
    if run.config_text is None:
        return '<h2>Resolved config</h2><p class="muted">No config.yaml in the run directory.</p>'
    return (
        f'<h2>Resolved config</h2><details id="config"><summary>config.yaml '
        f"({len(run.config_text.splitlines())} lines)</summary><pre>{escape(run.config_text)}</pre></details>"
    )


def render_html(run: RunData, output: Path) -> str:
    badge, badge_class = status(run)
    evals, sheet_rules = evals_section(run, output)
    warning = ""
    if run.diverged_steps:
        warning = (
            f'<div class="warning">Reward-hacking monitor: the eval reward rose while the gold reward did '
            f"not, at eval step(s) {', '.join(map(str, run.diverged_steps))} (marked in red on the eval "
            f"reward plot).</div>"
        )
    updated = run.updated_at.strftime("%Y-%m-%d %H:%M:%S UTC") if run.updated_at else "—"
    written = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(run.run_dir.name)} · genalign run report</title>
<style>{STYLE}
{sheet_rules}</style></head>
<body><header><h1>{escape(run.run_dir.name)} <span class="badge {badge_class}" id="status">{escape(badge)}</span></h1>
<p>{recipe_line(run)}</p>
<p>{escape(str(run.run_dir.resolve()))} · metrics last written {updated} · report written {written}</p></header>
<main>{summary_cards(run)}{warning}
{curves_section(run)}
{evals}
{parity_section(run)}
{config_section(run)}
{provenance_section(run)}
</main></body></html>
"""


def write_report(run_dir: str | Path, output: str | Path | None = None) -> Path:
    """Read `run_dir` and write its report (default `run_dir/report.html`) atomically."""
    run = read_run(run_dir)
    output = Path(output) if output is not None else run.run_dir / REPORT_FILE
    return write_text_atomically(output, render_html(run, output))


def write_figures(run_dir: str | Path, directory: str | Path) -> list[Path]:
    """Write each of the report's curve panels as `directory/<panel>.svg` (the same SVG the
    page inlines), for documents that show a run's curves without the page."""
    run = read_run(run_dir)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return [write_text_atomically(directory / f"{panel.key}.svg", render_panel(panel, run)) for panel in panels(run)]


def refresh_report(run_dir: Path) -> Path | None:
    """The trainer's hook: rewrite the report, logging how long it took. A failure is logged
    as a warning with its reason and returns None: the report is a view of the run, and a
    view that cannot be drawn must not end the training it shows."""
    start, start_cpu = time.perf_counter(), time.process_time()
    try:
        path = write_report(run_dir)
    except Exception as exc:  # noqa: BLE001 - any failure of the view; the run goes on
        log.warning(
            "report: could not write %s: %s: %s (training continues; run `genalign report %s` to retry)",
            Path(run_dir) / REPORT_FILE,
            type(exc).__name__,
            exc,
            run_dir,
        )
        return None
    log.info(
        "report: wrote %s in %.2fs (%.2fs CPU)", path, time.perf_counter() - start, time.process_time() - start_cpu
    )
    return path
