"""Prompt manifests: .txt / .jsonl / .json readers whose errors name the file and the row.

Where it fits: step 1 of the loop reads `data.manifest` once into `PromptExample`s for the
`PromptSampler`; the evaluator reads `data.eval_manifest` the same way. A manifest holds
prompts only: embeddings are computed by the model family from the prompt text (so the
same manifest serves SD3, FLUX, ... and a LoRA'd text encoder stays in sync), which is why
rows carrying precomputed-embedding fields are refused instead of silently ignored.

Formats:
  .txt    one prompt a line (surrounding whitespace stripped; a blank line is an error).
  .jsonl  one JSON object a line with a "prompt" string; every other field -> `metadata`.
  .json   a JSON list of such objects, or of plain prompt strings.
  hf://datasets/<owner>/<name>[@revision][:split]  a Hub dataset's rows, read through the
          `datasets` library (`hub_prompts.py`): a "prompt" column; the others -> `metadata`.
A .jsonl / .json row may name source images ("source_image" / "source_images", paths relative
to the manifest's folder) for an image-conditioned family: `source_images.py`.
Every bad row of a file is reported in one `ManifestError` (a `ValueError`), so a broken
manifest is fixed in one pass rather than one error per run.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genalign.config.errors import UserError
from genalign.data.hub_prompts import HubDatasetError, is_hub_manifest, parse_reference, read_rows
from genalign.data.source_images import SOURCE_FIELDS, SOURCE_KEY, row_sources

SUPPORTED_SUFFIXES = (".txt", ".jsonl", ".json")
LEGACY_EMBEDDING_FIELDS = (
    "prompt_embeds",
    "pooled_prompt_embeds",
    "negative_prompt_embeds",
    "negative_pooled_prompt_embeds",
    "embedding",
    "embeddings",
    "text_embeds",
)
MAX_REPORTED_ERRORS = 20
MAX_LINE_CHARS = 16_384
"""Longest manifest line (or .json prompt) accepted: the longest text-encoder window of any
family is 512 tokens, a few thousand characters, so a line four times that is a wrong file (a
binary, a minified dump, prompts joined without newlines), refused before it is parsed or
echoed back in a message."""
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
"""The `genalign` package directory, installed or checked out: the shipped prompt sets are its
package data under `datasets/` (so a recipe's `datasets/ocr/train.txt` is
`<package>/datasets/ocr/train.txt`), the last place a relative path is tried. Never the
package's parent: installed, that is `site-packages`, whose `datasets/` is Hugging Face's
`datasets` library."""
PACKAGED_DATASETS = PACKAGE_ROOT / "datasets"
"""The shipped prompt sets, their READMEs and (in a checkout) the scripts that build them."""


@dataclass(frozen=True)
class PromptExample:
    prompt: str
    prompt_id: int
    """Row index in its manifest (0-based, in file order): the group key for advantages."""
    source: str = ""
    """Where the row came from, for messages: "path:line" (.txt/.jsonl) or "path[index]" (.json)."""
    metadata: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    """Extra .jsonl/.json fields (e.g. an OCR target), passed to rewards; not part of equality."""


class ManifestError(UserError, ValueError):
    """A manifest that cannot be used; the message lists every bad row and how to fix it."""


class ManifestNotFoundError(ManifestError, FileNotFoundError):
    """No file at the manifest path (or a directory there); the message lists where it looked."""


def resolve_data_path(path: str, config_key: str | None = None) -> Path:
    """The file a manifest path names.

    Absolute paths are used as given. A relative path is tried against the working
    directory (a user's own manifest), then `$GENALIGN_DATA_ROOT` (a shared data folder),
    then the genalign package, so the recipes' `datasets/ocr/train.txt` (package data) works
    from any directory, installed or checked out. Raises
    `ManifestNotFoundError` (a `FileNotFoundError`) naming `config_key` and listing every
    place it looked, in one line.
    """
    candidate = Path(path).expanduser()
    if candidate.is_absolute():
        roots: list[Path] = []
        tried = [candidate]
    else:
        roots = [Path.cwd()]
        if os.environ.get("GENALIGN_DATA_ROOT"):
            roots.append(Path(os.environ["GENALIGN_DATA_ROOT"]).expanduser())
        roots.append(PACKAGE_ROOT)
        tried = list(dict.fromkeys(root / candidate for root in roots))  # cwd may be the package
    for option in tried:
        if option.is_file():
            return option
    prefix = f"{config_key}: " if config_key else ""
    directories = [option for option in tried if option.is_dir()]
    if directories:
        raise ManifestNotFoundError(
            f"{prefix}{directories[0]} is a directory, not a prompt file; name a .txt, .jsonl or .json file inside it"
        )
    special = [option for option in tried if option.exists()]  # a device, a FIFO, a socket: reading may never end
    if special:
        raise ManifestNotFoundError(
            f"{prefix}{special[0]} is not a regular file (a device, a FIFO or a socket); "
            f"name a .txt, .jsonl or .json file"
        )
    looked = ", ".join(str(option) for option in tried)
    hint = None if candidate.is_absolute() else "set $GENALIGN_DATA_ROOT to the folder that holds it"
    raise ManifestNotFoundError(f"{prefix}manifest {path!r} not found (looked in: {looked})", hint)


def _record_error(record: Any) -> str | None:
    """Why a parsed .jsonl/.json row cannot be used, or None when it is a valid prompt row."""
    if isinstance(record, str):
        return None if record.strip() else "is an empty prompt string; remove it"
    if not isinstance(record, dict):
        return f'is a JSON {type(record).__name__}, not an object with a "prompt" string'
    legacy = [key for key in LEGACY_EMBEDDING_FIELDS if key in record]
    if legacy:
        return (
            f"carries precomputed-embedding field(s) {legacy}; embeddings are computed by the model "
            'family from the prompt, so remove these fields and keep "prompt"'
        )
    if "prompt" not in record:
        return f'has no "prompt" field (fields: {sorted(record)}); add the prompt text as "prompt"'
    prompt = record["prompt"]
    if not isinstance(prompt, str):
        return f'has a "prompt" of type {type(prompt).__name__}; it must be a string'
    if not prompt.strip():
        return 'has an empty "prompt"; remove the row or fill it in'
    if len(prompt) > MAX_LINE_CHARS:
        return f'has a "prompt" of {len(prompt):,} characters (max {MAX_LINE_CHARS:,}); is this a prompt file?'
    if "\x00" in prompt:
        return 'has a "prompt" holding a NUL byte; is this a prompt file?'
    return None


def _example(record: str | dict[str, Any], prompt_id: int, source: str, sources: list[str]) -> PromptExample:
    """The row as an example; its source images (if any) as resolved paths under `SOURCE_KEY`."""
    if isinstance(record, str):
        return PromptExample(prompt=record.strip(), prompt_id=prompt_id, source=source)
    metadata = {key: value for key, value in record.items() if key != "prompt" and key not in SOURCE_FIELDS}
    if sources:
        metadata[SOURCE_KEY] = sources
    return PromptExample(prompt=record["prompt"].strip(), prompt_id=prompt_id, source=source, metadata=metadata)


class _Sources:
    """The source images of a manifest's rows (data/source_images.py): where relative paths
    start (`base`, the manifest's folder; None for a Hub dataset), the size they must have
    (None: unchecked here) and the count the first row set, which every row must keep."""

    def __init__(self, base: Path | None, size: tuple[int, int] | None):
        self.base, self.size, self.count = base, size, None

    def of(self, record: str | dict[str, Any], where: str, errors: list[str]) -> list[str] | None:
        """The row's resolved source paths, or None (its problems appended to `errors`)."""
        if isinstance(record, str):
            paths, problems = [], []
        else:
            paths, problems = row_sources(record, self.base, self.size)
        if not problems and self.count is not None and len(paths) != self.count:
            problems = [
                f"has {len(paths)} source image(s), the manifest's first row {self.count}; "
                "every row needs the same number"
            ]
        if problems:
            errors.extend(f"{where} {problem}" for problem in problems)
            return None
        if self.count is None:
            self.count = len(paths)
        return paths


def _lines(text: str) -> list[str]:
    """Lines split on "\\n" only (a prompt may contain other Unicode separators); a final
    newline does not make an extra empty line; "\\r\\n" files read like "\\n" files."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _read_lines(text: str, shown: str, is_jsonl: bool, errors: list[str], sources: _Sources) -> list[PromptExample]:
    examples: list[PromptExample] = []
    for line_number, line in enumerate(_lines(text), start=1):
        where = f"line {line_number} of {shown}"
        if len(line) > MAX_LINE_CHARS:
            errors.append(f"{where} is {len(line):,} characters long (max {MAX_LINE_CHARS:,}); is this a prompt file?")
            continue
        if not line.strip():
            errors.append(f"{where} is empty; remove it")
            continue
        if "\x00" in line:  # a binary file, or UTF-16 read as UTF-8: never a prompt
            errors.append(f"{where} holds a NUL byte at column {line.index(chr(0)) + 1}; is this a UTF-8 prompt file?")
            continue
        record: Any = line
        if is_jsonl:
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                errors.append(f"{where} is not JSON ({exc.msg} at column {exc.colno})")
                continue
            if isinstance(record, str):  # a bare JSON string is not a .jsonl row
                errors.append(f'{where} is a JSON string, not an object with a "prompt" string')
                continue
            problem = _record_error(record)
            if problem:
                errors.append(f"{where} {problem}")
                continue
        paths = sources.of(record, where, errors)
        if paths is not None:
            examples.append(_example(record, len(examples), f"{shown}:{line_number}", paths))
    return examples


def _read_json(text: str, shown: str, errors: list[str], sources: _Sources) -> list[PromptExample]:
    try:
        records = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{shown} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from exc
    if not isinstance(records, list):
        raise ManifestError(
            f'{shown} must hold a JSON list of prompt strings or {{"prompt": ...}} objects, '
            f"not a {type(records).__name__}"
        )
    return _records(records, shown, "item", errors, sources)


def _records(records: list[Any], shown: str, unit: str, errors: list[str], sources: _Sources) -> list[PromptExample]:
    """Parsed rows (a .json list, a Hub dataset) as examples; each bad one appended to `errors`
    as "<unit> [i] of <shown> <problem>"."""
    examples: list[PromptExample] = []
    for index, record in enumerate(records):
        problem = _record_error(record)
        if problem:
            errors.append(f"{unit} [{index}] of {shown} {problem}")
            continue
        paths = sources.of(record, f"{unit} [{index}] of {shown}", errors)
        if paths is not None:
            examples.append(_example(record, len(examples), f"{shown}[{index}]", paths))
    return examples


def _summary(errors: list[str], shown: str) -> str:
    listed = errors[:MAX_REPORTED_ERRORS]
    more = [f"... and {len(errors) - len(listed)} more"] if len(errors) > len(listed) else []
    return f"{shown} has {len(errors)} bad row(s); nothing was loaded:\n  " + "\n  ".join(listed + more)


def _hub_examples(path: str, prefix: str, source_size: tuple[int, int] | None) -> list[PromptExample]:
    """A Hub dataset's rows as examples, every bad row listed as for a file (`hub_prompts.py`)."""
    try:
        rows = read_rows(path, prefix)
    except HubDatasetError as exc:
        raise ManifestError(str(exc), exc.hint) from exc
    shown = str(parse_reference(path))
    errors: list[str] = []
    examples = _records(rows, shown, "row", errors, _Sources(None, source_size))
    if errors:
        raise ManifestError(prefix + (errors[0] if len(errors) == 1 else _summary(errors, shown)))
    if not examples:
        raise ManifestError(f"{prefix}{shown} holds no prompts; add at least one")
    return examples


def load_manifest(
    path: str, config_key: str | None = None, source_size: tuple[int, int] | None = None
) -> list[PromptExample]:
    """Every prompt of a manifest, `prompt_id` = row index, in file order.

    Rows may name source images (data/source_images.py), resolved against the manifest's
    folder and opened to check they are images; `source_size` (height, width) also checks
    their size (the run's, known to the preflight).

    `config_key` (e.g. "data.manifest") prefixes every message so the user knows which
    setting to fix. Raises `FileNotFoundError` (see `resolve_data_path`) or `ManifestError`
    for an unsupported extension, undecodable text, an empty manifest, or bad rows (all of
    them listed, up to `MAX_REPORTED_ERRORS`).
    """
    prefix = f"{config_key}: " if config_key else "manifest "
    if is_hub_manifest(path):
        return _hub_examples(path, prefix, source_size)
    resolved = resolve_data_path(path, config_key)
    shown = str(path)  # as the user wrote it in the config
    suffix = resolved.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise ManifestError(
            f"{prefix}{shown} has unsupported extension {suffix!r}; use one of {', '.join(SUPPORTED_SUFFIXES)}"
        )
    try:
        text = resolved.read_text(encoding="utf-8-sig")  # -sig: a BOM is not part of the first prompt
    except UnicodeDecodeError as exc:
        raise ManifestError(
            f"{prefix}{shown} is not UTF-8 text ({exc.reason} at byte {exc.start}); re-save it as UTF-8"
        ) from exc
    except OSError as exc:  # e.g. no read permission
        raise ManifestError(f"{prefix}cannot read {resolved} ({exc.strerror})") from exc
    errors: list[str] = []
    try:
        sources = _Sources(resolved.parent, source_size)
        if suffix == ".json":
            examples = _read_json(text, shown, errors, sources)
        else:
            examples = _read_lines(text, shown, suffix == ".jsonl", errors, sources)
    except ManifestError as exc:
        raise ManifestError(f"{prefix}{exc}") from exc.__cause__
    if errors:
        raise ManifestError(prefix + (errors[0] if len(errors) == 1 else _summary(errors, shown)))
    if not examples:
        raise ManifestError(f"{prefix}{shown} holds no prompts; add at least one")
    return examples
