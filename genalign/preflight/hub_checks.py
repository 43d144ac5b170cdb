"""The Hub keys: `trainer.push_to_hub`, `trainer.hub_strategy`, a `trainer.resume_from` and
prompt manifests written as `hf://` references.

Where it fits: `validate` adds `hub_problems` to the config's problems, so a malformed
repository id, an upload that could never happen (offline, or a family that exports no
model folder) or a missing `datasets` package is an error before anything loads. Downloading
and uploading are `runs/hub_checkpoint.py`, `data/hub_prompts.py` and `export/hub_push.py`.
"""

from __future__ import annotations

import os

from genalign.config.extras import install_hint, is_installed
from genalign.config.schema import ExperimentConfig
from genalign.data.hub_prompts import is_hub_manifest, parse_reference
from genalign.hub import HUB_ID, hub_offline, is_hub_reference, parse_hub_checkpoint
from genalign.models.spec import spec_or_none


def hub_problems(cfg: ExperimentConfig, check_machine: bool = True) -> list[str]:
    """Every problem with the Hub keys (`check_machine=False`: not this machine's package and
    environment, e.g. a config composed for another machine)."""
    trainer, problems = cfg.trainer, []
    if trainer.push_to_hub is not None:
        if not HUB_ID.match(trainer.push_to_hub):
            problems.append(
                f"trainer.push_to_hub={trainer.push_to_hub!r} is not a Hub repository id; use <user or org>/<name>"
            )
        elif check_machine and hub_offline(os.environ):
            problems.append(
                f"trainer.push_to_hub={trainer.push_to_hub}: HF_HUB_OFFLINE is set and uploading needs "
                "the network; unset it, or drop trainer.push_to_hub and upload later with genalign export"
            )
        spec = spec_or_none(cfg.model.family, cfg.model.allow_import)
        if spec is not None and spec.export == "none" and trainer.hub_strategy in ("every_save", "end"):
            problems.append(
                f"trainer.push_to_hub: model.family={cfg.model.family} exports no model folder, so "
                f"trainer.hub_strategy={trainer.hub_strategy} would upload nothing; upload whole "
                "checkpoints with trainer.hub_strategy=checkpoint (or all_checkpoints)"
            )
    if is_hub_reference(trainer.resume_from) and parse_hub_checkpoint(trainer.resume_from) is None:
        problems.append(
            f"trainer.resume_from={trainer.resume_from!r} is not a Hub checkpoint reference; write "
            "hf://<owner>/<name>/<checkpoint folder>[@revision], e.g. hf://me/run/last-checkpoint"
        )
    for key in ("manifest", "eval_manifest"):
        value = getattr(cfg.data, key)
        if not is_hub_manifest(value):
            continue
        if parse_reference(value) is None:
            problems.append(
                f"data.{key}={value!r} is not a Hub dataset reference; write "
                "hf://datasets/<owner>/<name>, optionally @<revision> and :<split> (default train)"
            )
        elif check_machine and not is_installed("datasets"):
            problems.append(
                f"data.{key}={value} needs the datasets package, which is not installed; {install_hint('hub')}"
            )
    return problems
