"""What a Hugging Face hub id looks like ("org/name"), as opposed to a local path, and the
`hf://` references genalign reads (a checkpoint folder in a model repository).

Where it fits: preflight checks `model.path`, `model.card.base_model`, `trainer.push_to_hub`
and `trainer.resume_from` with it, model cards name a hub base model, `genalign export
--push-to-hub` checks the target repo id, and `runs/hub_checkpoint.py` downloads the
checkpoint a `trainer.resume_from=hf://...` names. (Prompt datasets, `hf://datasets/...`,
are `data/hub_prompts.py`'s.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
"""The hub's "org/name" form; anything else (or a path that starts with /, ./, ../, ~) is local."""


def is_hub_id(path: str) -> bool:
    """ "org/name" that is not an existing local path (and does not start like one)."""
    return (
        not Path(path).expanduser().exists()
        and not path.startswith(("/", "./", "../", "~"))
        and bool(HUB_ID.match(path))
    )


HUB_CHECKPOINT = re.compile(r"hf://(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)/(?P<folder>[^@\s]+?)/?(?:@(?P<revision>\S+))?")
"""`hf://<owner>/<name>/<checkpoint folder>[@revision]`: a checkpoint inside a model repository."""


@dataclass(frozen=True)
class HubCheckpoint:
    repo: str
    folder: str
    revision: str | None = None


def is_hub_reference(value: str | None) -> bool:
    """Whether a path-like config value is an `hf://` reference rather than a local path."""
    return isinstance(value, str) and value.startswith("hf://")


def parse_hub_checkpoint(value: str) -> HubCheckpoint | None:
    """`hf://owner/name/folder[@revision]` -> its parts; None when it is not of that form (a
    dataset reference, `hf://datasets/...`, is not a checkpoint)."""
    match = HUB_CHECKPOINT.fullmatch(value)
    if match is None or value.startswith("hf://datasets/"):
        return None
    return HubCheckpoint(match["repo"], match["folder"], match["revision"])


def hub_offline(environ: Mapping[str, str]) -> bool:
    """$HF_HUB_OFFLINE as huggingface_hub reads it (1, ON, YES, TRUE: offline)."""
    return environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")
