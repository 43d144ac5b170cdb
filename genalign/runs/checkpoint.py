"""Checkpoints: safetensors + JSON, written atomically, loaded without unpickling.

Layout of `checkpoint-<step>/`:
    trainable.safetensors   trained weights (LoRA tensors, or the full denoiser)
    ema.safetensors         EMA of the trained weights (when EMA is on)
    algorithm.safetensors   algorithm state (DiffusionNFT's old policy and step count), when any
    rollout.safetensors     the trainable weights the rollout under way samples with, when it
                            runs a step ahead (rollout.overlap=one_step)
    optimizer.safetensors   AdamW moment tensors; optimizer.json its scalars and groups
    trainer_state.json      step, the EMA's counters, the loss scaler, evaluation history, tracker run id
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
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from genalign.config.errors import DISK_FULL_HINT, UserError
from genalign.config.safe_yaml import safe_load_unique, yaml_error_line
from genalign.finite import first_non_finite, kind

TRAINER_STATE = "trainer_state.json"
REQUIRED_FILES = ("trainable.safetensors", "optimizer.safetensors", "optimizer.json", TRAINER_STATE, "config.yaml")
OPTIONAL_TENSOR_FILES = ("ema.safetensors", "algorithm.safetensors", "rollout.safetensors")


class CheckpointError(UserError, ValueError):
    """A checkpoint that cannot be read or written; the message names the file."""


@dataclass
class CheckpointState:
    path: Path
    step: int
    config: dict[str, Any]
    trainable: dict[str, torch.Tensor]
    ema: dict[str, torch.Tensor] | None
    optimizer: dict[str, Any]
    trainer_state: dict[str, Any]
    algorithm: dict[str, torch.Tensor] | None = None
    rollout: dict[str, torch.Tensor] | None = None


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
    algorithm: dict[str, torch.Tensor] | None = None,
    rollout: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write a checkpoint atomically: temp dir beside `path`, then rename into place.
    `export(directory)` adds the exported adapters (lora/, lora_live/) inside it. Refuses to
    replace a checkpoint of a later step (a run never overwrites newer state).

    A failed write (disk full, permissions) removes the temp dir and raises `CheckpointError`;
    an earlier checkpoint at `path` is untouched (it is only replaced by the final rename)."""
    path = Path(path)
    existing_step = checkpoint_step(path)
    if existing_step is not None and existing_step > step:
        raise ValueError(f"{path} holds step {existing_step}; refusing to overwrite it with step {step}")
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    if temp.is_symlink():  # a link planted under our temporary's name is removed, never written through
        temp.unlink()
    elif temp.exists():
        shutil.rmtree(temp)
    try:
        temp.mkdir()
        save_file({k: v.contiguous() for k, v in trainable.items()}, str(temp / "trainable.safetensors"))
        if ema is not None:
            save_file({k: v.contiguous() for k, v in ema.items()}, str(temp / "ema.safetensors"))
        if algorithm:
            save_file({k: v.contiguous() for k, v in algorithm.items()}, str(temp / "algorithm.safetensors"))
        if rollout:
            save_file({k: v.contiguous() for k, v in rollout.items()}, str(temp / "rollout.safetensors"))
        optimizer_tensors, optimizer_meta = optimizer_to_tensors(optimizer)  # a state dict, whole tensors
        save_file(optimizer_tensors, str(temp / "optimizer.safetensors"))
        (temp / "optimizer.json").write_text(json.dumps(optimizer_meta, indent=1))
        (temp / TRAINER_STATE).write_text(json.dumps({"step": step, **trainer_state}, indent=1))
        (temp / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        if export is not None:
            export(temp)
    except (OSError, SafetensorError) as exc:
        shutil.rmtree(temp, ignore_errors=True)
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0]
        kept = f"; the previous {path.name} is intact" if path.exists() else ""
        raise CheckpointError(
            f"trainer.output_dir: writing checkpoint {path} failed ({reason}); the partial "
            f"{temp.name} was removed{kept}",
            hint=DISK_FULL_HINT,
        ) from exc
    previous = path.parent / f".{path.name}.old-{os.getpid()}"
    if path.exists():
        path.rename(previous)
    temp.rename(path)
    if previous.exists():
        shutil.rmtree(previous)
    return path


def _safetensors_problem(file: Path) -> str | None:
    """Why a .safetensors file cannot be loaded (truncated, corrupt header), read from its
    header alone; None when its size matches what the header describes."""
    size = file.stat().st_size
    with file.open("rb") as handle:
        head = handle.read(8)
        header_bytes = int.from_bytes(head, "little") if len(head) == 8 else -1
        if header_bytes < 0 or header_bytes > size - 8:
            return f"{file.name} is truncated ({size} bytes, shorter than its header)"
        try:
            header = json.loads(handle.read(header_bytes))
            end = max((entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"), default=0)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return f"{file.name} has a corrupt header"
    if 8 + header_bytes + end != size:
        return f"{file.name} is truncated or corrupt ({size} bytes, its header describes {8 + header_bytes + end})"
    return None


def _read_json(file: Path) -> tuple[Any, str | None]:
    try:
        return json.loads(file.read_text(encoding="utf-8")), None
    except (ValueError, OSError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None, f"{file.name} is not valid JSON ({str(exc).splitlines()[0]})"


def checkpoint_problems(path: str | Path, key: str = "trainer.resume_from") -> list[str]:
    """Everything wrong with checkpoint directory `path`, each naming `key` and the file, found
    without loading a tensor (headers and JSON only), so a bad checkpoint fails before any model loads."""
    path = Path(path).expanduser()
    if not path.exists():
        return [f"{key}: checkpoint directory {path} does not exist"]
    if not path.is_dir():
        return [f"{key}: {path} is a file, not a checkpoint directory (checkpoint-<step>/ or checkpoint-final/)"]
    missing = [name for name in REQUIRED_FILES if not (path / name).is_file()]
    if missing:
        return [f"{key}: {path} is not a complete checkpoint (missing {', '.join(missing)})"]
    problems: list[str] = []
    state, problem = _read_json(path / TRAINER_STATE)
    if problem:
        problems.append(problem)
    elif not isinstance(state, dict) or not isinstance(state.get("step"), int) or state["step"] < 0:
        problems.append(f'{TRAINER_STATE} has no integer "step" >= 0')
    meta, problem = _read_json(path / "optimizer.json")
    if problem:
        problems.append(problem)
    elif not (
        isinstance(meta, dict) and isinstance(meta.get("param_groups"), list) and isinstance(meta.get("scalars"), dict)
    ):
        problems.append('optimizer.json lacks "param_groups" (a list) and "scalars" (a mapping)')
    for name in OPTIONAL_TENSOR_FILES + ("trainable.safetensors", "optimizer.safetensors"):
        if (path / name).is_file():
            problems.append(_safetensors_problem(path / name))
    try:
        config = safe_load_unique((path / "config.yaml").read_text(encoding="utf-8"))
        if not isinstance(config, dict):
            problems.append(f"config.yaml must hold a mapping, not {type(config).__name__}")
    except yaml.YAMLError as exc:
        problems.append(f"config.yaml is not valid YAML ({yaml_error_line(exc)})")
    except (ValueError, OSError) as exc:
        problems.append(f"config.yaml cannot be read ({str(exc).splitlines()[0]})")
    return [f"{key}: {path}/{p}" if p.split(" ", 1)[0] in _FILE_NAMES else f"{key}: {path}: {p}" for p in problems if p]


_FILE_NAMES = set(REQUIRED_FILES) | set(OPTIONAL_TENSOR_FILES)


def load_checkpoint(path: str | Path, key: str = "trainer.resume_from") -> CheckpointState:
    """Load every part of a checkpoint; a bad one is a `CheckpointError` naming `key` and the file."""
    problems = checkpoint_problems(path, key)
    if problems:
        raise CheckpointError(problems[0] if len(problems) == 1 else "; ".join(problems))
    path = Path(path).expanduser()

    def tensors(name: str) -> dict[str, torch.Tensor]:
        try:
            loaded = load_file(str(path / name))
        except (SafetensorError, OSError) as exc:  # beyond what the header check sees
            raise CheckpointError(f"{key}: {path / name} cannot be loaded ({str(exc).splitlines()[0]})") from exc
        bad = first_non_finite(loaded)
        if bad is not None:  # a NaN trained on gives NaN images, equal rewards, nothing trained: refuse it here
            raise CheckpointError(
                f"{key}: {path / name}: tensor {bad!r} holds {kind(loaded[bad])}; this checkpoint "
                "cannot be used (resume from an earlier one)"
            )
        return loaded

    trainer_state = json.loads((path / TRAINER_STATE).read_text())

    def optional(name: str) -> dict[str, torch.Tensor] | None:
        return tensors(name) if (path / name).exists() else None

    return CheckpointState(
        path=path,
        step=int(trainer_state["step"]),
        config=safe_load_unique((path / "config.yaml").read_text()),
        trainable=tensors("trainable.safetensors"),
        ema=optional("ema.safetensors"),
        optimizer=optimizer_from_tensors(
            tensors("optimizer.safetensors"), json.loads((path / "optimizer.json").read_text())
        ),
        trainer_state=trainer_state,
        algorithm=optional("algorithm.safetensors"),
        rollout=optional("rollout.safetensors"),
    )


def checkpoint_step(path: str | Path) -> int | None:
    """The step of a complete checkpoint at `path`, else None (missing, partial or unreadable);
    reads only trainer_state.json, so the run directory can be planned before anything loads."""
    path = Path(path)
    if not path.is_dir() or not all((path / name).is_file() for name in REQUIRED_FILES):
        return None
    try:
        return int(json.loads((path / TRAINER_STATE).read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
