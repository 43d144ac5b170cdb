"""`genalign compare A B ...`: runs and evaluations side by side on one page.

Where it fits: reads run directories (reporting/run_data.py) and `genalign eval` results
folders (evaluation/results.py), nothing else, and writes one self-contained page:
- one table: per input its headline numbers (a results folder: its benchmark's table, e.g.
  GenEval overall and per tag; a run: its last evaluation's eval and gold reward, and the
  training reward of its last steps), the columns the union of every input's;
- overlaid curves: every run's eval reward and gold reward, and training reward, against the step;
- the same prompts' images in columns: for results folders the images of the samples they
  share (same prompt, same image index), one row per sample, one column per input; for runs
  their latest evaluation contact sheets side by side (the same fixed prompts and seeds).
"""

from __future__ import annotations

import base64
import io
import statistics
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from genalign.atomic import write_text_atomically
from genalign.config.errors import UserError
from genalign.evaluation.results import read_results
from genalign.evaluation.summaries import headline
from genalign.reporting.report import CONTENT_SECURITY_POLICY, STYLE, embedded_image, number
from genalign.reporting.run_data import RunData, read_run

MAX_IMAGE_ROWS = 24
"""Samples shown in the image columns (the first ones the inputs share)."""
CURVES = (
    ("eval_reward_mean", "eval", "eval reward"),
    ("gold_mean", "eval", "gold reward"),
    ("reward_mean", "train", "training reward"),
)


class CompareError(UserError, ValueError):
    pass


@dataclass
class Entry:
    label: str
    path: Path
    numbers: dict[str, float] = field(default_factory=dict)
    run: RunData | None = None
    samples: list[dict[str, Any]] = field(default_factory=list)


def read_entry(path: str) -> Entry:
    folder = Path(path).expanduser()
    label = folder.name if folder.name not in ("", ".") else str(folder)
    if (folder / "summary.json").is_file():
        summary, samples = read_results(folder)
        label = f"{summary['settings'].get('benchmark')}: {folder.parent.name}/{folder.name}"
        return Entry(label, folder, headline(summary["table"]), samples=samples)
    if not folder.is_dir():
        raise CompareError(f"{path}: no such directory; give run directories or `genalign eval` results folders")
    try:
        run = read_run(folder)
    except UserError as exc:
        raise CompareError(f"{path}: neither a results folder (summary.json) nor a run ({exc})") from None
    numbers = {}
    for column, source, _ in CURVES[:2]:
        if run.eval.has(column):
            numbers[f"{column} (last eval)"] = run.eval.last(column)
    if run.eval.steps:
        numbers["last eval step"] = float(run.eval.steps[-1])
    if run.train.has("reward_mean"):
        numbers["reward_mean (last 10 steps)"] = statistics.fmean(run.train.values("reward_mean")[1][-10:])
    return Entry(label, folder, numbers, run=run)


def table_html(entries: list[Entry]) -> str:
    columns = list(dict.fromkeys(key for entry in entries for key in entry.numbers))
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    rows = "".join(
        f"<tr><td><b>{escape(e.label)}</b><br><span class='muted'>{escape(str(e.path))}</span></td>"
        + "".join(f"<td>{number(e.numbers.get(c))}</td>" for c in columns)
        + "</tr>"
        for e in entries
    )
    return f'<h2>Numbers</h2><table id="numbers"><tr><th>input</th>{head}</tr>{rows}</table>'


def curves_svg(entries: list[Entry], column: str, source: str, title: str) -> str | None:
    import matplotlib
    from matplotlib.figure import Figure

    runs = [e for e in entries if e.run is not None and getattr(e.run, source).has(column)]
    if not runs:
        return None
    with matplotlib.rc_context({"svg.hashsalt": "genalign", "font.size": 9, "legend.fontsize": 8}):
        figure = Figure(figsize=(5.2, 3.2), dpi=100)
        figure.subplots_adjust(left=0.14, right=0.98, top=0.9, bottom=0.15)
        axes = figure.subplots()
        for index, entry in enumerate(runs):
            steps, values = getattr(entry.run, source).values(column)
            axes.plot(
                steps,
                values,
                "-",
                marker="o" if source == "eval" else None,
                markersize=3,
                color=f"C{index % 10}",
                label=entry.label,
            )
        axes.set_title(title, loc="left")
        axes.set_xlabel("step")
        axes.grid(alpha=0.3)
        axes.legend(frameon=False)
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


def curves_html(entries: list[Entry]) -> str:
    figures = []
    for column, source, title in CURVES:
        svg = curves_svg(entries, column, source, title)
        if svg is not None:
            uri = "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode("ascii")
            figures.append(f'<figure id="curve-{column}"><img alt="{escape(title)}" src="{uri}"></figure>')
    return f'<h2>Curves</h2><div class="plots">{"".join(figures)}</div>' if figures else ""


def image_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def images_html(entries: list[Entry]) -> str:
    results = [e for e in entries if e.samples]
    parts = []
    if results:
        first = {(s["prompt"], s["image_index"]): s for s in results[0].samples}
        # the columns: the first results folder and every one that evaluated some of its samples
        columns = [(e, {(s["prompt"], s["image_index"]): s for s in e.samples}) for e in results]
        columns = [(e, keyed) for e, keyed in columns if first.keys() & keyed.keys()]
        shared = [key for key in first if all(key in keyed for _, keyed in columns)][:MAX_IMAGE_ROWS]
        head = "".join(f"<th>{escape(e.label)}</th>" for e, _ in columns)
        rows = []
        for key in shared:
            cells = []
            for entry, keyed in columns:
                sample = keyed[key]
                path = entry.path / sample["image"]
                scores = " ".join(f"{k}={v:.3g}" for k, v in sample["scores"].items() if "/" not in k)
                image = (
                    f'<img src="{image_uri(path)}" style="width:160px;image-rendering:pixelated">'
                    if path.is_file()
                    else "(image missing)"
                )
                cells.append(f"<td>{image}<br><span class='muted'>{escape(scores)}</span></td>")
            rows.append(f"<tr><td>{escape(key[0])} #{key[1]}</td>{''.join(cells)}</tr>")
        others = [e.label for e in results if all(e is not c for c, _ in columns)]
        note = (
            f'<p class="muted">No prompt in common with the first results folder: {escape(", ".join(others))}</p>'
            if others
            else ""
        )
        parts.append(
            f'<h2>The same prompts, side by side</h2><table id="images"><tr><th>prompt</th>{head}</tr>'
            f"{''.join(rows)}</table>{note}"
        )
    runs = [e for e in entries if e.run is not None and e.run.sheets]
    if runs:
        cells = []
        for entry in runs:
            step, path = list(entry.run.sheets.items())[-1]
            uri, width, height = embedded_image(path)
            cells.append(
                f'<td><b>{escape(entry.label)}</b> · step {step}<br><img alt="sheet" src="{uri}" '
                f'style="width:100%;max-width:{width}px"></td>'
            )
        parts.append(
            f"<h2>Latest evaluation of each run (same fixed prompts and seeds)</h2>"
            f'<table id="sheets"><tr>{"".join(cells)}</tr></table>'
        )
    return "".join(parts)


def render_compare(entries: list[Entry]) -> str:
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>genalign compare</title><style>{STYLE}</style></head>
<body><header><h1>compare <span class="badge">{len(entries)} inputs</span></h1>
<p>{" · ".join(escape(e.label) for e in entries)}</p></header>
<main>{table_html(entries)}
{curves_html(entries)}
{images_html(entries)}
</main></body></html>
"""


def write_compare(paths: list[str], output: str | Path) -> Path:
    if len(paths) < 2:
        raise CompareError("genalign compare needs two or more runs or results folders")
    entries = [read_entry(path) for path in paths]
    return write_text_atomically(Path(output), render_compare(entries))
