"""The model card (`README.md`) written beside an exported LoRA or transformer.

Where it fits: `training/export.py` writes it into `checkpoint-*/lora/` (and `transformer/`
for full fine-tunes), so the folder a user uploads to the Hugging Face Hub says what it is:
YAML front matter in the Hub's model-card format (`base_model`, `library_name: diffusers`,
`tags`), then the recipe, the reward and its weights, the steps trained and the latest
evaluation. Pure text from the config and the evaluation history.
"""

from __future__ import annotations

import math

import yaml

from genalign.config.schema import ExperimentConfig


def _format(value: float) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"


def model_card(cfg: ExperimentConfig, step: int, eval_history: dict, kind: str, weights: str,
               hub_class: str | None = None) -> str:
    """README.md text for an export of `kind` ("lora" or "transformer") of the weights named by
    `weights` (e.g. "EMA (decay 0.9)") at training step `step`; `eval_history` is
    `EvalHistory.to_dict()` (steps, reward means, gold means). `hub_class`: the transformers
    class a peft adapter loads onto (token families); None for a diffusers LoRA."""
    algorithm = cfg.algorithm.name
    library = "peft" if hub_class else "diffusers"
    tags = ["genalign", library, "text-to-image", algorithm, f"{cfg.model.family}"]
    if kind == "lora":
        tags.insert(0, "lora")
    front = {"base_model": cfg.model.path, "library_name": library, "tags": tags}
    used = {name: weight for name, weight in cfg.reward.components.items() if weight}
    lines = ["---", yaml.safe_dump(front, sort_keys=False).rstrip(), "---", "",
             f"# {cfg.trainer.output_dir.rstrip('/').split('/')[-1]} ({kind})", "",
             f"{'LoRA adapter' if kind == 'lora' else 'Fine-tuned transformer'} for `{cfg.model.path}` "
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
            lines.append(f"| gold reward {', '.join(cfg.eval.gold_rewards)} (mean) | {_format(gold[index])} |")
        if len(steps) > 1:
            lines.append(f"| eval reward at step {steps[0]} (mean) | {_format(eval_history['reward'][0])} |")
    else:
        lines.append("No evaluation ran before this checkpoint.")
    lines += ["", "## Use", "", "```python"]
    # the base model as it was loaded: a hub revision matters where the diffusers weights live on
    # a branch (Cosmos-Predict2.5: revision "diffusers/base/post-trained")
    base = repr(cfg.model.path) + (f", revision={cfg.model.revision!r}" if cfg.model.revision else "")
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
