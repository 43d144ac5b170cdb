"""The model card (`README.md`) written beside every exported LoRA or transformer.

Where it fits: `export/folder.py` writes it into `checkpoint-*/lora/` and `lora_live/` (and
`transformer/` for full fine-tunes), so the folder a user uploads to the Hugging Face Hub
(`genalign export CHECKPOINT --push-to-hub REPO_ID`, `trainer.push_to_hub`) says what it is:
YAML front matter in the Hub's model-card format (`base_model`, `license`, `pipeline_tag` from
the family's modality, `library_name`, `tags`, a `widget` gallery of the latest evaluation
sheet), then the recipe, the reward and its weights, the steps trained, the latest evaluation
and its before/after sample sheets (copied beside the card by the export), and a usage
snippet that runs as printed (`tests/integration/test_trackers.py` runs it). Pure text from
the config, the evaluation history and where the folder is.

Never guessed: `base_model` is model.path when that is a Hub id, else model.card.base_model,
else absent; the licence keys appear only when model.card.describes is that base model (or
unset), so a run that loaded a local model is not carded with a preset's Hub id or licence.
"""

from __future__ import annotations

import math

import yaml

from genalign.config.schema import ExperimentConfig
from genalign.hub import is_hub_id
from genalign.models.spec import family_spec
from genalign.weights.lora import pipeline_loads_lora

EXPORT_KINDS = {
    "lora": "LoRA adapter",
    "transformer": "Fine-tuned transformer",
    "model": "Fine-tuned model (any LoRA merged into it, in the checkpoint's own layout)",
}
"""What a card calls the export of each kind."""


def _format(value: float) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"


def base_model_id(cfg: ExperimentConfig) -> str | None:
    """The base model's Hub id: model.path when it is one, else model.card.base_model (a
    local copy of a Hub model, named by the user); None for a model known only by a local
    directory."""
    if is_hub_id(cfg.model.path):
        return cfg.model.path
    return cfg.model.card.base_model


def licence_applies(cfg: ExperimentConfig) -> bool:
    """Whether model.card's licence keys are about the model this run trains from."""
    card = cfg.model.card
    return bool(card.license) and (card.describes is None or card.describes == base_model_id(cfg))


def front_matter(
    cfg: ExperimentConfig, kind: str, pipeline_tag: str, library: str, widget: list[dict] | None = None
) -> dict:
    """The card's YAML metadata (Hub model-card keys; absent ones are left out)."""
    card = cfg.model.card
    tags = ["genalign", library, pipeline_tag, cfg.algorithm.name, cfg.model.family]
    if kind == "lora":
        tags.insert(0, "lora")
    licence = (
        {"license": card.license, "license_name": card.license_name, "license_link": card.license_link}
        if licence_applies(cfg)
        else {}
    )
    front = {
        "base_model": base_model_id(cfg),
        **licence,
        "pipeline_tag": pipeline_tag,
        "library_name": library,
        "tags": tags,
        "widget": widget or None,
    }
    return {key: value for key, value in front.items() if value is not None}


WIDGET_TEXT_CHARS = 200
"""The widget's caption: the evaluation prompts, cut to about this many characters."""


def widget_gallery(sample_sheets: dict[str, int] | None, eval_prompts: list[str] | None) -> list[dict] | None:
    """The Hub's `widget:` gallery: the latest evaluation sheet, captioned with its prompts."""
    if not sample_sheets:
        return None
    name, step = max(sample_sheets.items(), key=lambda item: item[1])
    prompts = list(dict.fromkeys(eval_prompts or []))
    text = "; ".join(prompts)
    if len(text) > WIDGET_TEXT_CHARS:
        text = text[:WIDGET_TEXT_CHARS].rsplit("; ", 1)[0] + "; ..."
    return [{"text": text or f"evaluation samples at step {step}", "output": {"url": name}}]


def usage_snippet(
    cfg: ExperimentConfig,
    kind: str,
    hub_class: str | None,
    pipeline_tag: str,
    location: str,
    eval_prompts: list[str] | None,
    components: tuple[str, ...] | None = None,
) -> list[str]:
    """Python that loads this folder (`location`: its path or Hub repo) onto the base model
    and, for a diffusers pipeline, samples the first evaluation prompt as evaluation did.
    `components`: the pipeline components of a two-expert denoiser this folder holds (a LoRA:
    one subfolder each, `transformer_2`'s loaded with `load_into_transformer_2`; a transformer:
    the one component it replaces); None: the folder is the one `transformer`'s."""
    from pathlib import Path

    base_id = base_model_id(cfg)
    # the base by its Hub id where it has one (the run may have loaded a local copy), else the
    # directory it loaded; a revision matters where the diffusers weights live on a branch
    # (Cosmos-Predict2.5: "diffusers/base/post-trained")
    base_path = base_id or str(Path(cfg.model.path).expanduser().resolve())
    base = repr(base_path) + (f", revision={cfg.model.revision!r}" if cfg.model.revision else "")
    # the compute dtype the run used; diffusers >= 0.41 and transformers 5 call it dtype (torch_dtype is deprecated)
    dtype = f"dtype=torch.{cfg.model.dtype}"
    lines = ["import torch"]
    if kind == "lora" and hub_class:
        return lines + [
            f"from peft import PeftModel\nfrom transformers import {hub_class}",
            "",
            f"model = {hub_class}.from_pretrained({base}, {dtype})",
            f"model = PeftModel.from_pretrained(model, {location!r})",
        ]
    lines += [
        "from diffusers import AutoModel, DiffusionPipeline"
        if kind != "lora"
        else "from diffusers import DiffusionPipeline",
        "",
    ]
    if kind == "lora":
        lines.append(f"pipe = DiffusionPipeline.from_pretrained({base}, {dtype})")
        if components is None and not pipeline_loads_lora(
            family_spec(cfg.model.family, cfg.model.allow_import).pipeline_class or ""
        ):
            lines.append(
                f"pipe.transformer.load_lora_adapter({location!r}, use_safetensors=True)"
            )  # a pipeline without a LoRA loader
        elif components is None:
            lines.append(f"pipe.load_lora_weights({location!r})")
        for name in components or ():  # diffusers' Wan loader: transformer_2 takes a transformer-keyed file
            into = ", load_into_transformer_2=True" if name == "transformer_2" else ""
            lines.append(f"pipe.load_lora_weights({location + '/' + name!r}{into})")
    else:
        name = (components or ("transformer",))[0]
        lines += [
            f"{name} = AutoModel.from_pretrained({location!r}, {dtype})",
            f"pipe = DiffusionPipeline.from_pretrained({base}, {name}={name}, {dtype})",
        ]
    prompt = (eval_prompts or ["a photo"])[0]
    size = f"height={cfg.rollout.height}, width={cfg.rollout.width}, num_inference_steps={cfg.eval.num_steps}"
    if pipeline_tag == "text-to-video":
        lines.append(f"video = pipe({prompt!r}, {size}, num_frames={cfg.model.num_frames}).frames[0]")
    elif pipeline_tag == "image-to-image":  # an editing family: the instruction and the picture it edits
        lines.append("from diffusers.utils import load_image")
        lines.append(f"image = pipe(image=load_image('source.png'), prompt={prompt!r}, {size}).images[0]")
    else:
        lines.append(f"image = pipe({prompt!r}, {size}).images[0]")
    return lines


def model_card(
    cfg: ExperimentConfig,
    step: int,
    eval_history: dict,
    kind: str,
    weights: str,
    hub_class: str | None = None,
    pipeline_tag: str = "text-to-image",
    sample_sheets: dict[str, int] | None = None,
    location: str = "path/to/this/folder",
    eval_prompts: list[str] | None = None,
    components: tuple[str, ...] | None = None,
    usage: list[str] | None = None,
) -> str:
    """README.md text for an export of `kind` ("lora", "transformer" or "model": a whole model in
    its family's own checkpoint layout, whose loading code `usage` gives) of the weights named by
    `weights` (e.g. "EMA (decay 0.9)") at training step `step`; `eval_history` is
    `EvalHistory.to_dict()` (steps, reward means, gold means). `hub_class`: the transformers
    class a peft adapter loads onto (token families); None for a diffusers LoRA.
    `pipeline_tag`: the policy's modality. `sample_sheets`: {file name beside the card: the
    evaluation step it shows} (the before/after sheets the export copied), shown in order.
    `location`: where the folder is (its absolute path, or the Hub repo it is pushed to), for
    the usage snippet. `eval_prompts`: the evaluation prompts (the widget's caption, the
    snippet's prompt). `components`: what of a two-expert denoiser the folder holds (`usage_snippet`)."""
    algorithm = cfg.algorithm.name
    # a family's own layout is read by its authors' transformers `PreTrainedModel` (NextStep-1's)
    library = "peft" if hub_class else "transformers" if usage else "diffusers"
    front = front_matter(cfg, kind, pipeline_tag, library, widget_gallery(sample_sheets, eval_prompts))
    base_id = front.get("base_model")
    used = cfg.reward.active_components()
    lines = [
        "---",
        yaml.safe_dump(front, sort_keys=False, allow_unicode=True).rstrip(),
        "---",
        "",
        f"# {cfg.trainer.output_dir.rstrip('/').split('/')[-1]} ({kind})",
        "",
        f"{EXPORT_KINDS[kind]} for `{base_id or cfg.model.path}` "
        f"trained with genalign ({algorithm}: reinforcement learning against the reward below).",
        "",
        "## Training",
        "",
        f"- recipe: `{cfg.recipe or 'n/a'}`",
        f"- algorithm: `{algorithm}` (KL beta {cfg.algorithm.kl_beta}, clip range {cfg.algorithm.clip_range})",
        f"- reward ({cfg.reward.aggregation}): " + ", ".join(f"`{n}` x {w:g}" for n, w in used.items()),
        f"- steps trained: {step} of {cfg.trainer.num_steps} "
        f"({cfg.rollout.rollout_batch_size} prompts x {cfg.rollout.n} samples per step)",
        f"- seed: {cfg.trainer.seed}",
        f"- weights: {weights}",
    ]
    if kind == "lora":
        lora = cfg.model.lora
        lines.append(
            f"- LoRA: rank {lora.rank}, alpha {lora.alpha:g}"
            + (f", targets {', '.join(lora.target_modules)}" if lora.target_modules else "")
        )
    lines += ["", "## Evaluation", ""]
    steps = [s for s in eval_history.get("steps", []) if s <= step]
    if steps:
        index = len(steps) - 1
        gold = eval_history.get("gold", [])
        lines += [
            f"Latest evaluation (step {steps[index]}, {cfg.eval.max_prompts} prompts of "
            f"`{cfg.data.eval_manifest}`, {cfg.eval.num_steps} ODE steps):",
            "",
            "| metric | value |",
            "|---|---|",
            f"| eval reward (mean) | {_format(eval_history['reward'][index])} |",
        ]
        if index < len(gold):
            lines.append(f"| gold reward {', '.join(cfg.eval.active_gold_rewards())} (mean) | {_format(gold[index])} |")
        if len(steps) > 1:
            lines.append(f"| eval reward at step {steps[0]} (mean) | {_format(eval_history['reward'][0])} |")
    else:
        lines.append("No evaluation ran before this checkpoint.")
    if sample_sheets:
        lines += ["", "Evaluation samples (fixed prompts and seeds, the same for every step):", ""]
        lines += [f"![evaluation samples at step {shown}]({name})" for name, shown in sample_sheets.items()]
    if licence_applies(cfg):
        card = cfg.model.card
        named = card.license_name or card.license
        link = f" ({card.license_link})" if card.license_link else ""
        lines += [
            "",
            "## License",
            "",
            f"Trained from `{base_id or cfg.model.path}`, so these weights come under its licence: {named}{link}.",
        ]
    lines += [
        "",
        "## Use",
        "",
        "```python",
        *(usage or usage_snippet(cfg, kind, hub_class, pipeline_tag, location, eval_prompts, components)),
        "```",
        "",
    ]
    if not base_id:
        lines.insert(
            -1,
            "The base model is the local directory the run loaded (it has no Hub id in this config: "
            "set model.card.base_model to the Hub id of a local copy).\n",
        )
    return "\n".join(lines)
