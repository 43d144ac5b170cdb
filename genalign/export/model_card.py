"""The model card (`README.md`) written beside an exported LoRA or transformer.

Where it fits: `export/folder.py` writes it into `checkpoint-*/lora/` (and `transformer/`
for full fine-tunes), so the folder a user uploads to the Hugging Face Hub (`genalign export
CHECKPOINT --push-to-hub REPO_ID`) says what it is: YAML front matter in the Hub's model-card
format (`base_model` as a Hub id, `license` of the base model, `pipeline_tag` from the
family's modality, `library_name`, `tags`), then the recipe, the reward and its weights, the
steps trained, the latest evaluation and its before/after sample sheets (copied beside the
card by the export). Pure text from the config and the evaluation history.
"""

from __future__ import annotations

import math

import yaml

from genalign.config.schema import ExperimentConfig


def _format(value: float) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"


def base_model_id(cfg: ExperimentConfig) -> str | None:
    """The base model's Hub id: model.card.base_model (the presets set it), else model.path
    when that is a Hub id; None for a model known only by a local directory."""
    from genalign.hub import is_hub_id

    if cfg.model.card.base_model:
        return cfg.model.card.base_model
    return cfg.model.path if is_hub_id(cfg.model.path) else None


def front_matter(cfg: ExperimentConfig, kind: str, pipeline_tag: str, library: str) -> dict:
    """The card's YAML metadata (Hub model-card keys; absent ones are left out)."""
    card = cfg.model.card
    tags = ["genalign", library, pipeline_tag, cfg.algorithm.name, cfg.model.family]
    if kind == "lora":
        tags.insert(0, "lora")
    front = {"base_model": base_model_id(cfg), "license": card.license, "license_name": card.license_name,
             "license_link": card.license_link, "pipeline_tag": pipeline_tag, "library_name": library, "tags": tags}
    return {key: value for key, value in front.items() if value is not None}


def model_card(cfg: ExperimentConfig, step: int, eval_history: dict, kind: str, weights: str,
               hub_class: str | None = None, pipeline_tag: str = "text-to-image",
               sample_sheets: dict[str, int] | None = None) -> str:
    """README.md text for an export of `kind` ("lora" or "transformer") of the weights named by
    `weights` (e.g. "EMA (decay 0.9)") at training step `step`; `eval_history` is
    `EvalHistory.to_dict()` (steps, reward means, gold means). `hub_class`: the transformers
    class a peft adapter loads onto (token families); None for a diffusers LoRA.
    `pipeline_tag`: the policy's modality. `sample_sheets`: {file name beside the card: the
    evaluation step it shows} (the before/after sheets the export copied), shown in order."""
    algorithm = cfg.algorithm.name
    library = "peft" if hub_class else "diffusers"
    front = front_matter(cfg, kind, pipeline_tag, library)
    base_id = front.get("base_model")
    used = cfg.reward.active_components()
    lines = ["---", yaml.safe_dump(front, sort_keys=False).rstrip(), "---", "",
             f"# {cfg.trainer.output_dir.rstrip('/').split('/')[-1]} ({kind})", "",
             f"{'LoRA adapter' if kind == 'lora' else 'Fine-tuned transformer'} for `{base_id or cfg.model.path}` "
             f"trained with genalign ({algorithm}: reinforcement learning against the reward below).", "",
             "## Training", "",
             f"- recipe: `{cfg.recipe or 'n/a'}`",
             f"- algorithm: `{algorithm}` (KL beta {cfg.algorithm.kl_beta}, clip range {cfg.algorithm.clip_range})",
             f"- reward ({cfg.reward.aggregation}): " + ", ".join(f"`{n}` x {w:g}" for n, w in used.items()),
             f"- steps trained: {step} of {cfg.trainer.num_steps} "
             f"({cfg.rollout.rollout_batch_size} prompts x {cfg.rollout.n} samples per step)",
             f"- seed: {cfg.trainer.seed}",
             f"- weights: {weights}"]
    if kind == "lora":
        lora = cfg.model.lora
        lines.append(f"- LoRA: rank {lora.rank}, alpha {lora.alpha:g}"
                     + (f", targets {', '.join(lora.target_modules)}" if lora.target_modules else ""))
    lines += ["", "## Evaluation", ""]
    steps = [s for s in eval_history.get("steps", []) if s <= step]
    if steps:
        index = len(steps) - 1
        gold = eval_history.get("gold", [])
        lines += [f"Latest evaluation (step {steps[index]}, {cfg.eval.max_prompts} prompts of "
                  f"`{cfg.data.eval_manifest}`, {cfg.eval.num_steps} ODE steps):", "",
                  "| metric | value |", "|---|---|",
                  f"| eval reward (mean) | {_format(eval_history['reward'][index])} |"]
        if index < len(gold):
            lines.append(f"| gold reward {', '.join(cfg.eval.active_gold_rewards())} (mean) | {_format(gold[index])} |")
        if len(steps) > 1:
            lines.append(f"| eval reward at step {steps[0]} (mean) | {_format(eval_history['reward'][0])} |")
    else:
        lines.append("No evaluation ran before this checkpoint.")
    if sample_sheets:
        lines += ["", "Evaluation samples (fixed prompts and seeds, the same for every step):", ""]
        lines += [f"![evaluation samples at step {shown}]({name})" for name, shown in sample_sheets.items()]
    if cfg.model.card.license:
        named = cfg.model.card.license_name or cfg.model.card.license
        link = f" ({cfg.model.card.license_link})" if cfg.model.card.license_link else ""
        lines += ["", "## License", "", f"Trained from `{base_id or cfg.model.path}`, so these weights come under "
                  f"its licence: {named}{link}."]
    lines += ["", "## Use", "", "```python"]
    # the base model by its Hub id where it has one (a run may have loaded a local copy); a hub
    # revision matters where the diffusers weights live on a branch (Cosmos-Predict2.5:
    # revision "diffusers/base/post-trained")
    base = repr(base_id or cfg.model.path) + (f", revision={cfg.model.revision!r}" if cfg.model.revision else "")
    if kind == "lora" and hub_class:
        lines += [f"from peft import PeftModel\nfrom transformers import {hub_class}", "",
                  f"model = {hub_class}.from_pretrained({base})",
                  "model = PeftModel.from_pretrained(model, \"path/to/this/folder\")"]
    elif kind == "lora":
        pipeline = "DiffusionPipeline"
        lines += [f"from diffusers import {pipeline}", "",
                  f"pipe = {pipeline}.from_pretrained({base})",
                  "pipe.load_lora_weights(\"path/to/this/folder\")"]
    else:
        lines += ["from diffusers import AutoModel, DiffusionPipeline", "",
                  "transformer = AutoModel.from_pretrained(\"path/to/this/folder\")",
                  f"pipe = DiffusionPipeline.from_pretrained({base}, transformer=transformer)"]
    lines += ["```", ""]
    return "\n".join(lines)
