"""LoRA on the denoiser (peft), trainable-state handling, reference mode, diffusers export.

Where it fits: `setup.build_policy` applies the adapter; checkpoints and Ray weight sync
move `trainable_state_dict`; the KL term evaluates the reference policy under
`reference_mode` (the adapter disabled, so no second copy of the model); checkpoints export
a LoRA that `pipe.load_lora_weights(dir)` loads with the right alpha/r scale.
"""

from __future__ import annotations

import dataclasses
import hashlib
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch

from genalign.models.base import LoraConfig


def _matches(module_name: str, target: str) -> bool:
    return module_name == target or module_name.endswith("." + target)


def apply_lora(module: torch.nn.Module, cfg: LoraConfig, default_targets: list[str],
               adapter_name: str = "default") -> None:
    """Attach a peft LoRA adapter and make it the only trainable part of `module`."""
    from peft import LoraConfig as PeftLoraConfig

    targets = list(cfg.target_modules) or list(default_targets)
    if not targets:
        raise ValueError("model.lora.target_modules is empty and the model family declares no default targets")
    names = [name for name, _ in module.named_modules()]
    unmatched = [t for t in targets if not any(_matches(name, t) for name in names)]
    if unmatched:
        raise ValueError(f"model.lora.target_modules {unmatched} match no module of the denoiser "
                         f"(e.g. {names[1:4]} ...); an adapter bound to nothing would train nothing")
    module.requires_grad_(False)
    peft_config = PeftLoraConfig(r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout,
                                 init_lora_weights=True if cfg.init == "default" else cfg.init,
                                 target_modules=targets)
    module.add_adapter(peft_config, adapter_name=adapter_name)
    if not trainable_parameters(module):
        raise ValueError("LoRA was applied but no parameter is trainable")


def freeze_for_full_finetune(module: torch.nn.Module) -> None:
    """model.train_mode=full: every denoiser weight is trained."""
    module.requires_grad_(True)


def trainable_parameters(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for p in module.parameters() if p.requires_grad]


def trainable_state_dict(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Detached CPU copies of the trained tensors, keyed by their parameter names (stable
    across processes, so checkpoints and Ray workers agree on them)."""
    return {name: p.detach().cpu().clone() for name, p in module.named_parameters() if p.requires_grad}


@torch.no_grad()
def load_trainable_state_dict(module: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy `state` into the trained parameters; missing, unexpected or mis-shaped names are
    an error listing them (an adapter that bound to different modules must not load silently)."""
    params = {name: p for name, p in module.named_parameters() if p.requires_grad}
    missing = sorted(set(params) - set(state))
    unexpected = sorted(set(state) - set(params))
    mis_shaped = sorted(n for n in set(params) & set(state) if params[n].shape != state[n].shape)
    if missing or unexpected or mis_shaped:
        raise ValueError(f"trainable state does not match the model: missing {missing[:5]} ({len(missing)}), "
                         f"unexpected {unexpected[:5]} ({len(unexpected)}), shape mismatch {mis_shaped[:5]}")
    for name, param in params.items():
        param.copy_(state[name].to(device=param.device, dtype=param.dtype))


def state_fingerprint(state: dict[str, torch.Tensor]) -> str:
    """sha256 over sorted names, dtypes, shapes and raw bytes: equal iff the tensors are equal."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def has_adapter(module: torch.nn.Module) -> bool:
    from peft.tuners.tuners_utils import BaseTunerLayer

    return any(isinstance(m, BaseTunerLayer) for m in module.modules())


@contextmanager
def reference_mode(module: torch.nn.Module) -> Iterator[None]:
    """Within the block the adapter is disabled (the base weights = the reference policy);
    it is re-enabled on exit, also on error. peft re-enables the adapter's requires_grad."""
    if not has_adapter(module):
        raise ValueError("reference_mode needs a LoRA adapter on the module (model.train_mode=lora)")
    module.disable_adapters()
    try:
        yield
    finally:
        module.enable_adapters()


def export_lora_for_diffusers(module: torch.nn.Module, out_dir: str | Path, cfg: LoraConfig,
                              pipeline_cls_name: str = "StableDiffusion3Pipeline") -> Path:
    """Write `pytorch_lora_weights.safetensors` that `<Pipeline>.load_lora_weights(out_dir)`
    loads; the adapter config travels as metadata so lora_alpha != r keeps its scale."""
    import diffusers
    from peft.utils import get_peft_model_state_dict

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pipeline_cls = getattr(diffusers, pipeline_cls_name)
    state = {k: v.detach().cpu().contiguous() for k, v in get_peft_model_state_dict(module).items()}
    adapter_config = module.peft_config["default"].to_dict()
    metadata = {k: (sorted(v) if isinstance(v, set) else v) for k, v in adapter_config.items()
                if k in ("r", "lora_alpha", "target_modules", "lora_dropout", "init_lora_weights", "use_dora",
                         "rank_pattern", "alpha_pattern", "bias", "use_rslora")}
    pipeline_cls.save_lora_weights(out_dir, transformer_lora_layers=state, transformer_lora_adapter_metadata=metadata)
    return out_dir
