"""What a checkpoint exports for other tools: a diffusers LoRA, or a whole transformer.

Where it fits: `Checkpointer.save` (training/checkpointing.py) asks `checkpoint_export` for a
writer and `save_checkpoint` calls it inside the checkpoint's temporary directory (so an
export is as atomic as the rest).
- LoRA runs on a diffusers family: `lora/` = the weights the eval numbers came from (the EMA
  when eval.use_ema, as Flow-GRPO saves), `lora_live/` = the live weights beside it; both load
  with `pipe.load_lora_weights(dir)`; each holds its model card (`README.md`), with the first
  and the latest evaluation's contact sheets beside it (`samples_step_<N>.png`). On a transformers
  family (Janus-Pro: its spec's export is "peft" onto `pipeline_class`, the policy names its
  `peft_module_prefix`) the same two folders hold a peft adapter that
  `PeftModel.from_pretrained(<pipeline_class>, dir)` loads.
- A family exported in its own checkpoint layout (NextStep-1: its spec's export is
  "checkpoint"): the final checkpoint's `model/` holds the whole model, a LoRA merged into its
  base weights, as the policy's `export_checkpoint` writes it (what the family's loader and the
  authors' code load), with its card; earlier checkpoints export nothing beside their weights.
- Full fine-tunes of a diffusers denoiser: `checkpoint-final/transformer/` in the layout
  `save_pretrained` writes (config.json + diffusion_pytorch_model.safetensors), so
  `SD3Transformer2DModel.from_pretrained(dir)` / `AutoModel.from_pretrained(dir)` load it and
  `pipeline_cls.from_pretrained(base, transformer=...)` uses it; plus its model card. Only in
  the final checkpoint: every checkpoint already holds the same tensors in trainable.safetensors.
"""

from __future__ import annotations

import logging
import math
import shutil
from pathlib import Path
from typing import Callable

import torch

from genalign.config.schema import ExperimentConfig
from genalign.data.prompts import ManifestError, load_manifest
from genalign.export.model_card import model_card
from genalign.models.experts import DenoiserExperts, denoiser_parts, part_state
from genalign.weights.lora import export_lora_for_diffusers, export_lora_for_peft, merged_state_dict

CARD_NAME = "README.md"

log = logging.getLogger(__name__)

EMA_BARELY_MOVED = 0.5
"""An exported EMA whose starting weights still carry more than this share has barely moved
from the untrained weights: the log warns and the card says so."""


def ema_description(decay: float, updates: int, initial_share: float) -> str:
    """How the card and log name EMA weights: the decay, how many updates the EMA holds and the
    share of the starting (untrained) weights still in it."""
    if updates < 0 or math.isnan(initial_share):
        return f"EMA (decay {decay:g}; update count unknown: checkpoint from an older version)"
    text = (
        f"EMA (decay {decay:g}, {updates} update{'s' if updates != 1 else ''}; "
        f"{100 * initial_share:.0f} % of it is still the starting weights)"
    )
    if initial_share > EMA_BARELY_MOVED:
        text += (
            " - it has barely moved from the untrained weights; the live weights (lora_live/ for a LoRA) are "
            "the trained ones"
        )
    return text


def sample_sheets(run_dir: Path, eval_history: dict, step: int) -> dict[str, Path]:
    """{name beside the card: contact sheet} for the first and the latest evaluation at or
    before `step` (before/after training; one sheet when there was one evaluation; {} with
    none, or when a sheet is missing from the run directory)."""
    steps = [s for s in eval_history.get("steps", []) if s <= step]
    chosen = dict.fromkeys([steps[0], steps[-1]]) if steps else {}
    sheets = {f"samples_step_{s}.png": Path(run_dir) / f"eval_epoch_{s}" / "contact_sheet.png" for s in chosen}
    return {name: path for name, path in sheets.items() if path.is_file()}


def write_card(directory: Path, card_args: dict, sheets: dict[str, Path], location: Path) -> None:
    """The model card in `directory` (which will be at `location` once the checkpoint is
    renamed into place: the card's usage snippet names it), with the evaluation sheets
    copied beside it."""
    for name, path in sheets.items():
        shutil.copyfile(path, directory / name)
    shown = {name: int(name.removeprefix("samples_step_").removesuffix(".png")) for name in sheets}
    (directory / CARD_NAME).write_text(
        model_card(**card_args, sample_sheets=shown, location=str(location)), encoding="utf-8"
    )


def eval_prompts(cfg: ExperimentConfig) -> list[str]:
    """The evaluation's prompts (the card's widget caption and snippet prompt); [] when the
    manifest cannot be read here (the card then says less, the export still happens)."""
    try:
        return [example.prompt for example in load_manifest(cfg.data.eval_manifest)[: cfg.eval.max_prompts]]
    except ManifestError:
        return []


def checkpoint_export(
    cfg: ExperimentConfig,
    policy,
    trainable: dict[str, torch.Tensor],
    ema: dict[str, torch.Tensor] | None,
    use_ema: bool,
    step: int,
    eval_history: dict,
    final: bool,
    ema_tracker=None,
) -> Callable[[Path], None] | None:
    """The writer of this checkpoint's exports (None when there is nothing to export).
    `trainable`/`ema` are whole CPU tensors (gathered from FSDP2 shards by the caller);
    `ema_tracker` (the trainer's `EMA`) gives the update count and starting-weight share the
    card reports."""
    weights = ema if use_ema and ema is not None else trainable
    described = "live (no EMA)"
    if weights is ema:
        updates = ema_tracker.updates if ema_tracker is not None else -1
        share = ema_tracker.initial_share if ema_tracker is not None else float("nan")
        described = ema_description(cfg.actor.ema.decay, updates, share)
        if share > EMA_BARELY_MOVED:  # the warning says it in fewer words than the description
            log.warning(
                "step %d: the exported EMA weights are %.0f %% the starting weights after %d updates; "
                "the live weights (lora_live/ for a LoRA) hold what was trained",
                step,
                100 * share,
                updates,
            )
        else:
            log.info("step %d export: %s", step, described)
    sheets = sample_sheets(Path(cfg.trainer.output_dir), eval_history, step)
    spec = policy.spec
    card = dict(
        cfg=cfg,
        step=step,
        eval_history=eval_history,
        weights=described,
        pipeline_tag=spec.pipeline_tag,
        eval_prompts=eval_prompts(cfg),
    )
    # where the export will be once the checkpoint's temporary directory is renamed into place
    final_dir = Path(cfg.trainer.output_dir).resolve() / ("checkpoint-final" if final else f"checkpoint-{step}")
    if spec.export == "checkpoint":  # the whole model in the family's own layout, LoRA merged
        return checkpoint_writer(policy, weights, card, sheets, final_dir) if final else None
    if cfg.model.train_mode == "lora":
        if spec.export == "none":
            return None
        pipeline_cls = spec.pipeline_class if spec.export == "diffusers" else None
        exports = {"lora": weights, **({"lora_live": trainable} if weights is ema else {})}

        parts = denoiser_parts(policy.transformer)
        experts = tuple(parts) if isinstance(policy.transformer, DenoiserExperts) else None

        def export(directory: Path) -> None:
            for name, state in exports.items():
                if pipeline_cls:  # a two-expert denoiser: one adapter folder per trained expert
                    for component, part in parts.items():
                        export_lora_for_diffusers(
                            part,
                            directory / name / component if experts else directory / name,
                            cfg.model.lora,
                            pipeline_cls,
                            trainable_state=part_state(state, policy.transformer, component),
                        )
                else:
                    export_lora_for_peft(
                        policy.transformer,
                        directory / name,
                        cfg.model.lora,
                        policy.peft_module_prefix,
                        cfg.model.path,
                        trainable_state=state,
                    )
                # every weight folder carries its card; lora_live/ says which weights it holds
                weights_named = described if name == "lora" else "live (the trained weights; lora/ holds the EMA)"
                write_card(
                    directory / name,
                    {
                        **card,
                        "weights": weights_named,
                        "kind": "lora",
                        "hub_class": None if pipeline_cls else spec.pipeline_class,
                        "components": experts,
                    },
                    sheets,
                    final_dir / name,
                )

        return export
    parts = {name: part for name, part in denoiser_parts(policy.transformer).items() if hasattr(part, "save_config")}
    if final and parts:  # one folder per trained model, named as its pipeline component

        def export(directory: Path) -> None:
            for component, part in parts.items():
                out = save_transformer(part, directory / component, part_state(weights, policy.transformer, component))
                components = None if part is policy.transformer else (component,)
                card_args = {**card, "kind": "transformer", "components": components}
                write_card(out, card_args, sheets, final_dir / component)

        return export
    return None


MODEL_FOLDER = "model"
"""The folder of a family exported in its own checkpoint layout (`FamilySpec.export="checkpoint"`)."""


def checkpoint_writer(policy, weights: dict[str, torch.Tensor], card: dict, sheets: dict[str, Path], final_dir: Path):
    """The final checkpoint's `model/`: the policy's `export_checkpoint` of the whole state with
    `weights` in place (a LoRA merged into its base weights in float32, written in their dtype; a
    full fine-tune's weights as trained, float32 masters, as `transformer/`) and the card, whose
    snippet is the policy's `checkpoint_usage`."""

    def export(directory: Path) -> None:
        out = policy.export_checkpoint(directory / MODEL_FOLDER, merged_state_dict(policy.transformer, weights))
        location = str(final_dir / MODEL_FOLDER)
        usage = policy.checkpoint_usage(location, card["cfg"])
        write_card(out, {**card, "kind": "model", "usage": usage}, sheets, final_dir / MODEL_FOLDER)

    return export


def save_transformer(module: torch.nn.Module, out_dir: Path, trained: dict[str, torch.Tensor]) -> Path:
    """`module` in diffusers' `save_pretrained` layout with the `trained` tensors as its weights.

    The weights come from the gathered state, not `module.state_dict()`: under FSDP2 the module
    holds shards, and with EMA the exported weights are not the module's. Anything the state
    lacks (buffers; frozen weights) is taken from the module as it is."""
    from diffusers.utils import SAFETENSORS_WEIGHTS_NAME
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    state = {name: tensor.detach().cpu().contiguous() for name, tensor in trained.items()}
    for name, tensor in module.state_dict().items():
        if name not in state:
            if type(tensor).__name__ == "DTensor":
                raise ValueError(
                    f"cannot export the transformer: {name} is sharded and not trained; "
                    "a full fine-tune trains every weight"
                )
            state[name] = tensor.detach().cpu().contiguous()
    module.save_config(out_dir)
    save_file(state, str(out_dir / SAFETENSORS_WEIGHTS_NAME), metadata={"format": "pt"})
    return out_dir
