"""Prompt manifests: .txt / .jsonl / .json readers with file:line errors.

Where it fits: step 1 of the loop reads `data.manifest` once into `PromptExample`s; the
evaluator reads `data.eval_manifest`. Embeddings are never read from a manifest: the model
family encodes prompts itself, so precomputed-embedding fields are refused.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUPPORTED_SUFFIXES = (".txt", ".jsonl", ".json")
LEGACY_EMBEDDING_FIELDS = ("prompt_embeds", "pooled_prompt_embeds", "negative_prompt_embeds",
                           "negative_pooled_prompt_embeds", "embedding", "embeddings", "text_embeds")
MAX_REPORTED_ERRORS = 20
PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class PromptExample:
    prompt: str
    prompt_id: int
    """Row index in its manifest: the group key for advantages."""
    source: str = ""
    """"path:line" (or "path[index]" for .json) for messages."""
    metadata: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


class ManifestError(ValueError):
    pass


def resolve_data_path(path: str) -> Path:
    """Absolute paths as given; relative: the working directory, then $GENALIGN_DATA_ROOT,
    then the project root (so `datasets/ocr/train.txt` works from anywhere in a checkout)."""
    candidate = Path(path).expanduser()
    if candidate.is_absolute():
        if candidate.exists():
            return candidate
        raise FileNotFoundError(f"manifest {candidate} does not exist")
    roots = [Path.cwd()]
    if os.environ.get("GENALIGN_DATA_ROOT"):
        roots.append(Path(os.environ["GENALIGN_DATA_ROOT"]))
    roots.append(PROJECT_ROOT)
    for root in roots:
        if (root / candidate).exists():
            return root / candidate
    looked = ", ".join(str(root / candidate) for root in roots)
    raise FileNotFoundError(f"manifest {path!r} not found; looked in: {looked}")


def _row(record: Any, where: str, index: int, errors: list[str]) -> PromptExample | None:
    if isinstance(record, str):
        record = {"prompt": record}
    if not isinstance(record, dict):
        errors.append(f"{where}: expected a JSON object with a \"prompt\" field, got {type(record).__name__}")
        return None
    legacy = [key for key in LEGACY_EMBEDDING_FIELDS if key in record]
    if legacy:
        errors.append(f"{where}: carries precomputed embedding fields {legacy}; genalign encodes prompts with the "
                      "model family, remove these fields")
        return None
    prompt = record.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        errors.append(f"{where}: missing or empty \"prompt\" string")
        return None
    metadata = {k: v for k, v in record.items() if k != "prompt"}
    return PromptExample(prompt=prompt.strip(), prompt_id=index, source=where, metadata=metadata)


def load_manifest(path: str) -> list[PromptExample]:
    """Read every prompt of a manifest; all row errors are reported together."""
    resolved = resolve_data_path(path)
    suffix = resolved.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise ManifestError(f"manifest {resolved}: unsupported extension {suffix!r}; use one of {SUPPORTED_SUFFIXES}")
    errors: list[str] = []
    examples: list[PromptExample] = []
    text = resolved.read_text(encoding="utf-8")
    if suffix == ".json":
        try:
            records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ManifestError(f"{resolved}: not valid JSON ({exc})") from exc
        if not isinstance(records, list):
            raise ManifestError(f"{resolved}: expected a JSON list of prompts or objects")
        for index, record in enumerate(records):
            example = _row(record, f"{resolved}[{index}]", len(examples), errors)
            if example:
                examples.append(example)
    else:
        for line_number, line in enumerate(text.splitlines(), start=1):
            where = f"{resolved}:{line_number}"
            if not line.strip():
                errors.append(f"{where}: line {line_number} is empty; remove it")
                continue
            if suffix == ".txt":
                examples.append(PromptExample(prompt=line.strip(), prompt_id=len(examples), source=where))
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                errors.append(f"{where}: not JSON ({exc.msg} at column {exc.colno})")
                continue
            example = _row(record, where, len(examples), errors)
            if example:
                examples.append(example)
    if errors:
        shown = errors[:MAX_REPORTED_ERRORS]
        more = f"\n  ... and {len(errors) - len(shown)} more" if len(errors) > len(shown) else ""
        raise ManifestError(f"manifest {resolved} has {len(errors)} bad row(s):\n  " + "\n  ".join(shown) + more)
    if not examples:
        raise ManifestError(f"manifest {resolved} has no prompts")
    return examples
