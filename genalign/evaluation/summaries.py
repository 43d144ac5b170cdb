"""A benchmark's table from its per-sample scores, in the benchmark's own format.

Where it fits: `genalign eval` gathers every sample's scores (evaluation/sharded.py), then the
benchmark's `summary` rule turns them into the numbers a paper reports:
- "geneval" (djghosh13/geneval `evaluation/summary_scores.py`): an image is correct when its
  0/1 GenEval score is 1; accuracy per tag (tags in order of first appearance, as its
  `groupby(sort=False)`), overall = the mean of the tag accuracies, plus the share of correct
  images and of prompts with at least one correct image;
- "ocr": accuracy = the mean OCR score (1 - normalised edit distance, Flow-GRPO's OCR number),
  normalised edit distance = 1 - score, exact-match rate (score 1);
- "mean": each scorer group's mean with its standard error, and the mean per category when the
  prompts carry one (DrawBench's `category`, GenEval's `tag`).

Standard errors are over prompts (the sd of the per-prompt means / sqrt(prompts)): the images of
one prompt are not independent draws of the benchmark, its prompts are.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

CATEGORY_KEYS = ("category", "tag")
"""Metadata fields that name a prompt's category, looked up in this order."""


@dataclass(frozen=True)
class SampleRecord:
    index: int
    """Position in the benchmark's sample list (prompt-major: prompt p's k-th image is p·n + k)."""
    prompt_index: int
    image_index: int
    prompt: str
    seed: int
    metadata: dict[str, Any]
    scores: dict[str, float]
    """Group total under the group's name, each component as "<group>/<component>"."""


def mean_se(values: list[float], clusters: list[int]) -> tuple[float, float]:
    """(mean over all values, standard error over clusters: sd(ddof 1) of the cluster means /
    sqrt(#clusters); 0 for fewer than 2 clusters). The mean is torch's float64 mean, the reduction
    the trainer's eval_metrics.csv uses (rewards/scores.py `summary`), so the two print the same bits."""
    import torch

    mean = torch.tensor(values, dtype=torch.float64).mean().item()
    by_cluster: dict[int, list[float]] = defaultdict(list)
    for value, cluster in zip(values, clusters):
        by_cluster[cluster].append(value)
    means = [sum(v) / len(v) for v in by_cluster.values()]
    if len(means) < 2:
        return mean, 0.0
    centre = sum(means) / len(means)
    variance = sum((m - centre) ** 2 for m in means) / (len(means) - 1)
    return mean, math.sqrt(variance / len(means))


def category(record: SampleRecord) -> str | None:
    for key in CATEGORY_KEYS:
        value = record.metadata.get(key)
        if isinstance(value, str):
            return value
    return None


def geneval_summary(records: list[SampleRecord], group: str) -> dict[str, Any]:
    correct = [record.scores[group] >= 0.5 for record in records]
    tags: dict[str, list[bool]] = {}
    prompts: dict[int, bool] = {}
    for record, ok in zip(records, correct):
        tags.setdefault(str(record.metadata.get("tag")), []).append(ok)
        prompts[record.prompt_index] = prompts.get(record.prompt_index, False) or ok
    per_tag = {tag: {"accuracy": sum(v) / len(v), "correct": sum(v), "images": len(v)} for tag, v in tags.items()}
    return {
        "overall": sum(t["accuracy"] for t in per_tag.values()) / len(per_tag),
        "tags": per_tag,
        "images": len(records),
        "prompts": len(prompts),
        "correct_images": sum(correct) / len(correct),
        "correct_prompts": sum(prompts.values()) / len(prompts),
    }


def ocr_summary(records: list[SampleRecord], group: str) -> dict[str, Any]:
    scores = [record.scores[group] for record in records]
    accuracy, se = mean_se(scores, [record.prompt_index for record in records])
    return {
        "accuracy": accuracy,
        "accuracy_se": se,
        "normalised_edit_distance": 1.0 - accuracy,
        "exact_match": sum(score >= 1.0 for score in scores) / len(scores),
        "images": len(records),
        "prompts": len({record.prompt_index for record in records}),
    }


def mean_summary(records: list[SampleRecord], groups: list[str]) -> dict[str, Any]:
    clusters = [record.prompt_index for record in records]
    table = {}
    for group in groups:
        values = [record.scores[group] for record in records]
        mean, se = mean_se(values, clusters)
        by_category: dict[str, list[float]] = defaultdict(list)
        for record, value in zip(records, values):
            name = category(record)
            if name is not None:
                by_category[name].append(value)
        table[group] = {
            "mean": mean,
            "se": se,
            "categories": {name: sum(v) / len(v) for name, v in by_category.items()},
        }
    return {"scorers": table, "images": len(records), "prompts": len(set(clusters))}


def summarise(records: list[SampleRecord], summary: str, groups: list[str], score_group: str = "") -> dict[str, Any]:
    """The benchmark's table as a JSON-ready dict; "mean" is added beside geneval/ocr for every group."""
    if not records:
        raise ValueError("no evaluated samples to summarise")
    out: dict[str, Any] = {"kind": summary, **mean_summary(records, groups)}
    if summary == "geneval":
        out["geneval"] = geneval_summary(records, score_group)
    elif summary == "ocr":
        out["ocr"] = ocr_summary(records, score_group)
    return out


def headline(table: dict[str, Any]) -> dict[str, float]:
    """The few numbers a comparison shows first: GenEval overall and per tag, OCR accuracy,
    each scorer's mean."""
    numbers = {}
    if "geneval" in table:
        numbers["geneval_overall"] = table["geneval"]["overall"]
        numbers.update({f"geneval_{tag}": t["accuracy"] for tag, t in table["geneval"]["tags"].items()})
    if "ocr" in table:
        numbers["ocr_accuracy"] = table["ocr"]["accuracy"]
        numbers["ocr_normalised_edit_distance"] = table["ocr"]["normalised_edit_distance"]
    numbers.update({f"{group}_mean": row["mean"] for group, row in table["scorers"].items()})
    return numbers


def markdown_table(table: dict[str, Any]) -> str:
    """The table as the benchmark's authors print it, in Markdown."""
    lines = []
    if "geneval" in table:
        g = table["geneval"]
        tags = list(g["tags"])
        lines += [
            "| overall | " + " | ".join(tags) + " |",
            "|---|" + "---|" * len(tags),
            f"| **{g['overall']:.4f}** | "
            + " | ".join(
                f"{g['tags'][t]['accuracy']:.4f} ({g['tags'][t]['correct']}/{g['tags'][t]['images']})" for t in tags
            )
            + " |",
            "",
            f"{g['images']} images of {g['prompts']} prompts; correct images {g['correct_images']:.2%}, "
            f"prompts with a correct image {g['correct_prompts']:.2%}; overall = mean of the tag accuracies",
            "",
        ]
    if "ocr" in table:
        o = table["ocr"]
        lines += [
            "| OCR accuracy | normalised edit distance | exact match | images |",
            "|---|---|---|---|",
            f"| **{o['accuracy']:.4f}** ± {o['accuracy_se']:.4f} | {o['normalised_edit_distance']:.4f} | "
            f"{o['exact_match']:.2%} | {o['images']} |",
            "",
        ]
    lines += ["| scorer | mean | standard error (over prompts) |", "|---|---|---|"]
    lines += [f"| {group} | {row['mean']:.4f} | {row['se']:.4f} |" for group, row in table["scorers"].items()]
    categories = sorted({name for row in table["scorers"].values() for name in row["categories"]})
    if categories and "geneval" not in table:
        groups = list(table["scorers"])
        lines += ["", "| category | " + " | ".join(groups) + " |", "|---|" + "---|" * len(groups)]
        lines += [
            f"| {name} | "
            + " | ".join(f"{table['scorers'][g]['categories'].get(name, float('nan')):.4f}" for g in groups)
            + " |"
            for name in categories
        ]
    return "\n".join(lines) + "\n"
