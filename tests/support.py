"""Shared test builders (on sys.path via pytest `pythonpath = ["tests"]`).

`LinearPolicy`: a tiny linear flow policy that satisfies `FlowPolicy`, so the sampler,
replay, loss and update code can be tested in milliseconds without diffusers; integration
tests repeat the important checks on a tiny SD3 pipeline. `make_batch`: a random
`TrajectoryBatch`.
"""

from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
from pathlib import Path

import torch

from genalign.models.base import Condition, guided_velocity
from genalign.models.spec import FamilySpec
from genalign.rollout.batch import TrajectoryBatch

# ------------------------------------------------------------------ reordered float tolerances
FLOAT32_EPS = torch.finfo(torch.float32).eps
"""u = 2^-23: the float32 unit of rounding (relative spacing of float32 numbers)."""
REORDER_SAFETY = 4.0
"""λ of the probabilistic rounding bound: the error of a length-n sum of terms bounded by s
exceeds λ·sqrt(n)·u·s with probability at most ~2·exp(−λ²/2) (Higham & Mary 2019, rounding
errors as independent zero-mean variables); λ = 4 puts that below 1e-3 per reduction."""


def reorder_tolerance(scale: float, length: int, depth: int = 1, gain: float = 1.0) -> float:
    """Absolute tolerance between two float32 computations of the same math that differ only in
    how their reductions are grouped or ordered (batch size, chunking, one joint forward vs
    two, rank count, our code path vs a pipeline's), derived from the rounding-error bound:

        tol = λ · u · sqrt(length) · depth · scale · gain

    `length`: the longest reduction (a GEMM's inner dimension, tokens attended over, samples
    summed); `depth`: chained reductions (layers, sampler steps), whose errors add; `scale`: the
    magnitude of the values reduced (e.g. max |x̂0| of the network output); `gain`: the
    Lipschitz factor of what follows the reductions (CFG's |1 − w| + |w|, the toy velocity's
    1/σ). Worst-case (non-probabilistic) bounds grow with length instead of sqrt(length)."""
    return REORDER_SAFETY * FLOAT32_EPS * math.sqrt(length) * depth * scale * gain


TINY_REDUCTION = 512
"""An upper bound on the longest reduction in the tiny test transformers (genalign.models.tiny_random:
at most 256 image tokens plus the text tokens attended over; hidden and MLP widths <= 128;
a weight gradient sums over 2 samples x 256 tokens)."""
TINY_DEPTH = 4
"""An upper bound on their transformer blocks (2 joint + up to 2 single): chained reductions."""
HUNYUAN_VIDEO15_REDUCTION = 2048
"""An upper bound on the longest reduction in the tiny HunyuanVideo 1.5 transformers (T2V and I2V):
the byT5 projection's hidden width 2048 (diffusers fixes it), attention over 729 image + 256
glyph + 48 text + 8 video tokens."""
HUNYUAN_VIDEO15_DEPTH = 4
"""Their chained reductions: 1 refiner + 2 dual-stream blocks + the output projection."""


def assert_close_reordered(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    length: int,
    depth: int = 1,
    gain: float = 1.0,
    scale: float | None = None,
) -> None:
    """`torch.testing.assert_close` with atol = `reorder_tolerance` (rtol 0); `scale` defaults to
    the larger max |value| of the two tensors."""
    if scale is None:
        scale = max(float(actual.detach().abs().max()), float(expected.detach().abs().max()))
    atol = reorder_tolerance(scale, length, depth, gain)
    torch.testing.assert_close(actual, expected, atol=atol, rtol=0)


# ------------------------------------------------- comparing runs across an AdamW step
# The reorder bound holds for values computed by the same math: a forward, a gradient. It does
# not carry through an Adam step. AdamW's first step moves a weight by lr·u(g) with
#     u(g) = m̂ / (sqrt(v̂) + ε) = g / (|g| + ε)      (step 1: m̂ = g, v̂ = g² after bias correction),
# whose slope u'(g) = ε / (|g| + ε)² is 1/ε = 1e8 at g = 0: a weight whose gradient cancels to
# near zero (a LoRA B entry, a GRPO gradient Σ A_i ∇log p_i with Σ A_i = 0 per group) turns a
# gradient rounding of 1e-12 into a weight difference of lr·1e-4. Relative to the weights that
# is no rounding bound at all: one CPU family passes, another fails. So runs that differ only in
# how their reductions are grouped (ranks, batch splits) are compared where a bound holds:
#   1. the gradients, read back from the first moments (after one step exp_avg = (1 − β1)·g, one
#      rounding of g), with the reorder bound τ relative to the largest |g| of the tensor;
#   2. the weights, with the bound that follows the update: by the mean value theorem, with
#      |g_a − g_e| ≤ τ,  |u(g_a) − u(g_e)| ≤ τ·ε / (max(|g_e| − τ, 0) + ε)²,  and never more than 2
#      (|u| < 1); plus each run's own rounding of the step — about 8 float32 operations on the
#      moments (≤ 4u relative to the update, u = FLOAT32_EPS) and the final addition (≤ u/2 of the
#      weight) — once per run:
#          |w_a − w_e| ≤ lr·min(2, τ·ε / (max(|g_e| − τ, 0) + ε)²) + u·(8·lr + 2·max(|w_a|, |w_e|)).
# Where |g| ≫ τ, ε the bound is a few ulps; where the gradient is within τ of zero it is up to 2·lr,
# which is what AdamW makes of a gradient that is rounding noise. Weight decay multiplies both
# runs' identical initial weights by the same factor and drops out.


def adamw_first_step(
    checkpoint: Path, names: list[str]
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict]:
    """(trained weights, the gradients of the run's one AdamW step, the optimizer's param group)
    from a checkpoint written after exactly one optimizer step. `names`: the trained tensors'
    names in the optimizer's order (`trained_parameter_names`), since optimizer.safetensors keys
    its moments by parameter index."""
    import json

    from safetensors.torch import load_file

    meta = json.loads((checkpoint / "optimizer.json").read_text())
    [group] = meta["param_groups"]
    moments = load_file(str(checkpoint / "optimizer.safetensors"))
    beta1 = group["betas"][0]
    gradients = {}
    for index, name in enumerate(names):
        assert float(moments[f"state/{index}/step"]) == 1, f"{checkpoint}: {name} took more than one optimizer step"
        gradients[name] = moments[f"state/{index}/exp_avg"] / (1 - beta1)
    return load_file(str(checkpoint / "trainable.safetensors")), gradients, group


def assert_same_first_adamw_step(
    actual: Path, expected: Path, names: list[str], *, length: int, depth: int = 1
) -> None:
    """Two checkpoints after one AdamW step of the same math whose reductions were grouped
    differently (`length`, `depth` as for `reorder_tolerance`): their gradients agree to the
    reorder bound τ, and their weights to the bound that follows the update (derivation above)."""
    weights_a, gradients_a, group = adamw_first_step(actual, names)
    weights_e, gradients_e, _ = adamw_first_step(expected, names)
    assert sorted(weights_a) == sorted(weights_e) == sorted(names)
    lr, eps = group["lr"], group["eps"]
    for name in names:
        g_a, g_e = gradients_a[name], gradients_e[name]
        tau = reorder_tolerance(max(float(g_a.abs().max()), float(g_e.abs().max())), length, depth)
        torch.testing.assert_close(g_a, g_e, atol=tau, rtol=0, msg=lambda m: f"gradient of {name}: {m}")
        w_a, w_e = weights_a[name], weights_e[name]
        slope = tau * eps / ((g_e.abs() - tau).clamp(min=0) + eps) ** 2  # bound on |Δu| from |Δg| ≤ τ
        bound = lr * slope.clamp(max=2.0) + FLOAT32_EPS * (8 * lr + 2 * torch.maximum(w_a.abs(), w_e.abs()))
        excess = (w_a - w_e).abs() - bound
        assert excess.max() <= 0, (
            f"{name}: weights differ by {float((w_a - w_e).abs().max()):.3g}, beyond the "
            f"bound that follows the AdamW step at element {int(excess.argmax())}"
        )


def trained_parameter_names(recipe: str, overrides: list[str]) -> list[str]:
    """The trained tensors' names in the order the trainer hands them to the optimizer
    (`setup.named_trainable_parameters` of the policy the config builds)."""
    from genalign.config.loader import compose_config
    from genalign.training import setup

    policy = setup.build_policy(compose_config(recipe, overrides))
    return list(setup.named_trainable_parameters(policy.transformer))


class LinearVelocityModel(torch.nn.Module):
    """v = W x + U c + b*sigma, on flattened latents; cheap and fully differentiable."""

    def __init__(self, latent_dim: int, embed_dim: int):
        super().__init__()
        self.latent = torch.nn.Linear(latent_dim, latent_dim)
        self.text = torch.nn.Linear(embed_dim, latent_dim, bias=False)
        self.sigma = torch.nn.Parameter(torch.zeros(latent_dim))

    def forward(self, latents, sigma, embeds):
        flat = latents.flatten(1)  # [B, D]
        out = self.latent(flat) + self.text(embeds.mean(1)) + sigma[:, None] * self.sigma  # [B, D]
        return out.view_as(latents)


class LinearPolicy:
    spec = FamilySpec(
        name="linear", policy="support:LinearPolicy", text_encoders=False, export="none", hub_weights=False
    )
    family = spec.name
    lora_target_modules: list[str] = []
    repeated_blocks = ()
    dtype = torch.float32

    def __init__(self, channels=2, size=4, embed_dim=6, seed=0):
        torch.manual_seed(seed)
        self.shape = (channels, size, size)
        self.embed_dim = embed_dim
        self.transformer = LinearVelocityModel(channels * size * size, embed_dim)
        self.device = torch.device("cpu")
        self.vocab = {}

    def _embed(self, prompt: str) -> torch.Tensor:
        g = torch.Generator().manual_seed(sum(map(ord, prompt)) + 7)
        return torch.randn(3, self.embed_dim, generator=g)

    def encode_prompts(self, prompts, with_negative):
        embeds = torch.stack([self._embed(p) for p in prompts])  # [B, 3, E]
        negative = torch.zeros_like(embeds) if with_negative else None
        return Condition(embeds=embeds, negative_embeds=negative)

    def velocity(self, latents, sigma, cond, guidance_scale, detach_uncond=False):
        if guidance_scale > 1:
            both = self.transformer(
                torch.cat([latents, latents]), torch.cat([sigma, sigma]), torch.cat([cond.negative_embeds, cond.embeds])
            )
            uncond, text = both.chunk(2)
            return guided_velocity(uncond, text, guidance_scale, detach_uncond).float()
        return self.transformer(latents, sigma, cond.embeds).float()

    def decode(self, latents):
        pixels = latents[:, :3] if latents.shape[1] >= 3 else latents[:, :1].expand(-1, 3, -1, -1)
        return ((pixels / 2 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8)

    def latent_shape(self, height, width):
        return self.shape

    def sigmas(self, num_steps, latent_shape):
        from genalign.sampling.schedules import flow_match_sigmas

        return flow_match_sigmas(num_steps, shift=3.0)


def make_batch(size=6, steps=3, start=0):
    return TrajectoryBatch(
        prompts=[f"p{start + i}" for i in range(size)],
        prompt_ids=torch.arange(start, start + size),
        group_ids=torch.arange(size) // 2,
        seeds=torch.arange(size) + 100,
        condition=Condition(embeds=torch.randn(size, 2, 3), pooled=torch.randn(size, 4)),
        latents=torch.randn(size, steps + 1, 2, 2),
        log_probs=torch.randn(size, steps),
        sigmas=torch.linspace(1, 0, steps + 1),
        sde_mask=torch.ones(size, steps, dtype=torch.bool),
        images=torch.zeros(size, 3, 4, 4, dtype=torch.uint8),
        metadata=[{"i": start + i} for i in range(size)],
    )


def make_groups(prompts_per_step=2, samples_per_prompt=3, seed=0):
    """A PromptGroupBatch of distinct seeds, group-contiguous, without a manifest."""
    from genalign.data.sampler import PromptGroupBatch, sample_seed

    prompts = [f"prompt {g}" for g in range(prompts_per_step) for _ in range(samples_per_prompt)]
    size = len(prompts)
    return PromptGroupBatch(
        prompts=prompts,
        prompt_ids=torch.arange(prompts_per_step).repeat_interleave(samples_per_prompt),
        group_ids=torch.arange(prompts_per_step).repeat_interleave(samples_per_prompt),
        seeds=torch.tensor([sample_seed(seed, 1, i) for i in range(size)]),
        metadata=[{} for _ in range(size)],
    )


SD3_RECIPE = "experiment/diffusion/sd3_5/online_grpo_ocr"
WAN_RECIPE = "experiment/diffusion/wan_2_1/online_grpo_pickscore"
VIDEO_RECIPES = {"wan": WAN_RECIPE, "cosmos": "experiment/diffusion/cosmos/online_grpo_pickscore"}
"""The shipped recipe of each video family (both PickScore per frame)."""


def tiny_overrides(model_dir: Path, output_dir: Path, *extra: str) -> list[str]:
    return [
        f"model.path={model_dir}",
        "model.device=cpu",
        "model.dtype=float32",
        "model.lora.rank=4",
        "model.lora.alpha=8",
        "/base/distributed=local",
        "rollout.height=64",
        "rollout.width=64",
        "rollout.num_steps=3",
        "rollout.n=2",
        "rollout.rollout_batch_size=2",
        "rollout.sample_batch_size=2",
        "actor.gradient_accumulation_steps=1",
        "actor.ema.update_every=1",
        "actor.lr=1e-2",
        "reward.components.ocr=0.0",
        "reward.components.jpeg_compressibility=1.0",
        "eval.num_steps=2",
        "eval.max_prompts=2",
        "eval.batch_size=2",
        "eval.every=2",
        "trainer.num_steps=3",
        "trainer.save_every=1",
        f"trainer.output_dir={output_dir}",
        "trainer.progress_bar=false",
        *extra,
    ]


def toy_loop_overrides(out, *extra: str) -> list[str]:
    """A 3-step toy run of a forward-process recipe (NFT, DPO, SFT): 2 x 2 samples, 3 denoising
    steps, a checkpoint every step and a small evaluation at steps 0 and 2."""
    return [
        "rollout.num_steps=3",
        "rollout.n=2",
        "rollout.rollout_batch_size=2",
        "rollout.sample_batch_size=4",
        "actor.lr=1e-3",
        "eval.num_steps=2",
        "eval.max_prompts=2",
        "eval.samples_per_prompt=2",
        "eval.batch_size=4",
        "eval.every=2",
        "trainer.num_steps=3",
        "trainer.save_every=1",
        f"trainer.output_dir={out}",
        "trainer.progress_bar=false",
        *extra,
    ]


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path) as handle:
        return list(csv.DictReader(handle))


TIMING_COLUMNS = {
    "time_rollout_s",
    "time_reward_s",
    "time_train_s",
    "time_eval_s",
    "time_cpu_s",
    "time_step_s",
    "images_per_s",
    "step_images_per_s",
    "sync_s",
}
"""metrics.csv columns that measure time (wall-clock or CPU): the only ones two identical runs may differ in."""


def rows_without_timing(path: Path) -> list[dict[str, str]]:
    """A metrics CSV's rows without TIMING_COLUMNS ([] while the file does not exist yet)."""
    if not path.exists():
        return []
    return [{k: v for k, v in row.items() if k not in TIMING_COLUMNS} for row in read_rows(path)]


def assert_resumed_bitwise(
    run_dir: Path, resumed_dir: Path, step: int, files: tuple[str, ...] = ("trainable.safetensors",)
) -> None:
    """A run resumed from `run_dir`'s checkpoint-(step - 1) into `resumed_dir` logged only `step`,
    with the uninterrupted run's row (timing columns aside), and its final checkpoint's `files`
    are bitwise equal to the uninterrupted run's."""
    from safetensors.torch import load_file

    uninterrupted = read_rows(run_dir / "metrics.csv")[step - 1]
    resumed = read_rows(resumed_dir / "metrics.csv")
    assert [r["step"] for r in resumed] == [str(step)]
    for key, value in uninterrupted.items():
        if key not in TIMING_COLUMNS:
            # a column only earlier steps logged (the step-1 parity check) is absent, i.e. empty
            assert resumed[0].get(key, "") == value, key
    for name in files:
        a = load_file(str(run_dir / "checkpoint-final" / name))
        b = load_file(str(resumed_dir / "checkpoint-final" / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name


def i2v_manifests(i2v_set: Path, suffix: str = "") -> list[str]:
    """data.manifest / data.eval_manifest of the image-to-video set rebuilt at 32x32 (the `i2v_set`
    fixture); `suffix` picks another pair of its manifests (`_flf2v`: first and last frame)."""
    return [
        f"data.manifest={i2v_set / f'train{suffix}.jsonl'}",
        f"data.eval_manifest={i2v_set / f'test{suffix}.jsonl'}",
    ]


def tiny_video_overrides(model_dir: Path, output_dir: Path, *extra: str) -> list[str]:
    """A video recipe (Wan, Cosmos) shrunk to seconds on a CPU: 3 frames of 32x32 (2 latent
    frames of the tiny VAEs), 3 steps, and rule rewards (temporal consistency + per-frame JPEG)
    in place of PickScore; LoRA (the Wan recipe is a full fine-tune) so the tests exercise the
    family's LoRA export too."""
    return [
        f"model.path={model_dir}",
        "model.device=cpu",
        "model.dtype=float32",
        "model.train_mode=lora",
        "model.lora.rank=4",
        "model.lora.alpha=8",
        "model.max_sequence_length=16",
        "model.num_frames=3",
        "rollout.height=32",
        "rollout.width=32",
        "rollout.num_steps=3",
        "rollout.n=2",
        "rollout.rollout_batch_size=2",
        "rollout.sample_batch_size=2",
        "actor.gradient_accumulation_steps=1",
        "actor.ema.update_every=1",
        "actor.lr=1e-2",
        "reward.components.pickscore=0.0",
        "reward.components.temporal_consistency=1.0",
        "reward.components.jpeg_compressibility=0.5",
        "reward.batch_size=4",
        "reward.video_reduction=min",
        "eval.num_steps=2",
        "eval.max_prompts=2",
        "eval.batch_size=2",
        "eval.every=2",
        "trainer.num_steps=2",
        "trainer.save_every=1",
        f"trainer.output_dir={output_dir}",
        "trainer.progress_bar=false",
        *extra,
    ]


def make_run_dir(
    path: Path,
    num_steps: int = 12,
    eval_every: int = 4,
    components: tuple[str, ...] = ("ocr", "jpeg"),
    gold: bool = True,
    parity_gap: float | None = 0.0,
    finished: bool = True,
    config: bool = True,
) -> Path:
    """A run directory as the trainer writes it (same CSVSink and contact-sheet code), with
    made-up but run-shaped numbers: rewards rising, clip fractions falling, eval every
    `eval_every` steps (and step 0) with a contact sheet whose images change with the step."""
    import math

    from genalign.evaluation.contact_sheet import save_contact_sheet
    from genalign.tracking.sinks import CSVSink

    path.mkdir(parents=True, exist_ok=True)
    if config:
        components_yaml = "".join(f"    {name}: {1.0 / len(components)}\n" for name in components)
        (path / "config.yaml").write_text(
            f"model:\n  family: sd3\n  path: tiny\n  train_mode: lora\n  dtype: float32\nalgorithm:\n  name: grpo\n"
            f"reward:\n  components:\n{components_yaml}eval:\n  gold_rewards:\n    judge: 1.0\n"
            f"trainer:\n  num_steps: {num_steps}\n  parity_check: true\n"
        )
    metrics, eval_metrics = CSVSink(path / "metrics.csv"), CSVSink(path / "eval_metrics.csv")

    def evaluate(step: int) -> None:
        level = 0.3 + 0.04 * step
        row = {
            "eval_reward_mean": level,
            **{
                f"eval_reward_{name}_mean": level + 0.1 * (i - (len(components) - 1) / 2)
                for i, name in enumerate(components)
            },
        }
        if gold:
            row.update(gold_mean=level - 0.01 * step, gold_judge_mean=level - 0.01 * step, gold_divergence=0.0)
        eval_metrics.log(step, row)
        generator = torch.Generator().manual_seed(step)
        images = torch.randint(0, 256, (4, 3, 16, 16), generator=generator, dtype=torch.uint8)
        images[:, step % 3] = 255  # a different dominant colour per step
        save_contact_sheet(
            path / f"eval_epoch_{step}" / "contact_sheet.png", images, [f"prompt {i} | r={level:.2f}" for i in range(4)]
        )

    evaluate(0)
    for step in range(1, num_steps + 1):
        wave = math.sin(step)
        reward = 0.3 + 0.03 * step + 0.02 * wave
        row = {
            "reward_mean": reward,
            "reward_std": 0.2,
            # components spread around the total (their weighted mean), so no line hides another
            **{
                f"reward_{name}_mean": reward + 0.1 * (i - (len(components) - 1) / 2)
                for i, name in enumerate(components)
            },
            "kl": 1e-3 * step,
            "approx_kl": 1e-4 * (1 + wave),
            "clip_frac": 0.5 / step,
            "clip_frac_low": 0.3 / step,
            "clip_frac_high": 0.2 / step,
            "adv_mean": 0.0,
            "adv_std": 1.0,
            "adv_abs_mean": 0.8,
            "adv_min": -1.9,
            "adv_max": 1.8,
            "zero_std_ratio": 0.1,
            "loss": 0.01 / step,
            "policy_loss": 0.009 / step,
            "ratio": 1.0,
            "ratio_min": 0.9,
            "ratio_max": 1.1,
            "grad_norm": 0.1,
            "time_rollout_s": 2.0,
            "time_reward_s": 0.5,
            "time_train_s": 4.0,
            "images_per_s": 30.0 + wave,
            "step_images_per_s": 9.0 + wave,
        }
        if step == 1 and parity_gap is not None:
            row["parity_max_abs_log_prob_diff"] = parity_gap
        if step % eval_every == 0 or step == num_steps:
            evaluate(step)
            row["time_eval_s"] = 3.0
        metrics.log(step, row)
    if finished:
        (path / "checkpoint-final").mkdir()
    return path


def make_demo_like_run(path: Path, num_steps: int = 60) -> Path:
    """A run directory (metrics only) with the CPU demo's magnitudes: a KL to the reference of
    1e-4, importance ratios 1 ± 1e-5, losses of 1e-6. The report's plots once cut the KL label,
    drew the ratio's "1e-5+1" over its title and put legends over curves at these magnitudes."""
    import math

    from genalign.tracking.sinks import CSVSink

    path.mkdir(parents=True, exist_ok=True)
    metrics, evals = CSVSink(path / "metrics.csv"), CSVSink(path / "eval_metrics.csv")
    evals.log(0, {"eval_reward_mean": 0.45, "gold_mean": 0.47})
    for step in range(1, num_steps + 1):
        wave = math.sin(step)
        metrics.log(
            step,
            {
                "reward_mean": 0.45 + 0.006 * step,
                "kl": 2e-6 * step,
                "approx_kl": 3e-7 * (1.5 + wave),
                "clip_frac": 0.05 + 0.01 * wave,
                "clip_frac_low": 0.02,
                "clip_frac_high": 0.03 + 0.01 * wave,
                "adv_mean": 0.0,
                "adv_std": 0.99,
                "adv_abs_mean": 0.8,
                "adv_min": -2.4,
                "adv_max": 2.2,
                "zero_std_ratio": 0.05 * (1 + wave),
                "loss": 2e-6 * wave,
                "policy_loss": 1.5e-6 * math.cos(step),
                "ratio": 1 + 1e-6 * wave,
                "ratio_min": 1 - 1e-5 * (1.2 + wave),
                "ratio_max": 1 + 1e-5 * (1.2 + wave),
                "grad_norm": 0.06 + 0.01 * wave,
                "grad_norm_max": 0.1,
                "time_rollout_s": 1.5,
                "time_reward_s": 0.1,
                "time_train_s": 1.6,
                "images_per_s": 55 + wave,
                "step_images_per_s": 27 + wave,
                **({"time_eval_s": 12.0} if step % 20 == 0 else {}),
            },
        )
        if step % 20 == 0:
            evals.log(step, {"eval_reward_mean": 0.45 + 0.007 * step, "gold_mean": 0.46 + 0.007 * step})
    return path


def train_recipe(recipe: str, out: Path, *overrides: str) -> tuple[list[dict], list[dict]]:
    """Train `recipe` into `out` through the CLI; returns (metrics.csv rows, eval_metrics.csv
    rows) with every value a float (None where empty)."""
    from genalign.cli import main

    code = main(["train", "--config", recipe, f"trainer.output_dir={out}", "trainer.progress_bar=false", *overrides])
    assert code == 0

    def rows(name: str) -> list[dict]:
        with (out / name).open() as handle:
            return [
                {k: float(v) if v not in ("", None) else None for k, v in r.items()} for r in csv.DictReader(handle)
            ]

    return rows("metrics.csv"), rows("eval_metrics.csv")


def pass_through_guardrail():
    """The stand-in diffusers' own Cosmos tests give Cosmos2_5_PredictBasePipeline so that it
    renders (its real guardrail, cosmos_guardrail, is large and downloads its models): a module
    that passes every prompt and frame through. Test-only."""
    from diffusers import ConfigMixin, ModelMixin

    class PassThroughGuardrail(ModelMixin, ConfigMixin):
        def __init__(self):
            super().__init__()
            # the pipeline reads .device / moves it with .to(); a buffer gives it one
            self.register_buffer("_device_tracker", torch.zeros(1), persistent=False)

        def check_text_safety(self, prompt: str) -> bool:
            return True

        def check_video_safety(self, frames):
            return frames

    return PassThroughGuardrail()


def pipeline_for_rendering(pipeline_cls_name: str, model_dir: Path):
    """`<pipeline>.from_pretrained(model_dir)` as a user renders with it; Cosmos' pipeline gets
    the pass-through guardrail (it cannot run without one)."""
    import diffusers

    components = {"safety_checker": pass_through_guardrail()} if pipeline_cls_name.startswith("Cosmos") else {}
    return getattr(diffusers, pipeline_cls_name).from_pretrained(model_dir, **components)


def render_tiny_video(pipe, num_inference_steps: int = 2) -> torch.Tensor:
    """A 3-frame 32x32 video of a fixed prompt and seed from a tiny video pipeline (no CFG), as a
    user renders: what an exported adapter loaded into `pipe` must change."""
    return pipe(
        prompt="a red fox running",
        num_inference_steps=num_inference_steps,
        height=32,
        width=32,
        num_frames=3,
        guidance_scale=1.0,
        max_sequence_length=16,
        generator=torch.Generator().manual_seed(0),
        output_type="pt",
    ).frames


def assert_loaded_as_built(policy, built_pipeline, text_encoder_class: str) -> None:
    """A policy loaded from a saved tiny pipeline holds the builder's transformer weights (bit
    for bit), the expected text encoder, a float32 VAE, and nothing trainable."""
    from genalign.models.base import FlowPolicy

    assert isinstance(policy, FlowPolicy)
    fresh = built_pipeline.transformer.state_dict()
    for name, tensor in policy.transformer.state_dict().items():
        torch.testing.assert_close(tensor, fresh[name], rtol=0, atol=0)
    assert type(policy.pipeline.text_encoder).__name__ == text_encoder_class
    assert policy.vae.dtype == torch.float32
    for module in (policy.transformer, policy.vae, *policy.text_encoders):
        assert not any(p.requires_grad for p in module.parameters())


def assert_lora_export_reproduces(
    policy,
    lora,
    out_dir: Path,
    pipe,
    loaded,
    velocity_args: tuple,
    *,
    into_transformer: bool = False,
    length: int = TINY_REDUCTION,
    depth: int = TINY_DEPTH,
) -> None:
    """Export `policy`'s adapter (config `lora`) with the shared exporter into `out_dir`; after
    `pipe.load_lora_weights` (`into_transformer`: `pipe.transformer.load_lora_adapter`, what the
    model card says for a pipeline without a LoRA loader), `loaded` (a policy on `pipe`, a fresh
    pipeline of the same model) predicts our velocity for `velocity_args` (so alpha/r survives
    through the metadata), and not its base velocity; `length`/`depth` bound the reordering."""
    from genalign.weights.lora import export_lora_for_diffusers

    with torch.no_grad():
        ours = policy.velocity(*velocity_args)
    exported = export_lora_for_diffusers(policy.transformer, out_dir, lora, policy.diffusers_pipeline)
    with torch.no_grad():
        base = loaded.velocity(*velocity_args)
        if into_transformer:  # without use_safetensors diffusers looks for a .bin
            pipe.transformer.load_lora_adapter(exported, use_safetensors=True)
        else:
            pipe.load_lora_weights(exported)
        after = loaded.velocity(*velocity_args)
    assert_close_reordered(after, ours, length=length, depth=depth)  # diffusers' LoRA path vs peft's
    assert (after - base).abs().max() > 1e-3


def ode_sample(policy, cond, height: int, width: int, cfg_scale: float, steps: int = 3):
    """Our sampler with the SDE off (velocity + the ODE kernel, noise_level 0) from the pipeline
    tests' noise (seeds 11, 12): (start, final latents), [2, C, h, w] each."""
    from genalign.sampling.trajectory import initial_noise, sample_trajectory, sde_step_mask

    start = initial_noise([11, 12], [11, 12], policy.latent_shape(height, width))[0]  # [2, C, h, w]
    sigmas = policy.sigmas(steps, tuple(start.shape[1:]))
    with torch.no_grad():
        latents = sample_trajectory(
            policy, cond, start, None, sigmas, cfg_scale, 0.0, sde_step_mask(steps, 0.0)
        ).latents
    return start, latents[:, -1]


def perturb_lora_b(transformer: torch.nn.Module) -> None:
    """Give a freshly applied LoRA (B = 0: no effect yet) random B matrices, seeded per name, so
    an exported adapter changes what the model predicts."""
    with torch.no_grad():
        for name, param in transformer.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1, generator=torch.Generator().manual_seed(len(name)))


def train_recipe_in_process(recipe: str, overrides: list[str]):
    """A Trainer for `recipe` with `overrides`, trained to the end; returns it with its
    transformer's state before training (to check what moved)."""
    from genalign.preflight.load import load_config
    from genalign.training.trainer import Trainer

    trainer = Trainer(load_config(recipe, overrides))
    initial = {k: v.clone() for k, v in trainer.policy.transformer.state_dict().items()}
    trainer.train()
    return trainer, initial


def train_one_lora_step_at_parity_zero(recipe: str, overrides: list[str], output_dir: Path):
    """Train `recipe` one step with `overrides` (whose trainer.output_dir is `output_dir`): that
    step's replay parity is exactly 0 and a LoRA weight moved. Returns the trainer."""
    trainer, initial = train_recipe_in_process(recipe, overrides)
    rows = read_rows(output_dir / "metrics.csv")
    assert [r["step"] for r in rows] == ["1"]
    assert float(rows[0]["parity_max_abs_log_prob_diff"]) == 0.0  # replay = rollout
    final = trainer.policy.transformer.state_dict()
    assert any(not torch.equal(initial[k], final[k]) for k in initial if "lora" in k)
    return trainer


def ray_rollout_setting(cfg, generate_timeout_s: float = 120.0):
    """(policy, prompt sampler, Ray engine) for a `rollout.engine=ray` config: the policy built
    as the trainer builds it (seeded adapter), the engine's workers started from its weights.
    The caller owns the Ray session and closes the engine."""
    from genalign.data.prompts import load_manifest
    from genalign.data.sampler import PromptSampler
    from genalign.rollout.ray_engine import RayRolloutEngine
    from genalign.training import setup
    from genalign.weights.lora import trainable_state_dict

    torch.manual_seed(cfg.trainer.seed)
    policy = setup.build_policy(cfg)
    sampler = PromptSampler(
        load_manifest(cfg.data.manifest), cfg.rollout.rollout_batch_size, cfg.rollout.n, cfg.trainer.seed
    )
    engine = RayRolloutEngine(
        cfg, trainable_state_dict(policy.transformer), setup.build_policy, generate_timeout_s=generate_timeout_s
    )
    return policy, sampler, engine


class RankOneConstantReward:
    """A scorer for multi-rank tests (`reward.allow_import=[support:RankOneConstantReward]`):
    each image's mean pixel value, except on torchrun rank 1, where every sample scores 0 —
    rank 1's prompt groups then have constant rewards (advantage 0, no DPO pair)."""

    name = "support:RankOneConstantReward"
    constant_rank = "1"

    def __init__(self, device: str = "cpu", **kwargs):
        self.device = device

    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict]) -> torch.Tensor:
        import os

        if os.environ.get("RANK") == self.constant_rank:
            return torch.zeros(len(prompts))
        return images.float().flatten(1).mean(1)  # [B]

    def offload(self) -> None:
        """Nothing to move."""

    def onload(self) -> None:
        """Nothing to move."""


class RankZeroConstantReward(RankOneConstantReward):
    """The same with rank 0's groups constant: rank 0, which writes the run's metrics, trains
    nothing while rank 1 trains (`reward.allow_import=[support:RankZeroConstantReward]`)."""

    name = "support:RankZeroConstantReward"
    constant_rank = "0"


def ray_overrides(model_dir: Path, prompts: Path, *extra: str) -> list[str]:
    """The tiny SD3 OCR recipe for the Ray rollout tests: CPU, float32, 64², 2 steps, 2 x 2
    samples, the jpeg reward in place of OCR (no engine needed)."""
    return [
        f"model.path={model_dir}",
        f"data.manifest={prompts}",
        f"data.eval_manifest={prompts}",
        "model.device=cpu",
        "model.dtype=float32",
        "model.lora.rank=4",
        "model.lora.alpha=8",
        "rollout.height=64",
        "rollout.width=64",
        "rollout.num_steps=2",
        "rollout.n=2",
        "rollout.rollout_batch_size=2",
        "rollout.sample_batch_size=2",
        "actor.gradient_accumulation_steps=1",
        "reward.components.ocr=0.0",
        "reward.components.jpeg_compressibility=1.0",
        *extra,
    ]


def launch_script(tmp_path: Path, source: str, nproc: int, *args: str) -> None:
    """Run `source` as a script on `nproc` torchrun ranks; a hang fails at the timeout."""
    script = tmp_path / "train_ranks.py"
    script.write_text(source)
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        str(script),
        *args,
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]


def linear_velocity(weight: torch.Tensor):
    """v̂(x, σ) = W·x + σ: a differentiable stand-in denoiser for the reward-feedback chain tests
    (`denoise_with_grad`'s velocity signature: latents [r, d], σ [r], rows [r])."""

    def velocity(latents, sigma, rows):
        return latents @ weight.T + sigma[:, None]

    return velocity


def record_timesteps(modules: dict[str, torch.nn.Module]) -> tuple[list, list]:
    """Forward pre-hooks logging (module name, the distinct timestep values it was called at) of
    each denoiser in `modules`: which expert ran at which step. Returns (calls, handles)."""
    calls, handles = [], []
    for name, module in modules.items():

        def hook(_module, args, kwargs, name=name):
            calls.append((name, sorted({round(float(t), 3) for t in kwargs["timestep"].flatten()})))

        handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
    return calls, handles


def changed_tensors(trainer, initial: dict[str, torch.Tensor]) -> set[str]:
    """The names of the trainer's transformer tensors that differ from `initial` (what trained)."""
    state = trainer.policy.transformer.state_dict()
    return {name for name, value in state.items() if not torch.equal(value, initial[name])}


def assert_two_steps_at_parity_zero(out: Path) -> None:
    """A run in `out` logged steps 1 and 2, its parity preflight (step 1) exactly 0."""
    rows = read_rows(out / "metrics.csv")
    assert [r["step"] for r in rows] == ["1", "2"]
    assert float(rows[0]["parity_max_abs_log_prob_diff"]) == 0.0


def dataset_builder(name: str):
    """The build script of the shipped prompt set `name` (genalign/datasets/<name>/build.py) as a module."""
    import importlib.util

    from genalign.data.prompts import PACKAGED_DATASETS

    spec = importlib.util.spec_from_file_location(f"{name}_build", PACKAGED_DATASETS / name / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"{name}_build"] = module
    spec.loader.exec_module(module)
    return module


class SourceDistance:
    """A user's editing scorer (`needs_source`): 1 − mean |result − source| / 255, from the source
    images the runtime hands over in each sample's metadata (the editing families' loop tests)."""

    needs_source = True

    def __init__(self, device: str = "cpu"):
        pass

    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict]) -> torch.Tensor:
        from genalign.rewards.base import source_images

        sources = source_images(metadata)  # [B, S, 3, H, W]
        return 1.0 - (images.float() - sources[:, 0].float()).abs().mean(dim=(1, 2, 3)) / 255.0


SOURCE_SCORER = "support:SourceDistance"
"""`SourceDistance` by its import path (reward.components, reward.allow_import)."""


def assert_lora_run_exports_to_the_pipeline(recipe: str, overrides: list[str], out: Path, pipe) -> None:
    """`recipe` trained in process with LoRA: 2 steps at parity 0, only LoRA tensors moved, and the
    exported adapter (checkpoint-final/lora) loaded by `pipe.load_lora_weights` changes a 64x64
    image `pipe` renders (2 steps, a fixed prompt and seed), as a user loads it."""
    trainer, initial = train_recipe_in_process(recipe, overrides)
    assert_two_steps_at_parity_zero(out)
    changed = changed_tensors(trainer, initial)
    assert changed and all("lora" in name for name in changed)

    def render():
        return pipe(
            prompt="a red fox in fresh snow",
            height=64,
            width=64,
            num_inference_steps=2,
            max_sequence_length=16,
            generator=torch.Generator().manual_seed(0),
            output_type="pt",
        ).images

    before = render()
    pipe.load_lora_weights(out / "checkpoint-final" / "lora")
    assert not torch.allclose(before, render())


def assert_full_run_exports_to_the_pipeline(recipe: str, overrides: list[str], out: Path, load_pipe) -> None:
    """`recipe` trained in process as a full fine-tune: 2 steps at parity 0, most transformer
    tensors moved, and `load_pipe(transformer_dir)` (the pipeline a user builds around the
    exported checkpoint-final/transformer) holds exactly the trained weights."""
    trainer, initial = train_recipe_in_process(recipe, overrides)
    assert_two_steps_at_parity_zero(out)
    final = trainer.policy.transformer.state_dict()
    assert len(changed_tensors(trainer, initial)) > len(initial) // 2  # the whole model moved
    pipe = load_pipe(out / "checkpoint-final" / "transformer")
    for name, tensor in pipe.transformer.state_dict().items():
        assert torch.equal(tensor, final[name].to(tensor.dtype)), name
