"""What a Hugging Face hub id looks like ("org/name"), as opposed to a local path.

Where it fits: preflight checks `model.path` and `model.card.base_model` with it, model cards
name a hub base model, and `genalign export --push-to-hub` checks the target repo id.
"""

from __future__ import annotations

import re
from pathlib import Path

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
"""The hub's "org/name" form; anything else (or a path that starts with /, ./, ../, ~) is local."""


def is_hub_id(path: str) -> bool:
    """"org/name" that is not an existing local path (and does not start like one)."""
    return (not Path(path).expanduser().exists() and not path.startswith(("/", "./", "../", "~"))
            and bool(HUB_ID.match(path)))
