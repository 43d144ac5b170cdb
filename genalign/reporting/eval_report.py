"""The page of one evaluation (`<results>/report.html`), in the style of the run report.

Where it fits: `genalign eval` writes it after the results (evaluation/results.py); it reads
only the results folder, so it can be rewritten from a copy. Self-contained like report.html:
inline images, no script, the same Content-Security-Policy.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from genalign.atomic import write_text_atomically
from genalign.evaluation.results import read_results
from genalign.evaluation.summaries import headline
from genalign.reporting.report import CONTENT_SECURITY_POLICY, STYLE, card, embedded_image, number

EVAL_REPORT = "report.html"


def table_html(table: dict[str, Any]) -> str:
    """The benchmark's table: GenEval per tag, OCR accuracy, each scorer's mean ± SE, categories."""
    parts = []
    if "geneval" in table:
        g = table["geneval"]
        head = "".join(f"<th>{escape(tag)}</th>" for tag in g["tags"])
        cells = "".join(f"<td>{t['accuracy']:.4f} ({t['correct']}/{t['images']})</td>" for t in g["tags"].values())
        parts.append(
            f'<h2>GenEval</h2><table id="geneval"><tr><th>overall</th>{head}</tr>'
            f"<tr><td><b>{g['overall']:.4f}</b></td>{cells}</tr></table>"
            f'<p class="muted">overall = mean of the tag accuracies (GenEval summary_scores.py); correct '
            f"images {g['correct_images']:.2%}, prompts with a correct image {g['correct_prompts']:.2%}</p>"
        )
    if "ocr" in table:
        o = table["ocr"]
        parts.append(
            f'<h2>OCR</h2><table id="ocr"><tr><th>accuracy</th><th>normalised edit distance</th>'
            f"<th>exact match</th><th>images</th></tr><tr><td><b>{o['accuracy']:.4f}</b> ± "
            f"{o['accuracy_se']:.4f}</td><td>{o['normalised_edit_distance']:.4f}</td>"
            f"<td>{o['exact_match']:.2%}</td><td>{o['images']}</td></tr></table>"
        )
    rows = "".join(
        f"<tr><td>{escape(group)}</td><td><b>{row['mean']:.4f}</b></td><td>{row['se']:.4f}</td></tr>"
        for group, row in table["scorers"].items()
    )
    parts.append(
        f'<h2>Scorers</h2><table id="scorers"><tr><th>scorer</th><th>mean</th><th>standard error '
        f"(over prompts)</th></tr>{rows}</table>"
    )
    categories = sorted({name for row in table["scorers"].values() for name in row["categories"]})
    if categories:
        groups = list(table["scorers"])
        head = "".join(f"<th>{escape(g)}</th>" for g in groups)
        body = "".join(
            f"<tr><td>{escape(name)}</td>"
            + "".join(f"<td>{number(table['scorers'][g]['categories'].get(name))}</td>" for g in groups)
            + "</tr>"
            for name in categories
        )
        parts.append(f'<h2>By category</h2><table id="categories"><tr><th>category</th>{head}</tr>{body}</table>')
    return "".join(parts)


def settings_html(settings: dict[str, Any]) -> str:
    shown = {key: value for key, value in settings.items() if key not in ("config", "sources")}
    rows = "".join(
        f"<tr><th>{escape(key)}</th><td><code>{escape(json.dumps(value, default=str))}</code></td></tr>"
        for key, value in shown.items()
    )
    sources = "".join(
        f"<tr><th>{escape(key)}</th><td>{escape(str(text))}</td></tr>"
        for key, text in settings.get("sources", {}).items()
    )
    config = json.dumps(settings.get("config", {}), indent=2, default=str)
    return (
        f'<h2>Settings</h2><table id="settings">{rows}</table><h2>Where each setting comes from</h2>'
        f'<table id="sources">{sources}</table><h2>Resolved config</h2><details><summary>config</summary>'
        f"<pre>{escape(config)}</pre></details>"
    )


def render_eval_html(folder: Path) -> str:
    summary, _ = read_results(folder)
    table, settings = summary["table"], summary["settings"]
    cards = "".join(card(name, number(value)) for name, value in headline(table).items())
    sheet = ""
    if (folder / "contact_sheet.png").is_file():
        uri, width, height = embedded_image(folder / "contact_sheet.png")
        sheet = (
            f'<h2>Samples</h2><p class="muted">the first images with their scores; every image is under '
            f'images/ (GenEval\'s layout)</p><img alt="contact sheet" src="{uri}" '
            f'style="width:100%;max-width:{width}px;aspect-ratio:{width}/{height}">'
        )
    title = f"{settings.get('benchmark')} · {settings.get('model')}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)} · genalign evaluation</title><style>{STYLE}</style></head>
<body><header><h1>{escape(str(settings.get("benchmark")))} <span class="badge finished">evaluation</span></h1>
<p>{escape(str(settings.get("model")))} · {escape(str(settings.get("weights")))} · \
{escape(str(settings.get("description")))}</p>
<p>{escape(str(folder.resolve()))}</p></header>
<main><div class="cards">{cards}</div>
{table_html(table)}
{sheet}
{settings_html(settings)}
</main></body></html>
"""


def write_eval_report(folder: str | Path) -> Path:
    folder = Path(folder)
    return write_text_atomically(folder / EVAL_REPORT, render_eval_html(folder))
