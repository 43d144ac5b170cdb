"""`AlgorithmConfig`: the policy-gradient objective and its advantage estimator."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from genalign.config.checks import non_negative_problems

StdConvention = Literal["population", "unbiased"]
RolloutCorrectionMode = Literal["off", "truncate", "mask"]
GuardBias = Literal["micro_batch", "per_sample"]
NFTAdvantageMode = Literal["all", "positive_only", "negative_only", "one_only", "binary"]
DPOSource = Literal["online", "offline"]
DPOSampler = Literal["reference", "policy"]
DPOTiedGroups = Literal["pair", "drop"]
KLType = Literal["latent_mean", "velocity"]
TimestepSelection = Literal["first", "random"]
TokenLogProb = Literal["guided", "conditional"]
TruncationDistribution = Literal["fixed", "uniform", "gaussian", "full"]
RewardFeedbackLoss = Literal["negative", "hinge"]
AWMWeighting = Literal["uniform", "t", "t_squared", "huber", "ghuber"]
AWMTimeSampling = Literal["discrete", "discrete_wo_init"]
SFTSource = Literal["dataset", "best_of_n"]
SFTTiedGroups = Literal["keep", "drop"]
WeightingScheme = Literal["logit_normal", "mode", "sigma_sqrt", "cosmap", "none"]


@dataclass
class AdvantageConfig:
    """Group normalisation (docs/algorithms.md §2.4)."""

    per_prompt: bool = True
    """Normalise within each prompt group; false = over the whole batch."""
    global_std: bool = True
    """Divide by the std of the whole batch instead of the group's (Flow-GRPO SD3 default)."""
    std: StdConvention = "population"
    """"population" (numpy, ddof=0: Flow-GRPO) or "unbiased" (torch, ddof=1: DanceGRPO/verl)."""
    eps: float = 1e-4
    """Added to the std before dividing (Flow-GRPO: 1e-4)."""
    normalize_by_std: bool = True
    """False: mean-centering only (Dr.GRPO style)."""

    def problems(self) -> list[str]:
        return non_negative_problems({"algorithm.advantage.eps": self.eps})


@dataclass
class RolloutCorrectionConfig:
    """Importance weights for a rollout policy that differs from the trained one (a stale
    rollout worker, another numeric path), like verl's rollout_is / TIS. Off by default: the
    in-process rollout samples with the trained weights, and the parity preflight checks it."""

    mode: RolloutCorrectionMode = "off"
    """"off", "truncate" (TIS: w = min(ρ, threshold)) or "mask" (w = ρ inside [1/threshold,
    threshold], else 0), ρ = exp(ℓ_proximal − ℓ_rollout). On, the update first recomputes
    every trained step's log-prob under the current weights (one extra no-grad forward per
    trained step) and takes the PPO ratio against those (losses.rollout_correction_weights)."""
    threshold: float = 2.0
    """C, the truncation / mask bound (verl rollout_is_threshold default); must be > 1."""

    def problems(self) -> list[str]:
        if self.threshold <= 1:
            return [f"algorithm.rollout_correction.threshold must be > 1, got {self.threshold}"]
        return []


@dataclass
class GuardConfig:
    """GRPO-Guard options (algorithm.name=grpo_guard, docs/algorithms.md §3.3)."""

    reweight: bool = True
    """Divide each step's loss by mean(h)² = |Δσ| as the reference does (regulates the step's
    gradient scale); false keeps RatioNorm only (an ablation)."""
    bias: GuardBias = "micro_batch"
    """RatioNorm's mean-shift bias mean((μ_θ − μ_old)²)/(2S²): "micro_batch" (the reference
    code's, one scalar averaged over the micro-batch's samples and dimensions) or "per_sample"
    (each sample's own drift: every sample's normalised log-ratio is then exactly
    mean(ε ⊙ (μ_θ − μ_old)), zero-mean under the rollout policy whatever else is in its
    micro-batch, so the result does not depend on the replay micro-batch size)."""


@dataclass
class NFTConfig:
    """DiffusionNFT (docs/algorithms.md §4); defaults of the official `config/nft.py` (decay_type 1)."""

    beta: float = 1.0
    """Mixing strength β of the implicit policies v± = (1 ∓ β)·v_old ± β·v_θ; 1/β acts as a
    guidance strength (official: 1.0 for GenEval/PickScore/HPS, 0.1 for OCR and multi-reward)."""
    adv_mode: NFTAdvantageMode = "all"
    """How the clamped advantage maps to the optimality probability r: all | positive_only |
    negative_only | one_only | binary (§4.2)."""
    adaptive_weight_min: float = 1e-5
    """Lower clip of the adaptive x0-space loss weight sg(mean |x̂0 − x0|)."""
    old_decay_flat: int = 0
    """Optimizer steps before the old (sampling) policy starts to lag: η = 0 (hard copy) until then."""
    old_decay_rate: float = 0.001
    """η grows by this per optimizer step after `old_decay_flat` (official decay_type 1: 0.001)."""
    old_decay_max: float = 0.5
    """η is capped here (decay_type 1: 0.5; decay_type 2, OCR: flat 75, rate 0.0075, max 0.999)."""

    def problems(self) -> list[str]:
        """The ranges of algorithm.nft (DiffusionNFT's `config_problems` reports them: the block
        is read only when algorithm.name=nft)."""
        problems = []
        if self.beta <= 0:
            problems.append(f"algorithm.nft.beta must be > 0, got {self.beta}")
        if self.adaptive_weight_min <= 0:
            problems.append(f"algorithm.nft.adaptive_weight_min must be > 0, got {self.adaptive_weight_min}")
        if self.old_decay_flat < 0 or self.old_decay_rate < 0:
            problems.append(
                "algorithm.nft.old_decay_flat and old_decay_rate must be >= 0, got "
                f"{self.old_decay_flat} and {self.old_decay_rate}"
            )
        if not 0 <= self.old_decay_max < 1:
            problems.append(
                f"algorithm.nft.old_decay_max must be in [0, 1) (1 would freeze the sampling policy), "
                f"got {self.old_decay_max}"
            )
        return problems


@dataclass
class DPOConfig:
    """Flow-DPO (Diffusion-DPO with the flow-matching target, docs/algorithms.md §5.3); defaults of
    Flow-GRPO's `train_sd3_dpo.py` / `config/dpo.py` in its online setting."""

    beta: float = 100.0
    """β of the DPO logit −½·β·(Δ_w − Δ_l) (Flow-GRPO `config/dpo.py`: `train.beta = 100`;
    Diffusion-DPO's `beta_dpo` is 5000 for SD ε errors)."""
    source: DPOSource = "online"
    """"online": each step's rollout groups give (best, worst)-by-reward pairs (rollout.n >= 2);
    "offline": pairs are read from data.preference_manifest, no rollout and no reward scoring
    during training (docs/preference_data.md)."""
    sample_with: DPOSampler = "reference"
    """Online: which weights the rollout samples the pairs with. "reference" (as
    `train_sd3_dpo.py`, which samples with its "ref" adapter): the DPO reference, so the pairs
    come from the policy the loss compares against. "policy": the live (learner) weights, the
    fully on-policy variant (samples follow every update; the reference can fall far behind)."""
    tied_groups: DPOTiedGroups = "pair"
    """Online: a prompt group whose samples all score the same. "pair" (Flow-GRPO's
    `PerPromptStatTracker`, type "dpo"): its second sample is chosen over its first, so every
    group gives a pair; "drop": it gives no pair (only groups with a reward gap train)."""
    ref_update_step: int = 40
    """Copy the learner into the DPO reference every this many optimizer steps (Flow-GRPO's
    `train.ref_update_step`; its config comment names 40 for online DPO, its default 10⁷ never
    refreshes). 0 never refreshes: the reference stays the weights training started from."""

    def problems(self) -> list[str]:
        """The ranges of algorithm.dpo (Flow-DPO's `config_problems` reports them: the block is
        read only when algorithm.name=dpo)."""
        problems = []
        if self.beta <= 0:
            problems.append(f"algorithm.dpo.beta must be > 0, got {self.beta}")
        if self.ref_update_step < 0:
            problems.append(
                f"algorithm.dpo.ref_update_step must be >= 0 (0 never refreshes), got {self.ref_update_step}"
            )
        return problems


@dataclass
class DGPOConfig:
    """DGPO, direct group preference optimisation (docs/algorithms.md §9); defaults of the
    reference's default recipe (Luo-Yihong/DGPO `config/dgpo.py`, `general_ocr_sd3_4gpu` on
    its base `compressibility`; the trainer `scripts/train_sd3_dgpo.py`)."""

    beta: float = 100.0
    """β of the group preference logit (the reference's `train.beta_dpo`: 100; 10 for PickScore,
    2000-5000 with the EMA reference)."""
    num_timesteps: int = 4
    """Training positions per sample and step: this many distinct σ's of the rollout schedule
    (the reference's `num_train_timesteps`)."""
    max_timestep_index: int = 6
    """The σ's are drawn from the schedule's first max_timestep_index + 1 entries, the noisiest
    (the reference's `trunc_steps`: 6; 4 in its GenEval recipe)."""
    shared_noise: bool = True
    """Every sample of a prompt group is noised with the same ε (the reference's
    `use_shared_noise`); false: each sample its own ε (the σ stays shared by the group)."""
    clip_range: float = 1e-2
    """PPO-style clip of the error ratio ρ = exp(e_old − e_θ): a sample's error gets no gradient
    where ρ > 1 + c with A > 0, or ρ < 1 − c with A < 0 (the reference's `clip_range`)."""
    clip_error: bool = True
    """Apply that clip to the preference term (the reference's `clip_dsm`)."""
    clip_kl: bool = False
    """Apply it to the KL term too (the reference's `clip_kl`)."""
    ema_reference: bool = False
    """The preference logit compares with the EMA ("old") weights instead of the frozen initial
    model (the reference's `use_ema_ref`, the TDM-R1 dynamic reference)."""
    reference_guidance_scale: float = 1.0
    """CFG scale of the frozen reference's velocity in the logit and the KL (the reference's
    `kl_cfg`; > 1 needs rollout.guidance_scale > 1, so that the negative prompt is encoded)."""
    ema_decay_rate: float = 0.001
    """The EMA weights θ_ema ← η·θ_ema + (1 − η)·θ after each training step's optimizer round,
    η = min(ema_decay_rate·g, ema_decay_max), g the optimizer steps before the round (the
    reference's `ema_ref` step: min(0.3, 0.001·global_step))."""
    ema_decay_max: float = 0.3
    """The cap of that η (the reference's 0.3)."""
    sample_with_ema_after: int = 200
    """Once more than this many optimizer steps are done, the rollout samples with the EMA
    weights (the reference's `switch_ema_ref`: 200; 500 in its GenEval recipe). < 0 never."""

    def problems(self) -> list[str]:
        """The ranges of algorithm.dgpo (DGPO's `config_problems` reports them)."""
        problems = []
        if self.beta <= 0:
            problems.append(f"algorithm.dgpo.beta must be > 0, got {self.beta}")
        if self.num_timesteps < 1:
            problems.append(f"algorithm.dgpo.num_timesteps must be >= 1, got {self.num_timesteps}")
        if self.max_timestep_index < 0:
            problems.append(f"algorithm.dgpo.max_timestep_index must be >= 0, got {self.max_timestep_index}")
        elif self.num_timesteps > self.max_timestep_index + 1:
            problems.append(
                f"algorithm.dgpo.num_timesteps={self.num_timesteps} distinct σ's cannot come from the "
                f"{self.max_timestep_index + 1} schedule entries 0..algorithm.dgpo.max_timestep_index"
            )
        if self.clip_range <= 0:
            problems.append(f"algorithm.dgpo.clip_range must be > 0, got {self.clip_range}")
        if self.reference_guidance_scale < 1:
            problems.append(
                f"algorithm.dgpo.reference_guidance_scale must be >= 1, got {self.reference_guidance_scale}"
            )
        if self.ema_decay_rate < 0 or not 0 <= self.ema_decay_max < 1:
            problems.append(
                "algorithm.dgpo.ema_decay_rate must be >= 0 and ema_decay_max in [0, 1), got "
                f"{self.ema_decay_rate} and {self.ema_decay_max}"
            )
        return problems


@dataclass
class RewardFeedbackConfig:
    """Reward feedback (algorithm.name=reward_feedback: ReFL, DRaFT-K, DRaFT-LV, AlignProp;
    docs/algorithms.md §10): a differentiable reward back-propagated through the last denoising
    steps. The presets `algorithm=refl|draft_k|draft_lv|alignprop` set these to each reference."""

    truncation: TruncationDistribution = "fixed"
    """How many final denoising steps K the chain with grad starts before the end, drawn per
    sample: "fixed" (K = truncation_steps: DRaFT-K), "uniform" (K uniform on [truncation_min,
    truncation_max]: ReFL's random late step), "gaussian" (K = T − int(N(T − truncation_mean,
    truncation_std)), redrawn until 1 ≤ K ≤ T − 1: AlignProp's `backprop_strategy=gaussian`),
    "full" (K = T: the whole chain from the stored noise x_0, DRTune)."""
    truncation_steps: int = 1
    """K under truncation=fixed (DRaFT-1; T = the rollout's steps is full backprop, DRaFT)."""
    truncation_min: int = 1
    """Smallest K under truncation=uniform (ReFL: step 39 of 40, K = 1)."""
    truncation_max: int = 10
    """Largest K under truncation=uniform (ReFL: step 30 of 40, K = 10)."""
    truncation_mean: float = 8.0
    """Mean of K under truncation=gaussian (AlignProp: step 42 of 50, K = 8)."""
    truncation_std: float = 5.0
    """Std of K under truncation=gaussian (AlignProp: 5)."""
    grad_steps: int = 0
    """Denoising steps taken with grad from the chain's start: 0 = every step to the end (DRaFT,
    AlignProp); n ≥ 1 = n steps, the n-th jumping to x̂0 = x − σ·v̂ (ReFL: 1, its
    `pred_original_sample` of the one step with grad)."""
    renoise_draws: int = 0
    """DRaFT-LV: 0 = off; n ≥ 1 = the final sample x0 (no grad) is noised afresh n times to the
    last step's σ and each copy denoised in one step with grad (n training positions per sample,
    their losses averaged). Needs truncation=fixed with truncation_steps=1 and grad_steps=0."""
    loss: RewardFeedbackLoss = "negative"
    """"negative": −loss_scale·r (DRaFT, AlignProp); "hinge": loss_scale·max(0, hinge_margin − r)
    (ReFL's `F.relu(-rewards + 2)`)."""
    loss_scale: float = 1.0
    """The loss' factor (ReFL `grad_scale` 1e-3; AlignProp `loss_coeff` 0.01 × `grad_scale` 1)."""
    hinge_margin: float = 2.0
    """The reward above which loss=hinge stops pushing (ReFL: 2)."""
    gradient_checkpointing: bool = False
    """Keep only each chain step's inputs and recompute its forward in backward
    (torch.utils.checkpoint), so the chain holds one step's activations instead of K
    (AlignProp: on; the memory plan counts either)."""
    supervised_steps: int = 0
    """0 = every step of the chain runs with grad; n ≥ 1 = DRTune's subset: only n equally
    spaced steps of the chain, at an offset drawn per sample, run the denoiser with grad; the
    others run it without, so the gradient passes them through the Euler update's x term only."""
    stop_input_gradient: bool = False
    """Detach the denoiser's input at every step (DRTune): a step's gradient reaches the weights
    through its own forward and the earlier steps through the update's x term, never through
    the denoiser's input Jacobian."""
    early_stop_max: int = 0
    """0 = the chain ends where grad_steps puts it; n ≥ 1 = its end is drawn per sample n' ~
    U{0..n} steps before the last, its last step jumping to x̂0 = x − σ·v̂ (deep supervision
    of the predicted clean image at an intermediate step). Needs grad_steps=0."""

    def problems(self) -> list[str]:
        """The ranges of algorithm.reward_feedback (its algorithm's `config_problems` reports them)."""
        problems = []
        key = "algorithm.reward_feedback"
        positive = {
            "truncation_steps": self.truncation_steps,
            "truncation_min": self.truncation_min,
            "truncation_max": self.truncation_max,
        }
        problems += [f"{key}.{name} must be >= 1, got {value}" for name, value in positive.items() if value < 1]
        if self.truncation_min > self.truncation_max:
            problems.append(f"{key}.truncation_min={self.truncation_min} is above truncation_max={self.truncation_max}")
        if self.truncation_std <= 0:
            problems.append(f"{key}.truncation_std must be > 0, got {self.truncation_std}")
        if self.grad_steps < 0 or self.renoise_draws < 0:
            problems.append(
                f"{key}.grad_steps and renoise_draws must be >= 0, got {self.grad_steps}, {self.renoise_draws}"
            )
        if self.renoise_draws and (self.truncation != "fixed" or self.truncation_steps != 1 or self.grad_steps):
            problems.append(
                f"{key}.renoise_draws={self.renoise_draws} (DRaFT-LV) re-noises the final sample to the last step: "
                "set truncation=fixed, truncation_steps=1, grad_steps=0"
            )
        if self.loss_scale <= 0:
            problems.append(f"{key}.loss_scale must be > 0, got {self.loss_scale}")
        if self.supervised_steps < 0 or self.early_stop_max < 0:
            problems.append(
                f"{key}.supervised_steps and early_stop_max must be >= 0, got "
                f"{self.supervised_steps}, {self.early_stop_max}"
            )
        if self.early_stop_max and (self.grad_steps or self.renoise_draws):
            problems.append(
                f"{key}.early_stop_max={self.early_stop_max} draws the chain's end: "
                "set grad_steps=0 and renoise_draws=0"
            )
        return problems

    def max_chain_steps(self, num_steps: int) -> int:
        """The most denoising forwards one sample's chain keeps for backward (the memory plan)."""
        longest = {
            "fixed": self.truncation_steps,
            "uniform": self.truncation_max,
            "gaussian": num_steps - 1,
            "full": num_steps,
        }[self.truncation]
        longest = min(longest, num_steps)
        longest = min(longest, self.grad_steps) if self.grad_steps else longest
        return min(longest, self.supervised_steps) if self.supervised_steps else longest


@dataclass
class AWMConfig:
    """Advantage-weighted matching (docs/algorithms.md §11); defaults of the reference's GenEval
    config (scxue/advantage_weighted_matching `config/dgx_awm.py` `geneval_sd3_no_cfg_1node`,
    commit be51372)."""

    train_timesteps: int = 6
    """Schedule σ's trained per sample and step, one from each of this many equal strata of the
    first int(num_steps · algorithm.timestep_fraction) schedule indices (`train.train_timesteps`)."""
    time_sampling: AWMTimeSampling = "discrete_wo_init"
    """Which schedule indices the strata cover: "discrete_wo_init" (the reference's GenEval and
    OCR configs) skips index 0, σ = 1, whose noised x_σ is pure noise; "discrete" (its
    PickScore config) starts at 0 (`time_type`)."""
    weighting: AWMWeighting = "ghuber"
    """The per-sample weighting of the flow-matching error e = mean (v_θ − (ε − x0))²
    (`train.weighting`; the reference spells uniform "Uniform" and t_squared "t**2"):
    uniform e, t σ·e, t_squared σ²·e, huber σ·(√(e + 1e-10) − 1e-5), ghuber
    σ·((e + 1e-10)^p − 1e-10^p)/p (§11)."""
    ghuber_power: float = 0.25
    """p of the generalised Huber weighting (`train.ghuber_power`)."""
    advantage_max: float = 1.0
    """The clamped advantage is rescaled to ±this: A ← clamp(A, ±adv_clip_max)/adv_clip_max ·
    advantage_max (`train.advantage_max`)."""
    anchor_kl_beta: float = 1.0
    """Weight of the velocity KL to the anchor, a lagging copy of the trained weights
    (`train.ema_beta`, kl_ema_weight Uniform); 0 drops the anchor forward."""
    anchor_decay_rate: float = 0.001
    """After each training step the anchor ← η·anchor + (1 − η)·θ with η = min(rate · optimizer
    steps, anchor_decay_max) (`kl_ema_decay_type` linear: 0.001 per step)."""
    anchor_decay_max: float = 0.3
    """The cap of η (`train.kl_ema_decay`)."""

    def problems(self) -> list[str]:
        """The ranges of algorithm.awm (AWM's `config_problems` reports them: the block is read
        only when algorithm.name=awm)."""
        problems = []
        if self.train_timesteps < 1:
            problems.append(f"algorithm.awm.train_timesteps must be >= 1, got {self.train_timesteps}")
        if self.ghuber_power <= 0:
            problems.append(f"algorithm.awm.ghuber_power must be > 0, got {self.ghuber_power}")
        if self.advantage_max <= 0:
            problems.append(f"algorithm.awm.advantage_max must be > 0, got {self.advantage_max}")
        problems += non_negative_problems(
            {
                "algorithm.awm.anchor_kl_beta": self.anchor_kl_beta,
                "algorithm.awm.anchor_decay_rate": self.anchor_decay_rate,
            }
        )
        if not 0 <= self.anchor_decay_max < 1:
            problems.append(
                "algorithm.awm.anchor_decay_max must be in [0, 1) (1 would freeze the anchor), "
                f"got {self.anchor_decay_max}"
            )
        return problems


@dataclass
class DPPOConfig:
    """Flow-DPPO (docs/algorithms.md §3.4); defaults of UniRL's `FlowDPPO` (`unirl/algorithms/flowdppo.py`
    and its `examples/diffusion/sd3_flowdppo.yaml`, commit 1a7b501e)."""

    kl_threshold: float = 1e-5
    """τ: a trained step whose old→new transition KL (a per-dimension mean) is below τ always
    trains; at or above it, a step that pushes further the way its advantage pulls is dropped
    (UniRL `kl_mask_threshold`, 1e-5)."""
    normalize_kl: bool = True
    """True: the KL divides the squared mean shift by the kernel's transition variance, the exact
    KL of the two Gaussian steps (UniRL `add_kl_coefficient: true`). False: ½·mean((μ_θ − μ_old)²),
    the raw mean shift, as the reference's `add_kl_coefficient: false`."""

    def problems(self) -> list[str]:
        """The ranges of algorithm.dppo (Flow-DPPO's `config_problems` reports them: the block is
        read only when algorithm.name=flow_dppo)."""
        return non_negative_problems({"algorithm.dppo.kl_threshold": self.kl_threshold})


@dataclass
class SFTConfig:
    """Flow-matching SFT (docs/algorithms.md §12); defaults of diffusers'
    `examples/dreambooth/train_dreambooth_lora_sd3.py` (its argparse defaults) and
    `training_utils.compute_density_for_timestep_sampling` / `compute_loss_weighting_for_sd3`."""

    source: SFTSource = "dataset"
    """"dataset": image–prompt pairs from data.image_manifest (no rollout, no reward scoring in
    training); "best_of_n": each step's rollout groups, the `keep_per_group` highest-reward
    samples of each prompt group (rejection-sampling fine-tune, online)."""
    weighting_scheme: WeightingScheme = "logit_normal"
    """diffusers' `--weighting_scheme`: "logit_normal" and "mode" shape the density the σ's are
    drawn from (loss weight 1); "sigma_sqrt" (w = σ⁻²) and "cosmap" (w = 2/(π(1 − 2σ + 2σ²)))
    draw uniformly and weight the loss; "none" draws uniformly with weight 1."""
    logit_mean: float = 0.0
    """Mean of the normal whose sigmoid is the logit-normal draw u."""
    logit_std: float = 1.0
    """Std of that normal."""
    mode_scale: float = 1.29
    """Scale of the "mode" density u ← 1 − u − s·(cos²(πu/2) − 1 + u)."""
    precondition_outputs: bool = True
    """diffusers' `--precondition_outputs` (default 1): regress the x0 prediction x_σ − σ·v̂ on
    x0 (a σ²-weighted velocity loss); false regresses v̂ on the velocity ε − x0."""
    num_train_timesteps: int = 1000
    """T of the training σ table: u in [0, 1) picks index ⌊u·T⌋ (the scheduler's config)."""
    timestep_shift: float = 3.0
    """Static shift s of the training σ table σ_i = s·t/(1 + (s − 1)·t), t = (T − i)/T, as the
    family's `FlowMatchEulerDiscreteScheduler` builds it: 3.0 for SD3 / SD3.5 (their
    scheduler_config.json), 1.0 for the toy model and for FLUX / Qwen-Image, whose dynamic
    shifting leaves the training table unshifted."""
    draws_per_sample: int = 1
    """(σ, ε) draws each sample trains on per step, one forward each (diffusers: 1)."""
    keep_per_group: int = 1
    """best_of_n: samples kept from each prompt group, highest reward first (ties: batch order)."""
    tied_groups: SFTTiedGroups = "keep"
    """best_of_n: a prompt group whose samples all score the same. "keep" (RAFT's best-of-N,
    which keeps each prompt's top sample whatever the spread): its first `keep_per_group`
    samples train; "drop": it gives none (only groups the reward tells apart train)."""

    def problems(self) -> list[str]:
        """The ranges of algorithm.sft (Flow-SFT's `config_problems` reports them)."""
        problems = []
        if self.logit_std <= 0:
            problems.append(f"algorithm.sft.logit_std must be > 0, got {self.logit_std}")
        if self.num_train_timesteps < 1:
            problems.append(f"algorithm.sft.num_train_timesteps must be >= 1, got {self.num_train_timesteps}")
        if self.timestep_shift <= 0:
            problems.append(f"algorithm.sft.timestep_shift must be > 0, got {self.timestep_shift}")
        if self.draws_per_sample < 1:
            problems.append(f"algorithm.sft.draws_per_sample must be >= 1, got {self.draws_per_sample}")
        if self.keep_per_group < 1:
            problems.append(f"algorithm.sft.keep_per_group must be >= 1, got {self.keep_per_group}")
        return problems


@dataclass
class AlgorithmConfig:
    name: str = "grpo"
    """"grpo" (Flow-GRPO clipped surrogate; with rollout.kernel / rollout.sde_window also
    Flow-GRPO-Fast, CPS, MixGRPO and DanceGRPO recipes), "grpo_guard" (GRPO-Guard: RatioNorm on
    the same surrogate; needs a Gaussian kernel), "nft" (DiffusionNFT, forward process, any
    sampler), "awm" (advantage-weighted matching: the flow-matching loss on the rollout's x0,
    weighted by advantage), "dpo" (Flow-DPO on preference pairs, online or offline), "dgpo" (DGPO: a group
    preference on the forward process, any sampler), "flow_dppo" (Flow-DPPO: the Flow-GRPO rollout
    and ratio with a trust region on each step's Gaussian KL instead of the ratio clip), "ar_grpo"
    (the GRPO clipped surrogate per image token, for token-autoregressive families: Janus-Pro), "reward_feedback" (a
    differentiable reward back-propagated through the last sampling steps: ReFL, DRaFT-K,
    DRaFT-LV, AlignProp), "sft" (flow-matching SFT on an image–prompt dataset or the best of
    each rollout group), or your own algorithm class as "package.module:Class" when listed in
    algorithm.allow_import. What a run builds for it (a reference, the rollout or a preference
    dataset) is the class's declaration (`algorithms/base.py`)."""
    allow_import: list[str] = field(default_factory=list)
    """Dotted algorithm.name paths ("package.module:Class", your own algorithm) allowed to be
    imported: importing a module runs its code, so only a list on your own command line or
    recipe counts (a checkpoint's stored list is ignored), as with reward.allow_import and
    model.allow_import."""
    clip_range: float = 1e-4
    """PPO clip range epsilon of the ratio (Flow-GRPO: 1e-4)."""
    adv_clip_max: float = 5.0
    """Advantages are clamped to [-adv_clip_max, adv_clip_max] (Flow-GRPO: 5)."""
    kl_beta: float = 0.0
    """Weight of the KL to the reference (adapter-disabled) policy; 0 skips the reference pass.
    DiffusionNFT: the official `train.beta` (1e-4) on the velocity KL. Unused by dpo, which
    always evaluates the reference."""
    kl_type: KLType = "latent_mean"
    """"latent_mean": mean((mu - mu_ref)^2) / (2 s^2) as in Flow-GRPO code (docs/algorithms.md §2.5);
    "velocity": mean((v - v_ref)^2)."""
    timestep_fraction: float = 0.99
    """Train int(num_steps * fraction) stochastic steps of each trajectory (grpo: which ones is
    timestep_selection); nft and dpo train that many of the rollout schedule's σ's per sample,
    in a random order; awm draws algorithm.awm.train_timesteps σ's from the first that many."""
    timestep_selection: TimestepSelection = "first"
    """"first": the first stochastic steps, in order (Flow-GRPO). "random": a random subset of
    the stochastic steps, the final denoising step never included (DanceGRPO's timestep
    dropout, §3.1); drawn per training step from the step's sample seeds (so resumable),
    shared by the step's samples where DanceGRPO draws per sample (one replay per step)."""
    detach_uncond: bool = False
    """In replay with CFG, stop the gradient through the unconditional branch v_u. False (the
    default, as Flow-GRPO's current `train_sd3.py` / `train_sd3_fast.py`, which removed their
    detach upstream in "fix cfg gradient detach") sends the gradient through both branches: v_c
    with scale w, v_u with scale 1 − w (−3.5 at w = 4.5), so the update also moves the
    unconditional prediction the sampler uses. True moves v_u + w(v_c − v_u) only through v_c
    (the older Flow-GRPO scripts; lets model.cfg_batch=split skip autograd on the unconditional
    half). The forward value — and so every log-prob and ratio — is the same either way. Replay
    always uses the rollout's guidance scale (the log-prob must be of the policy that sampled);
    for CFG-free training sample with rollout.guidance_scale=1."""
    drop_zero_advantage: bool = True
    """Drop samples whose advantage is exactly 0 (constant-reward groups) before replay, as
    Flow-GRPO does: they carry no policy gradient but would still dilute the policy loss while
    the KL term applies in full. Random dropped samples are put back until the kept count
    divides into the step's micro-batches, whose number stays fixed (they get smaller)."""
    token_log_prob: TokenLogProb = "guided"
    """ar_grpo: which log-prob of an image token the ratio and KL use. "guided": the distribution
    that sampled it, softmax((l_u + w (l_c − l_u)) / T) over both CFG streams (the ratio is of
    the sampling policy, exactly 1 before the update). "conditional": the conditional stream
    alone, softmax(l_c / T), while sampling keeps CFG, as T2I-R1's Janus trainer scores its
    tokens (its replay runs the conditional prompts only). The rollout records the same kind."""
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    guard: GuardConfig = field(default_factory=GuardConfig)
    nft: NFTConfig = field(default_factory=NFTConfig)
    """Options read when name=nft."""
    dpo: DPOConfig = field(default_factory=DPOConfig)
    """Options read when name=dpo."""
    dgpo: DGPOConfig = field(default_factory=DGPOConfig)
    """Options read when name=dgpo."""
    reward_feedback: RewardFeedbackConfig = field(default_factory=RewardFeedbackConfig)
    """Options read when name=reward_feedback."""
    awm: AWMConfig = field(default_factory=AWMConfig)
    """Options read when name=awm."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """Options read when name=sft."""
    dppo: DPPOConfig = field(default_factory=DPPOConfig)
    """Options read when name=flow_dppo."""

    def problems(self) -> list[str]:
        """The ranges every algorithm reads (the options one algorithm owns, algorithm.nft,
        .dpo, .guard, are its `config_problems`' to check: algorithms/base.py)."""
        problems = []
        if self.clip_range <= 0:
            problems.append(f"algorithm.clip_range must be > 0, got {self.clip_range}")
        if self.adv_clip_max <= 0:  # clamp(A, -0, 0) zeroes every advantage: nothing would train
            problems.append(
                f"algorithm.adv_clip_max must be > 0 (advantages are clamped to ±it), got {self.adv_clip_max}"
            )
        problems += non_negative_problems({"algorithm.kl_beta": self.kl_beta})
        if not 0 < self.timestep_fraction <= 1:
            problems.append(f"algorithm.timestep_fraction must be in (0, 1], got {self.timestep_fraction}")
        return problems + self.advantage.problems() + self.rollout_correction.problems()
