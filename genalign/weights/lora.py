"""LoRA on the denoiser (peft), trainable-state handling, reference mode, diffusers export.

Where it fits: `setup.build_policy` applies the adapter; checkpoints and Ray weight sync
move `trainable_state_dict` (and compare `state_fingerprint`s); the KL term evaluates the
reference policy under `reference_mode` (the adapter disabled, so no second copy of the
model; valid only because the base weights are frozen, docs/algorithms.md §2.8); checkpoints export
a LoRA that `pipe.load_lora_weights(dir)` loads with the right alpha/r scale.

Family-agnostic: everything takes the denoiser `torch.nn.Module`. A diffusers model gets the
adapter through its own `add_adapter` (so diffusers' LoRA API keeps working on it); any other
module through peft's `inject_adapter_in_model`.
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch

from genalign.models.config import LoraConfig
from genalign.weights.sharded import copy_full_into

LORA_INITS = {"gaussian": "gaussian", "default": True}
"""model.lora.init -> peft `init_lora_weights`; both start with B = 0 (LoRA output 0 at init)."""
_EXPORT_KEYS = (
    "r",
    "lora_alpha",
    "target_modules",
    "lora_dropout",
    "init_lora_weights",
    "use_dora",
    "rank_pattern",
    "alpha_pattern",
    "bias",
    "use_rslora",
)
"""peft LoraConfig fields written as diffusers `lora_adapter_metadata` (LoraConfig(**metadata) on load)."""


def _matches(module_name: str, target: str) -> bool:
    """peft's suffix rule for a list of target names: exact name or `.target` suffix."""
    return module_name == target or module_name.endswith("." + target)


def _tuner_layers(module: torch.nn.Module) -> list[torch.nn.Module]:
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [m for m in module.modules() if isinstance(m, BaseTunerLayer)]


def has_adapter(module: torch.nn.Module) -> bool:
    return bool(_tuner_layers(module))


def apply_lora(
    module: torch.nn.Module, cfg: LoraConfig, default_targets: list[str], adapter_name: str = "default"
) -> None:
    """Attach a peft LoRA adapter (r, alpha, init, dropout, targets from `cfg`; targets default
    to the family's list) and make it the only trainable part of `module`.

    Every target must match at least one module: an entry that binds to nothing would
    silently train less than the config says."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import inject_adapter_in_model

    targets = list(cfg.target_modules) or list(default_targets)
    if not targets:
        raise ValueError("model.lora.target_modules is empty and the model family declares no default targets")
    if cfg.init not in LORA_INITS:
        raise ValueError(f"model.lora.init={cfg.init!r}: choose one of {sorted(LORA_INITS)}")
    if has_adapter(module):
        raise ValueError("the denoiser already carries a LoRA adapter; apply_lora must be called once")
    names = [name for name, _ in module.named_modules()]
    unmatched = [t for t in targets if not any(_matches(name, t) for name in names)]
    if unmatched:
        raise ValueError(
            f"model.lora.target_modules: {unmatched} (of {targets}) match no module of the denoiser "
            f"{type(module).__name__} (module names look like {names[1:4]} ...)"
        )
    module.requires_grad_(False)
    peft_config = PeftLoraConfig(
        r=cfg.rank,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        init_lora_weights=LORA_INITS[cfg.init],
        target_modules=targets,
    )
    if hasattr(module, "add_adapter"):  # diffusers ModelMixin (PeftAdapterMixin)
        module.add_adapter(peft_config, adapter_name=adapter_name)
    else:
        inject_adapter_in_model(peft_config, module, adapter_name=adapter_name)
    if not trainable_parameters(module):
        raise ValueError("LoRA was applied but no parameter is trainable")


def freeze_for_full_finetune(module: torch.nn.Module) -> None:
    """model.train_mode=full: every denoiser weight is trained."""
    module.requires_grad_(True)


def trainable_parameters(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for p in module.parameters() if p.requires_grad]


def trainable_state_dict(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Detached CPU clones of the trained tensors, keyed by parameter name
    (e.g. `transformer_blocks.0.attn.to_q.lora_A.default.weight`): the names depend only on the
    architecture and the adapter config, so every process and every checkpoint agrees on them."""
    return {name: p.detach().cpu().clone() for name, p in module.named_parameters() if p.requires_grad}


@torch.no_grad()
def load_trainable_state_dict(module: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy `state` into the trained parameters (cast to their dtype/device). Strict: missing,
    unexpected or mis-shaped names are one error listing them, since an adapter bound to
    different modules (or a different rank) must never load partially."""
    params = {name: p for name, p in module.named_parameters() if p.requires_grad}
    missing = sorted(set(params) - set(state))
    unexpected = sorted(set(state) - set(params))
    mis_shaped = [
        f"{n}: model {tuple(params[n].shape)} vs state {tuple(state[n].shape)}"
        for n in sorted(set(params) & set(state))
        if params[n].shape != state[n].shape
    ]
    if missing or unexpected or mis_shaped:
        raise ValueError(
            "trainable state does not match the model (different model.lora / model.train_mode?): "
            f"{len(missing)} missing {missing[:5]}, {len(unexpected)} unexpected {unexpected[:5]}, "
            f"{len(mis_shaped)} shape mismatches {mis_shaped[:5]}"
        )
    for name, param in params.items():
        copy_full_into(param, state[name])


@torch.no_grad()
def merged_state_dict(
    module: torch.nn.Module, trained: dict[str, torch.Tensor], adapter_name: str = "default"
) -> dict[str, torch.Tensor]:
    """`module`'s whole state (buffers included) under its un-adapted names, with `trained` (the
    gathered trained tensors: live, or the EMA) in place of the module's own, and every LoRA
    layer merged into its base weight: W' = W + scaling · B A, summed in float32 and written in
    W's dtype (peft's `merge_and_unload`, without touching the live module). CPU tensors.

    A full fine-tune (no adapter) returns its state with `trained` in place, unchanged."""
    from peft.tuners.lora import LoraLayer

    state = {}
    for name, tensor in module.state_dict().items():
        if name not in trained and type(tensor).__name__ == "DTensor":
            raise ValueError(f"cannot merge the model: {name} is sharded and not trained (gather it first)")
        state[name] = trained[name] if name in trained else tensor
    state = {name: tensor.detach().cpu() for name, tensor in state.items()}
    for name, layer in module.named_modules():
        if not isinstance(layer, LoraLayer):
            continue
        if getattr(layer, "fan_in_fan_out", False) or layer.use_dora.get(adapter_name, False):
            raise ValueError(f"cannot merge {name}: only plain LoRA on Linear weights merges here")
        a = state.pop(f"{name}.lora_A.{adapter_name}.weight").float()  # [r, in]
        b = state.pop(f"{name}.lora_B.{adapter_name}.weight").float()  # [out, r]
        base = state[f"{name}.base_layer.weight"]  # [out, in]
        state[f"{name}.base_layer.weight"] = (base.float() + layer.scaling[adapter_name] * (b @ a)).to(base.dtype)
    left = [name for name in state if ".lora_" in name]
    if left:
        raise ValueError(f"cannot merge the model: adapter tensors {left[:3]} are not plain LoRA on Linear weights")
    return {name.replace(".base_layer.", "."): tensor for name, tensor in state.items()}


def state_fingerprint(state: dict[str, torch.Tensor]) -> str:
    """sha256 over sorted names, dtypes, shapes and raw bytes: equal iff the states are
    bit-identical (the weight-sync check between trainer and rollout workers)."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous().reshape(-1)  # [N]
        digest.update(f"{name}|{tensor.dtype}|{tuple(state[name].shape)}|".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


@contextmanager
def reference_mode(module: torch.nn.Module) -> Iterator[None]:
    """Within the block every LoRA layer is bypassed (the base weights = the reference
    policy); on exit, also on error, the layers that were active before are re-enabled
    (peft also restores their requires_grad). Nested use is safe."""
    layers = _tuner_layers(module)
    if not layers:
        raise ValueError(
            "reference_mode needs a LoRA adapter on the denoiser (model.train_mode=lora); "
            "full fine-tuning needs a separate frozen reference copy"
        )
    was_active = [layer for layer in layers if not layer.disable_adapters]
    for layer in was_active:
        layer.enable_adapters(False)
    try:
        yield
    finally:
        for layer in was_active:
            layer.enable_adapters(True)


def export_lora_for_diffusers(
    module: torch.nn.Module,
    out_dir: str | Path,
    cfg: LoraConfig,
    pipeline_cls_name: str = "StableDiffusion3Pipeline",
    adapter_name: str = "default",
    trainable_state: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write `out_dir/pytorch_lora_weights.safetensors` that `<Pipeline>.load_lora_weights(out_dir)`
    loads. The adapter's peft config travels as `lora_adapter_metadata` (diffusers builds
    `LoraConfig(**metadata)` from it), so lora_alpha != r keeps its alpha/r scale. A pipeline
    without a LoRA loader (`pipeline_loads_lora` False: HunyuanVideo15Pipeline in diffusers 0.42)
    gets the same file, which its transformer loads:
    `pipe.transformer.load_lora_adapter(out_dir, use_safetensors=True)`.

    `trainable_state` (whole tensors named as in `trainable_state_dict`) replaces reading the
    module, for sharded (FSDP2) training where only the gathered copy is whole."""
    import diffusers
    from peft.utils import get_peft_model_state_dict

    peft_configs = getattr(module, "peft_config", {})
    if adapter_name not in peft_configs:
        raise ValueError(
            f"cannot export LoRA: the denoiser has no adapter {adapter_name!r} "
            f"(has {sorted(peft_configs)}); export needs model.train_mode=lora"
        )
    pipeline_cls = getattr(diffusers, pipeline_cls_name, None)
    if pipeline_cls is None or not (pipeline_loads_lora(pipeline_cls_name) or hasattr(module, "load_lora_adapter")):
        raise ValueError(f"diffusers has no pipeline {pipeline_cls_name!r} with LoRA support")
    adapter_config = peft_configs[adapter_name].to_dict()
    if adapter_config["r"] != cfg.rank or adapter_config["lora_alpha"] != cfg.alpha:
        raise ValueError(
            f"model.lora (r={cfg.rank}, alpha={cfg.alpha}) differs from the adapter on the model "
            f"(r={adapter_config['r']}, alpha={adapter_config['lora_alpha']})"
        )
    if trainable_state is None:
        state = {
            k: v.detach().cpu().contiguous()
            for k, v in get_peft_model_state_dict(module, adapter_name=adapter_name).items()
        }
    else:  # peft's export names drop the adapter name: "...lora_A.default.weight" -> "...lora_A.weight"
        state = {
            k.replace(f".{adapter_name}.", "."): v.detach().cpu().contiguous()
            for k, v in trainable_state.items()
            if "lora_" in k
        }
    metadata = {k: (sorted(v) if isinstance(v, set) else v) for k, v in adapter_config.items() if k in _EXPORT_KEYS}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if pipeline_loads_lora(pipeline_cls_name):
        pipeline_cls.save_lora_weights(
            out_dir, transformer_lora_layers=state, transformer_lora_adapter_metadata=metadata, safe_serialization=True
        )
    else:  # the writer every pipeline's save_lora_weights calls, with the transformer's prefix
        from diffusers.loaders.lora_base import LoraBaseMixin

        LoraBaseMixin._save_lora_weights(out_dir, {"transformer": state}, {"transformer": metadata})
    return out_dir


def pipeline_loads_lora(pipeline_cls_name: str) -> bool:
    """Whether diffusers' pipeline class has a LoRA loader (`load_lora_weights`); without one an
    exported adapter loads into the pipeline's transformer (`load_lora_adapter`)."""
    import diffusers

    return hasattr(getattr(diffusers, pipeline_cls_name, None), "load_lora_weights")


def export_lora_for_peft(
    module: torch.nn.Module,
    out_dir: str | Path,
    cfg: LoraConfig,
    module_prefix: str,
    base_model: str,
    adapter_name: str = "default",
    trainable_state: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write a peft adapter (`adapter_config.json` + `adapter_model.safetensors`, what
    `PeftModel.save_pretrained` writes) that `PeftModel.from_pretrained(model, out_dir)` loads
    onto the whole transformers model whose submodule `module_prefix` is `module` (Janus-Pro:
    "model.language_model" of JanusForConditionalGeneration).

    The adapter's targets become one regex anchored at `module_prefix`, so loading attaches
    LoRA to exactly the trained layers and not to same-named ones elsewhere (Janus' vision
    tower also has q_proj/k_proj/v_proj). Keys are peft's saved form:
    `base_model.model.<module_prefix>.<layer>.lora_A.weight` (no adapter name)."""
    import re

    from peft import LoraConfig as PeftLoraConfig
    from safetensors.torch import save_file

    peft_configs = getattr(module, "peft_config", {})
    if adapter_name not in peft_configs:
        raise ValueError(
            f"cannot export LoRA: the trained module has no adapter {adapter_name!r} "
            f"(has {sorted(peft_configs)}); export needs model.train_mode=lora"
        )
    adapter = peft_configs[adapter_name]
    if adapter.r != cfg.rank or adapter.lora_alpha != cfg.alpha:
        raise ValueError(
            f"model.lora (r={cfg.rank}, alpha={cfg.alpha}) differs from the adapter on the model "
            f"(r={adapter.r}, alpha={adapter.lora_alpha})"
        )
    state = trainable_state if trainable_state is not None else trainable_state_dict(module)
    saved = {
        f"base_model.model.{module_prefix}.{name.replace(f'.{adapter_name}.', '.')}": t.detach().cpu().contiguous()
        for name, t in state.items()
        if "lora_" in name
    }
    targets = "|".join(re.escape(t) for t in sorted(adapter.target_modules))
    config = PeftLoraConfig(
        r=adapter.r,
        lora_alpha=adapter.lora_alpha,
        lora_dropout=adapter.lora_dropout,
        init_lora_weights=adapter.init_lora_weights,
        base_model_name_or_path=base_model,
        target_modules=rf"{re.escape(module_prefix)}\..*\.({targets})",
    )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(str(out_dir))
    save_file(saved, str(out_dir / "adapter_model.safetensors"), metadata={"format": "pt"})
    return out_dir
