"""`trainer.resume_from=hf://<owner>/<name>/<checkpoint>[@revision]`: a checkpoint from the Hub.

Where it fits: `run_dir.decide_start` asks `fetch_hub_checkpoint` for the local copy before it
plans the resume, so everything after it (the checkpoint checks, the config comparison,
loading) sees an ordinary checkpoint directory. The files come with huggingface_hub's
`snapshot_download` limited to that folder, into the Hugging Face cache (`HF_HOME`; offline,
a folder already there is used). `trainer.push_to_hub` with `trainer.hub_strategy=checkpoint`
uploads what this reads (`last-checkpoint/`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from genalign.config.errors import ConfigError
from genalign.hub import parse_hub_checkpoint

log = logging.getLogger(__name__)


def fetch_hub_checkpoint(reference: str) -> Path:
    """The local directory of the checkpoint `reference` names (downloaded when not cached);
    a one-line `ConfigError` naming trainer.resume_from when it cannot be had."""
    from huggingface_hub import snapshot_download

    checkpoint = parse_hub_checkpoint(reference)
    if checkpoint is None:
        raise ConfigError(
            [
                f"trainer.resume_from={reference!r} is not a Hub checkpoint reference; write "
                "hf://<owner>/<name>/<checkpoint folder>[@revision], e.g. hf://me/run/last-checkpoint"
            ]
        )
    try:
        snapshot = snapshot_download(
            checkpoint.repo, repo_type="model", revision=checkpoint.revision, allow_patterns=[f"{checkpoint.folder}/*"]
        )
    except Exception as exc:  # noqa: BLE001 - not found, no access, no network, offline and not cached
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            [f"trainer.resume_from={reference}: cannot download the checkpoint ({type(exc).__name__}: {first})"],
            hint="check the repository and folder names and your Hub login (hf auth login or HF_TOKEN)",
        ) from exc
    local = Path(snapshot) / checkpoint.folder
    if not local.is_dir():
        raise ConfigError(
            [
                f"trainer.resume_from={reference}: the repository {checkpoint.repo} has no folder "
                f"{checkpoint.folder!r} (trainer.hub_strategy=checkpoint uploads last-checkpoint/, "
                "all_checkpoints checkpoint-<step>/)"
            ]
        )
    log.info("trainer.resume_from=%s: the checkpoint is %s", reference, local)
    return local
