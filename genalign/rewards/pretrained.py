"""Loading reward models by hub id or local path, failing fast with a message that says how to fix it.

Where it fits: model-backed scorers (aesthetic, clip_score, pickscore, text_similarity) load
their weights once, at runtime build time, through the real transformers classes. Those
classes already honour HF_HOME (cache location) and HF_HUB_OFFLINE (no network); this module
only turns their OSError into an error that names the config key to change, and never retries.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, TypeVar, get_args

import torch

from genalign.models.config import ComputeDtype

ModelT = TypeVar("ModelT")

DTYPES = {name: getattr(torch, name) for name in get_args(ComputeDtype)}
"""A `reward.kwargs.<name>.dtype` choice -> the torch dtype of that name."""


def resolve_dtype(reward: str, name: str) -> torch.dtype:
    """A `ComputeDtype` name -> torch dtype; anything else names reward.kwargs.<reward>.dtype."""
    if name not in DTYPES:
        raise ValueError(f"reward.kwargs.{reward}.dtype={name!r} is not supported; choose one of {', '.join(DTYPES)}")
    return DTYPES[name]


def missing_model_message(reward: str, key: str, name_or_path: str, what: str) -> str:
    from huggingface_hub import constants

    offline = " HF_HUB_OFFLINE is set, so the network was not tried." if constants.HF_HUB_OFFLINE else ""
    return (
        f"reward.kwargs.{reward}.{key}={name_or_path!r}: cannot load the {what}. It is not a local "
        f"directory and was not found in the Hugging Face cache {constants.HF_HUB_CACHE!r} (set by HF_HOME)."
        f"{offline} Either download it once with network access and the same HF_HOME "
        f"(`hf download {name_or_path}`), or set reward.kwargs.{reward}.{key} to a local directory "
        f"written by save_pretrained."
    )


def load_pretrained(
    loader: Callable[..., ModelT], name_or_path: str, *, reward: str, key: str, what: str, **kwargs: Any
) -> ModelT:
    """`loader(name_or_path, **kwargs)` (a `from_pretrained`); a missing model is one clear FileNotFoundError."""
    try:
        return loader(name_or_path, **kwargs)
    except OSError as exc:
        raise FileNotFoundError(missing_model_message(reward, key, name_or_path, what) + f" ({exc})") from exc


def load_weights_file(reward: str, path: str | None, what: str, how: str) -> dict[str, torch.Tensor]:
    """The state dict in the safetensors file that reward.kwargs.<reward>.weights_path names; a
    missing path is one FileNotFoundError naming the key, what the file is and how to make it."""
    from safetensors.torch import load_file

    if path is None or not Path(path).is_file():
        raise FileNotFoundError(
            f"reward.kwargs.{reward}.weights_path={path!r}: a safetensors file of {what} is required ({how})"
        )
    return load_file(path)


def read_json_file(name_or_path: str, filename: str, *, reward: str, key: str) -> dict[str, Any]:
    """A JSON file from a local model directory or from the hub cache (e.g. preprocessor_config.json)."""
    local = Path(name_or_path) / filename
    if local.is_file():
        return json.loads(local.read_text())
    if os.path.isdir(name_or_path):
        raise FileNotFoundError(f"reward.kwargs.{reward}.{key}={name_or_path!r}: the directory has no {filename}")
    from transformers.utils import cached_file

    path = load_pretrained(cached_file, name_or_path, reward=reward, key=key, what=filename, filename=filename)
    return json.loads(Path(path).read_text())
