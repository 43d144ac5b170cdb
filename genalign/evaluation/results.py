"""A results folder: what `genalign eval` writes and `genalign compare` reads.

Where it fits: after `evaluate_samples` rank 0 holds every sample's images and scores; it
writes, atomically per file:

    samples.jsonl        one row per image: index, prompt_index, image_index, prompt, seed,
                         metadata, scores ({group: total, "group/component": value}), image
    scores.csv           the same scores as a table (one row per image)
    summary.json         the benchmark's table (evaluation/summaries.py) and the settings
    summary.md           the table as the benchmark's authors print it
    settings.json        every setting the numbers depend on (also inside summary.json)
    images/<prompt:05d>/samples/<image:04d>.png, images/<prompt:05d>/metadata.jsonl
                         GenEval's own image layout, so its evaluate_images.py can score them too
    contact_sheet.png    the first CONTACT_SHEET_SAMPLES images with their prompt and scores
    report.html          the page (reporting/eval_report.py)
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from genalign.atomic import write_text_atomically
from genalign.config.errors import UserError
from genalign.evaluation.contact_sheet import make_contact_sheet, make_frame_strip_sheet, save_image
from genalign.evaluation.sharded import EvalOutcome
from genalign.evaluation.summaries import SampleRecord, markdown_table

CONTACT_SHEET_SAMPLES = 64
SUMMARY_FILE = "summary.json"
SAMPLES_FILE = "samples.jsonl"


class ResultsError(UserError, ValueError):
    pass


def records_of(outcome: EvalOutcome) -> list[SampleRecord]:
    """One record per gathered sample: every runtime's total under its name and each component
    as "<runtime>/<component>"."""
    samples, scores = outcome.samples, outcome.scores or {}
    group_ids = samples.group_ids.tolist()
    records = []
    for index, prompt in enumerate(samples.prompts):
        values: dict[str, float] = {}
        for name, runtime_scores in scores.items():
            values[name] = float(runtime_scores.total[index])
            values.update(
                {f"{name}/{component}": float(v[index]) for component, v in runtime_scores.components.items()}
            )
        image_index = index - group_ids.index(group_ids[index])
        records.append(
            SampleRecord(
                index,
                group_ids[index],
                image_index,
                prompt,
                int(samples.seeds[index]),
                dict(samples.metadata[index]),
                values,
            )
        )
    return records


def image_path(record: SampleRecord) -> str:
    return f"images/{record.prompt_index:05d}/samples/{record.image_index:04d}.png"


def media_image(media: torch.Tensor) -> Image.Image:
    """One sample's uint8 media as an image: [3, H, W] as is, video [F, 3, H, W] as a frame strip."""
    if media.dim() == 4:
        return make_frame_strip_sheet(media[None], [""], caption_lines=0)
    return Image.fromarray(media.permute(1, 2, 0).cpu().numpy())


def write_png(path: Path, image: Image.Image) -> None:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(buffer.getvalue())
    tmp.replace(path)


def write_results(
    out: Path, records: list[SampleRecord], images: torch.Tensor, table: dict[str, Any], settings: dict[str, Any]
) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for record, media in zip(records, images):
        write_png(out / image_path(record), media_image(media))
        rows.append(
            {
                "index": record.index,
                "prompt_index": record.prompt_index,
                "image_index": record.image_index,
                "prompt": record.prompt,
                "seed": record.seed,
                "metadata": record.metadata,
                "scores": record.scores,
                "image": image_path(record),
            }
        )
    for record in records:
        if record.image_index == 0:  # GenEval's per-prompt metadata.jsonl: the manifest row
            write_text_atomically(
                out / f"images/{record.prompt_index:05d}/metadata.jsonl",
                json.dumps({**record.metadata, "prompt": record.prompt}),
            )
    write_text_atomically(out / SAMPLES_FILE, "".join(json.dumps(row) + "\n" for row in rows))
    write_text_atomically(out / "scores.csv", scores_csv(records))
    write_text_atomically(out / "settings.json", json.dumps(settings, indent=2, default=str))
    write_text_atomically(out / SUMMARY_FILE, json.dumps({"table": table, "settings": settings}, indent=2, default=str))

    write_text_atomically(
        out / "summary.md", f"# {settings['benchmark']}: {settings['model']}\n\n" + markdown_table(table)
    )
    shown = records[:CONTACT_SHEET_SAMPLES]
    groups = list(settings["groups"])
    captions = [f"{r.prompt} | " + " ".join(f"{g}={r.scores[g]:.2f}" for g in groups) for r in shown]
    media = images[: len(shown)]
    sheet = make_frame_strip_sheet(media, captions) if media.dim() == 5 else make_contact_sheet(media, captions)
    save_image(out / "contact_sheet.png", sheet)
    return out


def scores_csv(records: list[SampleRecord]) -> str:
    columns = sorted({key for record in records for key in record.scores})
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["index", "prompt_index", "image_index", "seed", "prompt", *columns])
    for r in records:
        writer.writerow(
            [r.index, r.prompt_index, r.image_index, r.seed, r.prompt, *(r.scores.get(c, "") for c in columns)]
        )
    return buffer.getvalue()


def read_results(folder: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(summary.json's content, samples.jsonl's rows) of a results folder; errors name the file."""
    folder = Path(folder).expanduser()
    path = folder / SUMMARY_FILE
    if not path.is_file():
        raise ResultsError(f"{folder}: no {SUMMARY_FILE} (not a `genalign eval` results folder)")
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
        samples = (
            [
                json.loads(line)
                for line in (folder / SAMPLES_FILE).read_text(encoding="utf-8").splitlines()
                if line.strip()
            ]
            if (folder / SAMPLES_FILE).is_file()
            else []
        )
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{folder}: a results file is not valid JSON ({exc})") from None
    if not isinstance(summary, dict) or "table" not in summary:
        raise ResultsError(f"{path}: no benchmark table in it")
    return summary, samples
