"""NextStep-1's checkpoint files: the tensors of a checkpoint directory in the authors' layout
(`model.safetensors`, or the shards its `model.safetensors.index.json` names).

Where it fits: `NextStepPolicy.from_pretrained` loads through `load_checkpoint_state`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch


def load_checkpoint_state(root: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors: model.safetensors, or every shard its index names."""
    from safetensors.torch import load_file

    single = root / "model.safetensors"
    if single.is_file():
        return load_file(single)
    index = root / "model.safetensors.index.json"
    if not index.is_file():
        raise FileNotFoundError(f"{root}: neither model.safetensors nor model.safetensors.index.json")
    shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    state: dict[str, torch.Tensor] = {}
    for shard in shards:
        state.update(load_file(root / shard))
    return state
