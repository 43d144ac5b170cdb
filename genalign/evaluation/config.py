"""`EvalConfig`: the fixed evaluation protocol (ODE sampler, fixed prompts and seeds)."""

from __future__ import annotations

from dataclasses import dataclass, field

from genalign.config.checks import non_negative_problems, positive_problems
from genalign.rewards.config import active_weights


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

    def active_gold_rewards(self) -> dict[str, float]:
        """eval.gold_rewards without the ones weighted 0 (`rewards/config.py:active_weights`):
        none left, and gold monitoring is off."""
        return active_weights(self.gold_rewards)

    def problems(self) -> list[str]:
        """Sizes, cadence and CFG scale of the evaluation (the gold rewards' and quality
        metrics' names against the reward registry are preflight's)."""
        problems = positive_problems(
            {
                "eval.num_steps": self.num_steps,
                "eval.max_prompts": self.max_prompts,
                "eval.batch_size": self.batch_size,
                "eval.samples_per_prompt": self.samples_per_prompt,
            }
        )
        problems += non_negative_problems({"eval.every": self.every}, " (0 disables it)")
        if self.guidance_scale is not None and self.guidance_scale < 1:
            problems.append(
                f"eval.guidance_scale must be >= 1 (1.0 turns CFG off) or null (the rollout's), "
                f"got {self.guidance_scale}"
            )
        return problems
