"""NextStep-1's checkpoint files: a directory in the authors' layout, read and written.

The layout is what the authors' loader reads (stepfun-ai/NextStep-1 6e49bae:
`NextStep.from_pretrained`, transformers' `PreTrainedModel` loader, through
`NextStepPipeline(model_name_or_path=...)`): `config.json` (their `NextStepConfig`, a
`LlamaConfig` with the image keys), the weights as `model.safetensors` or shards named by
`model.safetensors.index.json` (transformers' `save_pretrained` form: `model-0000i-of-0000n`,
`{"metadata": {"total_size"}, "weight_map"}`), and the tokenizer files. genalign's loader also
reads `vae/` (a diffusers AutoencoderKL); the authors' pipeline takes its VAE separately.

Where it fits: `NextStepPolicy.from_pretrained` loads through `load_checkpoint_state`; the
policy's `export_checkpoint` (a trained model in the final checkpoint) and the tiny model's
`save_pretrained` write through `write_checkpoint`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

MAX_SHARD_SIZE = "5GB"
"""Largest weight file `write_checkpoint` writes (transformers' and huggingface_hub's default
shard size): NextStep-1-Large's 14.95 B bfloat16 parameters become seven shards and the index."""


def write_checkpoint(
    root: Path, config: dict, state: dict[str, torch.Tensor], tokenizer, vae, max_shard_size: int | str = MAX_SHARD_SIZE
) -> Path:
    """`state` (the checkpoint's parameter names: `NextStepModel.state_dict()`'s, the authors')
    with `config` as config.json, the tokenizer's files and `vae/` under `root`: one
    `model.safetensors` when it fits one shard, else the shards and their index."""
    from huggingface_hub import split_torch_state_dict_into_shards
    from safetensors.torch import save_file

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    split = split_torch_state_dict_into_shards(state, max_shard_size=max_shard_size)
    for filename, names in split.filename_to_tensors.items():
        shard = {name: state[name].detach().cpu().contiguous() for name in names}
        save_file(shard, str(root / filename), metadata={"format": "pt"})
    if split.is_sharded:
        index = {"metadata": {**split.metadata}, "weight_map": split.tensor_to_filename}
        (root / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    tokenizer.save_pretrained(root)
    vae.save_pretrained(root / "vae")
    return root


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
