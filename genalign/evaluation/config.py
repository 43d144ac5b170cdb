"""`EvalConfig`: the fixed evaluation protocol (ODE sampler, fixed prompts and seeds)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class EvalConfig:
    every: int = 60
    """Evaluate every this many training steps (0 disables periodic evaluation)."""
    at_start: bool = True
    """Also evaluate before the first update (step 0), the baseline to compare against."""
    num_steps: int = 40
    """Denoising steps of the evaluation sampler (deterministic ODE)."""
    guidance_scale: float | None = None
    """CFG scale for evaluation; null = the rollout's guidance_scale."""
    max_prompts: int = 16
    """Evaluate the first max_prompts prompts of data.eval_manifest."""
    samples_per_prompt: int = 1
    """Images per evaluation prompt, each from its own fixed seed."""
    seed: int = 20260504
    """Seed of the evaluation noise; fixed so evaluations are comparable across steps."""
    use_ema: bool = True
    """Evaluate with the EMA weights when EMA is enabled."""
    batch_size: int = 8
    """Samples per denoiser forward during evaluation."""
    height: int | None = None
    """Evaluation image height in pixels; null = rollout.height (a benchmark protocol may set it)."""
    width: int | None = None
    """Evaluation image width in pixels; null = rollout.width."""
    noise_seeds: str = "per_sample"
    """How evaluation samples get their noise seeds: "per_sample" (sample i of the list: its own
    seed from eval.seed) or "per_image_index" (image k of every prompt shares one seed, as GenEval's
    generation script reseeds before each prompt)."""
    gold_rewards: dict[str, float] = field(default_factory=dict)
    """Eval-only rewards {name: weight} scored next to the training reward (reward-hacking monitor)."""
    quality_metrics: list[str] = field(default_factory=list)
    """Eval-only image-quality measures (registered scorer names, e.g. toy_off_shape_fraction),
    each logged as quality_<name>_mean/std/min/max; never summed into a reward."""
    divergence_window: int = 3
    """Flag divergence when over the last k evaluations the training reward rose by more than 2
    standard errors of the difference while gold did not (evaluation/evaluator.gold_divergence)."""
