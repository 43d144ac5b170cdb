"""Checkpoints: safetensors + JSON, written atomically, loaded without unpickling.

Layout of `checkpoint-<step>/`:
    trainable.safetensors   trained weights (LoRA tensors, or the full denoiser)
    ema.safetensors         EMA of the trained weights (when EMA is on)
    optimizer.safetensors   AdamW moment tensors; optimizer.json its scalars and groups
    trainer_state.json      step, optimizer steps, EMA counter, evaluation history
    config.yaml             the resolved config of the run that wrote it
    lora/                   exported LoRA for `pipe.load_lora_weights(dir)` (LoRA runs): the
                            weights evaluation used (the EMA when eval.use_ema)
    lora_live/              the live (non-EMA) LoRA, when lora/ holds the EMA
The directory is written under a temporary name beside the target and renamed into place,
so a crash never leaves a half-written checkpoint that resume would pick up.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import yaml
from safetensors.torch import load_file, save_file

TRAINER_STATE = "trainer_state.json"


@dataclass
class CheckpointState:
    path: Path
    step: int
    config: dict[str, Any]
    trainable: dict[str, torch.Tensor]
    ema: dict[str, torch.Tensor] | None
    optimizer: dict[str, Any]
    trainer_state: dict[str, Any]


def optimizer_to_tensors(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split an optimizer state dict (entries keyed by parameter index or name) into tensors
    for safetensors and JSON-able metadata."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for param_key, entries in state["state"].items():
        for key, value in entries.items():
            if torch.is_tensor(value):
                tensors[f"state/{param_key}/{key}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(param_key), {})[key] = value
    integer_keys = all(isinstance(k, int) for k in state["state"])
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars, "integer_keys": integer_keys}


def optimizer_from_tensors(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    def param_key(text: str):
        return int(text) if meta.get("integer_keys") else text

    state: dict[Any, dict[str, Any]] = {}
    for name, value in tensors.items():
        _, key_text, key = name.split("/")
        state.setdefault(param_key(key_text), {})[key] = value
    for key_text, entries in meta["scalars"].items():
        state.setdefault(param_key(key_text), {}).update(entries)
    return {"state": state, "param_groups": meta["param_groups"]}


def save_checkpoint(
    path: Path,
    *,
    step: int,
    config: dict[str, Any],
    trainable: dict[str, torch.Tensor],
    ema: dict[str, torch.Tensor] | None,
    optimizer: dict[str, Any],
    trainer_state: dict[str, Any],
    export: Callable[[Path], None] | None = None,
) -> Path:
    """Write a checkpoint atomically: temp dir beside `path`, then rename into place.
    `export(directory)` adds the exported adapters (lora/, lora_live/) inside it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    if temp.exists():
        shutil.rmtree(temp)
    temp.mkdir()
    save_file({k: v.contiguous() for k, v in trainable.items()}, str(temp / "trainable.safetensors"))
    if ema is not None:
        save_file({k: v.contiguous() for k, v in ema.items()}, str(temp / "ema.safetensors"))
    optimizer_tensors, optimizer_meta = optimizer_to_tensors(optimizer)  # a state dict, whole tensors
    save_file(optimizer_tensors, str(temp / "optimizer.safetensors"))
    (temp / "optimizer.json").write_text(json.dumps(optimizer_meta, indent=1))
    (temp / TRAINER_STATE).write_text(json.dumps({"step": step, **trainer_state}, indent=1))
    (temp / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    if export is not None:
        export(temp)
    previous = path.parent / f".{path.name}.old-{os.getpid()}"
    if path.exists():
        path.rename(previous)
    temp.rename(path)
    if previous.exists():
        shutil.rmtree(previous)
    return path


def load_checkpoint(path: str | Path) -> CheckpointState:
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"trainer.resume_from: checkpoint directory {path} does not exist")
    missing = [name for name in ("trainable.safetensors", "optimizer.safetensors", "optimizer.json",
                                 TRAINER_STATE, "config.yaml") if not (path / name).exists()]
    if missing:
        raise FileNotFoundError(f"trainer.resume_from: {path} is not a complete checkpoint (missing {missing})")
    trainer_state = json.loads((path / TRAINER_STATE).read_text())
    ema_path = path / "ema.safetensors"
    return CheckpointState(
        path=path,
        step=int(trainer_state["step"]),
        config=yaml.safe_load((path / "config.yaml").read_text()),
        trainable=load_file(str(path / "trainable.safetensors")),
        ema=load_file(str(ema_path)) if ema_path.exists() else None,
        optimizer=optimizer_from_tensors(load_file(str(path / "optimizer.safetensors")),
                                         json.loads((path / "optimizer.json").read_text())),
        trainer_state=trainer_state,
    )
