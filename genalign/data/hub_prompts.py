"""Prompts from a Hugging Face Hub dataset: `data.manifest=hf://datasets/<owner>/<name>[@revision][:split]`.

Where it fits: `prompts.load_manifest` hands a manifest written this way here, so everything
that reads a manifest (the config checks, the step sampler, the evaluator, the model card)
reads a Hub dataset the same way, through the `datasets` library (`pip install
'genalign[hub]'`; its cache, `HF_HOME`, `HF_TOKEN` and `HF_HUB_OFFLINE` apply). Each row needs
a "prompt" string, as TRL's prompt datasets have it; every other column whose values are
plain JSON data (strings, numbers, lists, mappings: GenEval's clauses) becomes the row's
metadata, as a .jsonl manifest's fields do. Columns of other types (images, audio) are left
out, and the log names them. Arrow gives every row every field of a column's struct type,
null where the row had none; those nulls are dropped again (at any depth), so a row reads
as the JSON line it was written from (GenEval's clauses name `color` only where they have
one). A dataset is read once per process: later reads of the same reference reuse the rows.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from genalign.config.errors import UserError
from genalign.config.extras import install_hint, is_installed

log = logging.getLogger(__name__)

PREFIX = "hf://datasets/"
REFERENCE = re.compile(r"hf://datasets/(?P<repo>[\w.-]+/[\w.-]+)(?:@(?P<revision>[^:]+))?(?::(?P<split>.+))?")
DEFAULT_SPLIT = "train"


class HubDatasetError(UserError, ValueError):
    """A Hub dataset reference that cannot be read (`prompts.load_manifest` reports it as a
    `ManifestError` naming the config key)."""


@dataclass(frozen=True)
class HubDataset:
    repo: str
    revision: str | None
    split: str

    def __str__(self) -> str:
        return f"{PREFIX}{self.repo}" + (f"@{self.revision}" if self.revision else "") + f":{self.split}"


def is_hub_manifest(path: str) -> bool:
    return path.startswith(PREFIX)


def parse_reference(path: str) -> HubDataset | None:
    """`hf://datasets/owner/name[@revision][:split]` -> its parts (split default "train"); None
    when the text after the prefix is not of that form."""
    match = REFERENCE.fullmatch(path)
    if match is None:
        return None
    return HubDataset(match["repo"], match["revision"], match["split"] or DEFAULT_SPLIT)


def _json_data(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def without_nulls(value: Any) -> Any:
    """`value` with every mapping's null entries removed, at any depth."""
    if isinstance(value, dict):
        return {key: without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [without_nulls(item) for item in value]
    return value


@lru_cache(maxsize=8)
def _rows(dataset: HubDataset) -> tuple[tuple[dict[str, Any], ...], tuple[str, ...]]:
    """(the rows as dicts of their JSON columns, the columns left out). Raises whatever
    `datasets` raises; `read_rows` turns it into one line."""
    from datasets import load_dataset

    table = load_dataset(dataset.repo, split=dataset.split, revision=dataset.revision)
    rows = [dict(row) for row in table]
    dropped = sorted({key for row in rows for key, value in row.items() if key != "prompt" and not _json_data(value)})
    return tuple(without_nulls({k: v for k, v in row.items() if k not in dropped}) for row in rows), tuple(dropped)


def read_rows(path: str, prefix: str) -> list[dict[str, Any]]:
    """The rows of the Hub dataset `path` names (copies: callers may change them); a
    `HubDatasetError` in one line, prefixed with `prefix` (the config key), when the
    reference, the package or the dataset is not usable."""
    dataset = parse_reference(path)
    if dataset is None:
        raise HubDatasetError(
            f"{prefix}{path!r} is not a Hub dataset reference; write "
            "hf://datasets/<owner>/<name>, optionally @<revision> and :<split> (default train)"
        )
    if not is_installed("datasets"):
        raise HubDatasetError(
            f"{prefix}{path} needs the datasets package, which is not installed; {install_hint('hub')}"
        )
    try:
        rows, dropped = _rows(dataset)
    except Exception as exc:  # noqa: BLE001 - not found, no network, offline, a bad split: the library says which
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise HubDatasetError(
            f"{prefix}cannot load the Hub dataset {dataset} ({type(exc).__name__}: {first})",
            hint="check the name and split; offline (HF_HUB_OFFLINE=1) only a dataset already in the cache loads",
        ) from exc
    if dropped:
        log.info(
            "%s%s: columns %s are not JSON data (images, audio, ...) and are not passed to the rewards",
            prefix,
            dataset,
            ", ".join(dropped),
        )
    import copy

    return copy.deepcopy(list(rows))
