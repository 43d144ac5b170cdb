"""Loading a diffusers pipeline for any family: local-path checks, dtypes, fix-it errors.

Where it fits: every family's `from_pretrained` (sd3, wan, ...) calls `load_pipeline` with
its diffusers pipeline class name, so a missing directory or an uncached hub id fails the
same way, with the same advice, for every family; `place` moves a loaded component.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def check_model_path(path: str) -> None:
    """Fail before any hub call when `model.path` names a local directory that is missing.

    A path is local-looking when it starts with /, ./, ../ or ~, or is not of the hub form
    "org/name" (e.g. "outputs/a/b" or a bare "my_model")."""
    if Path(path).expanduser().exists():
        return
    looks_local = path.startswith(("/", "./", "../", "~")) or not _HUB_ID.match(path)
    if looks_local:
        raise FileNotFoundError(f"model.path={path!r}: no such local directory (and it is not a hub id "
                                "of the form 'org/name')")


def hub_offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


def load_pipeline(pipeline_cls_name: str, path: str, dtype: torch.dtype, revision: str | None = None):
    """`<pipeline_cls_name>.from_pretrained` with the VAE in float32 and errors that say how
    to fix a missing model (one attempt, no retries)."""
    import diffusers

    pipeline_cls = getattr(diffusers, pipeline_cls_name)
    check_model_path(path)
    try:
        return pipeline_cls.from_pretrained(path, dtype={"default": dtype, "vae": torch.float32}, revision=revision)
    except (OSError, ValueError) as exc:
        if Path(path).expanduser().exists():
            raise
        from huggingface_hub import constants

        reason = ("HF_HUB_OFFLINE is set and the weights are not cached" if hub_offline()
                  else "the weights could not be fetched from the hub")
        raise FileNotFoundError(
            f"model.path={path!r}: {reason} (cache: {constants.HF_HUB_CACHE}). Download them where you have "
            f"access (`hf download {path}`, then copy the cache or set HF_HOME) or set model.path to a local "
            f"directory written by save_pretrained. Original error: {exc}") from exc


def place(module: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """Move to `device`; cast only when the loaded dtype differs (diffusers warns on every cast)."""
    module.to(device=device)
    if next(module.parameters()).dtype != dtype:
        module.to(dtype=dtype)
    return module
