"""Fixed evaluation: the same prompts and seeds every time, ODE sampler, gold rewards.

Where it fits: step 7 of the loop. Every `eval.every` steps (and at step 0 and the last
step) the trainer calls `evaluate`, which samples the first `eval.max_prompts` prompts of
`data.eval_manifest` with the deterministic sampler, scores them with the training reward
and with the eval-only gold rewards, writes a row to `eval_metrics.csv` and
`eval_epoch_<step>/contact_sheet.png` (video: frame strips and `preview.gif`), and checks
the reward-hacking monitor: the training reward rising over the last `divergence_window`
evaluations by more than its noise (DIVERGENCE_Z standard errors) while the gold reward does not.
"""

from __future__ import annotations

import logging
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from tqdm import tqdm

from genalign.data.prompts import PromptExample
from genalign.data.sampler import PromptGroupBatch, sample_seed
from genalign.data.source_images import load_sources
from genalign.evaluation.config import EvalConfig
from genalign.evaluation.contact_sheet import (
    make_contact_sheet,
    make_edit_sheet,
    make_frame_strip_sheet,
    save_animated_preview,
    save_image,
)
from genalign.evaluation.sharded import Shard, evaluate_samples
from genalign.models.base import Policy
from genalign.rewards.scores import summary
from genalign.rollout.batch import TrajectoryBatch, cat_batches
from genalign.rollout.collector import SamplingSpec, generate_chunks

if TYPE_CHECKING:
    from PIL.Image import Image

log = logging.getLogger(__name__)

DIVERGENCE_Z = 2.0
"""How many standard errors of a difference of two evaluation means count as a real change
(about 95 % two-sided): a smaller move is evaluation noise and fires nothing."""


def standard_error(values: torch.Tensor) -> float:
    """Standard error of the mean of per-sample scores [N]: std (ddof 1) / sqrt(N); 0 for N < 2."""
    if values.numel() < 2:
        return 0.0
    return float(values.float().std() / math.sqrt(values.numel()))


@dataclass
class EvalHistory:
    steps: list[int] = field(default_factory=list)
    reward: list[float] = field(default_factory=list)
    gold: list[float] = field(default_factory=list)
    reward_se: list[float] = field(default_factory=list)
    """Standard error of each evaluation's reward mean (the monitor's noise scale)."""
    gold_se: list[float] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "steps": self.steps,
            "reward": self.reward,
            "gold": self.gold,
            "reward_se": self.reward_se,
            "gold_se": self.gold_se,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "EvalHistory":
        reward, gold = list(data["reward"]), list(data["gold"])
        if "reward_se" not in data:  # a checkpoint from before the monitor kept standard errors
            log.warning(
                "eval history without standard errors: the reward-hacking monitor ignores the %d earlier "
                "evaluations (their noise is unknown)",
                len(reward),
            )
        return cls(
            list(data["steps"]),
            reward,
            gold,
            list(data.get("reward_se", [math.nan] * len(reward))),
            list(data.get("gold_se", [math.nan] * len(gold))),
        )


def gold_divergence(
    reward: list[float],
    gold: list[float],
    window: int,
    reward_se: list[float],
    gold_se: list[float],
    z: float = DIVERGENCE_Z,
) -> bool:
    """True when, over the last `window` evaluations, the training reward rose by more than
    z standard errors of the difference while the gold reward rose by no more than its own
    (flat, down, or up by less than its noise). The standard error of a difference of two
    means is sqrt(se_first² + se_last²) (independent samples; the fixed eval seeds pair them,
    which makes the true one smaller, so this errs towards not firing on noise). An evaluation
    without a known standard error (NaN) never counts."""
    if len(reward) < window or len(gold) < window or window < 2:
        return False
    ses = (reward_se[-1], reward_se[-window], gold_se[-1], gold_se[-window])
    if any(math.isnan(se) for se in ses):
        return False
    reward_tolerance = z * math.hypot(ses[0], ses[1])
    gold_tolerance = z * math.hypot(ses[2], ses[3])
    reward_gain = reward[-1] - reward[-window]
    gold_gain = gold[-1] - gold[-window]
    return reward_gain > reward_tolerance and gold_gain <= gold_tolerance


NOISE_SEEDS = ("per_sample", "per_image_index")


def evaluation_samples(examples: list[PromptExample], cfg: EvalConfig) -> PromptGroupBatch:
    """The evaluation's samples, prompt-major: the first `cfg.max_prompts` prompts, each
    `cfg.samples_per_prompt` times. Sample i's seed is a pure function of eval.seed and i
    ("per_sample"), or of eval.seed and its image index within its prompt ("per_image_index":
    image k of every prompt starts from the same noise, as GenEval's generation script)."""
    if not examples:
        raise ValueError("eval: data.eval_manifest has no prompts")
    if cfg.noise_seeds not in NOISE_SEEDS:
        raise ValueError(f"eval.noise_seeds={cfg.noise_seeds!r}: choose one of {', '.join(NOISE_SEEDS)}")
    chosen = examples[: cfg.max_prompts]
    repeats = cfg.samples_per_prompt
    prompts = [ex.prompt for ex in chosen for _ in range(repeats)]
    keys = range(len(prompts)) if cfg.noise_seeds == "per_sample" else [k for _ in chosen for k in range(repeats)]
    return PromptGroupBatch(
        prompts=prompts,
        prompt_ids=torch.tensor([ex.prompt_id for ex in chosen for _ in range(repeats)]),
        group_ids=torch.arange(len(chosen)).repeat_interleave(repeats),
        seeds=torch.tensor([sample_seed(cfg.seed, 0, i) for i in keys]),
        metadata=[dict(ex.metadata) for ex in chosen for _ in range(repeats)],
    )


class Evaluator:
    def __init__(
        self,
        cfg: EvalConfig,
        examples: list[PromptExample],
        spec: SamplingSpec,
        reward_runtime,
        gold_runtime,
        output_dir: Path | None,
        sink,
        quality_runtime=None,
        progress_bar: bool = False,
        shard: Shard = Shard(),
    ):
        """`output_dir=None` writes no contact sheets (ranks other than 0 evaluate their shard
        and send it to rank 0, which alone writes). `quality_runtime` scores
        `eval.quality_metrics` (None: none). `progress_bar`: tqdm over sampling chunks when
        stderr is a TTY. `shard`: this rank's place (evaluation/sharded.py)."""
        self.cfg = cfg
        self.spec = spec
        self.reward_runtime = reward_runtime
        self.gold_runtime = gold_runtime
        self.quality_runtime = quality_runtime
        self.output_dir = Path(output_dir) if output_dir is not None else None
        self.sink = sink
        self.progress_bar = progress_bar
        self.shard = shard
        self.history = EvalHistory()
        self.groups = evaluation_samples(examples, cfg)

    def close(self) -> None:
        """Release what the evaluator built: its sink and the gold and quality runtimes (their
        Ray actors, threads or HTTP sessions). The training reward runtime is the caller's."""
        self.sink.close()
        for runtime in (self.gold_runtime, self.quality_runtime):
            if runtime is not None:
                runtime.close()

    def due(self, step: int, last_step: int) -> bool:
        if step == 0:
            return self.cfg.at_start
        return step == last_step or (self.cfg.every > 0 and step % self.cfg.every == 0)

    @staticmethod
    def write_sheets(
        directory: Path,
        media: torch.Tensor,
        prompts: list[str],
        rewards: torch.Tensor,
        sources: torch.Tensor | None = None,
    ) -> "Image":
        """contact_sheet.png for images [B, 3, H, W] (with `sources` [B, S, 3, H, W], the source
        images an editing prompt carries: one row per sample, source -> result); for video
        [B, F, 3, H, W] a frame-strip contact_sheet.png (one row of frames per sample, after its
        sources for an image-to-video prompt) and an animated preview.gif. Returns the sheet,
        for the trackers."""
        captions = [f"{p} | r={r:.2f}" for p, r in zip(prompts, rewards.tolist())]
        if sources is not None and media.dim() == 4:
            sheet = make_edit_sheet(sources, media, captions)
        elif media.dim() == 5:
            sheet = make_frame_strip_sheet(media, captions, sources=sources)
            save_animated_preview(directory / "preview.gif", media)
        else:
            sheet = make_contact_sheet(media, captions)
        save_image(directory / "contact_sheet.png", sheet)
        return sheet

    def runtimes(self) -> dict:
        """The scorer runtimes of this evaluation by group: the training reward, gold, quality."""
        named = {"eval_reward": self.reward_runtime, "gold": self.gold_runtime, "quality": self.quality_runtime}
        return {name: runtime for name, runtime in named.items() if runtime is not None}

    def sampler(self, policy: Policy, step: int):
        """The in-process sampler of a shard: its chunks of eval.batch_size, one tqdm bar a job."""

        def sample(samples: PromptGroupBatch, positions: list[int]) -> TrajectoryBatch:
            chunks = tqdm(
                generate_chunks(policy, samples, self.spec, positions),
                desc=f"eval step {step}",
                leave=False,
                total=math.ceil(len(positions) / self.spec.chunk_size),
                disable=not (self.progress_bar and sys.stderr.isatty()),
            )
            return cat_batches(list(chunks))

        return sample

    @torch.no_grad()
    def evaluate(self, policy: Policy, step: int) -> dict[str, float]:
        """Sample and score the fixed samples (sharded over ranks); rank 0 returns the metrics
        row and writes it, the others return {}."""
        outcome = evaluate_samples(self.sampler(policy, step), self.groups, self.runtimes(), self.shard)
        if outcome.scores is None:
            return {}
        return self.record(step, outcome.samples, outcome.images, outcome.scores)

    def record(self, step: int, samples: PromptGroupBatch, images: torch.Tensor, all_scores: dict) -> dict[str, float]:
        """The metrics row of an evaluation's gathered scores; the monitor, the sheets, the sink."""
        scores = all_scores["eval_reward"]
        metrics = scores.stats(prefix="eval_reward")
        reward_mean = scores.total.mean().item()
        metrics["eval_reward_se"] = standard_error(scores.total)
        gold_mean = float("nan")
        if "gold" in all_scores:
            gold = all_scores["gold"]
            metrics.update(gold.stats(prefix="gold"))
            gold_mean = gold.total.mean().item()
            metrics["gold_se"] = standard_error(gold.total)
            self.history.gold.append(gold_mean)
            self.history.gold_se.append(metrics["gold_se"])
        if "quality" in all_scores:
            quality = all_scores["quality"]
            for name, values in quality.components.items():  # each measure alone: their sum means nothing
                metrics.update(summary(values, f"quality_{name}"))
        self.history.steps.append(step)
        self.history.reward.append(reward_mean)
        self.history.reward_se.append(metrics["eval_reward_se"])
        h = self.history
        diverged = "gold" in all_scores and gold_divergence(
            h.reward, h.gold, self.cfg.divergence_window, h.reward_se, h.gold_se
        )
        if "gold" in all_scores:
            metrics["gold_divergence"] = float(diverged)
        if diverged:
            log.warning(
                "reward-hacking monitor: eval reward rose %.3f -> %.3f over the last %d evaluations "
                "while the gold reward went %.3f -> %.3f; the gain may be reward hacking",
                self.history.reward[-self.cfg.divergence_window],
                reward_mean,
                self.cfg.divergence_window,
                self.history.gold[-self.cfg.divergence_window],
                gold_mean,
            )
        if self.output_dir is not None:
            sheet = self.write_sheets(
                self.output_dir / f"eval_epoch_{step}",
                images,
                samples.prompts,
                scores.total,
                load_sources(samples.metadata),  # an editing evaluation's sources, None for text prompts
            )
            self.sink.log_image(step, "contact_sheet", sheet)  # trackers show it; the CSV ignores it
        self.sink.log(step, metrics)
        return metrics
