"""Losses on the forward (noising) process: DiffusionNFT, Flow-DPO, DGPO, AWM and flow-matching
SFT (pure; docs/algorithms.md §4, §5.3, §9, §11, §12).

Where it fits: `algorithms/nft.py`, `algorithms/dpo.py`, `algorithms/dgpo.py` and
`algorithms/awm.py` noise clean samples x0 to x_σ = (1 − σ)·x0 + σ·ε (§1), evaluate velocities
there, and hand them to these functions.
Nothing here touches a model or a log-prob; every input is a tensor, every output a tensor.
"""

from __future__ import annotations

from typing import NamedTuple, get_args

import torch
import torch.nn.functional as F

from genalign.algorithms.config import AWMWeighting, NFTAdvantageMode

NFT_ADV_MODES = get_args(NFTAdvantageMode)
AWM_WEIGHTINGS = get_args(AWMWeighting)


def _broadcast(per_sample: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """[B] -> [B, 1, ..., 1] with as many dims as `like`."""
    return per_sample.view(-1, *([1] * (like.dim() - 1)))


def _mean_dims(values: torch.Tensor) -> torch.Tensor:
    """Mean over every non-batch dim: [B, ...] -> [B]."""
    return values.flatten(1).mean(dim=1)


def noised(clean: torch.Tensor, noise: torch.Tensor, sigma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x_σ = (1 − σ)·x0 + σ·ε and the flow-matching target v = ε − x0 (§1, §4.1).
    clean, noise [B, ...]; sigma [B]. Returns (x_σ [B, ...], v [B, ...])."""
    s = _broadcast(sigma.to(clean.dtype), clean)  # [B, 1, ...]
    return (1 - s) * clean + s * noise, noise - clean


def optimality_probability(
    advantages: torch.Tensor, adv_clip_max: float, adv_mode: NFTAdvantageMode = "all"
) -> torch.Tensor:
    """DiffusionNFT's reward -> r ∈ [0, 1] (§4.2, official `train_nft_sd3.py`):
    A ← clamp(A, ±adv_clip_max), then `adv_mode` (all | positive_only: max(A, 0) |
    negative_only: min(A, 0) | one_only: 1 if A > 0 else 0 | binary: sign(A)), then
    r = clamp(0.5 + 0.5·A / adv_clip_max, 0, 1). advantages [B] -> r [B]."""
    if adv_mode not in NFT_ADV_MODES:
        raise ValueError(f"algorithm.nft.adv_mode={adv_mode!r}: choose one of {NFT_ADV_MODES}")
    clipped = advantages.clamp(-adv_clip_max, adv_clip_max)  # [B]
    if adv_mode == "positive_only":
        clipped = clipped.clamp(min=0)
    elif adv_mode == "negative_only":
        clipped = clipped.clamp(max=0)
    elif adv_mode == "one_only":
        clipped = (clipped > 0).to(clipped.dtype)
    elif adv_mode == "binary":
        clipped = torch.sign(clipped)
    return (clipped / adv_clip_max / 2 + 0.5).clamp(0, 1)  # [B]


def implicit_velocities(
    velocity: torch.Tensor, old_velocity: torch.Tensor, beta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The implicit positive and negative policies of DiffusionNFT (§4.1):
    v⁺ = (1 − β)·v_old + β·v_θ,  v⁻ = (1 + β)·v_old − β·v_θ. v_old is a constant (detached).
    Both equal v_old exactly when v_θ == v_old. Shapes [B, ...]."""
    old = old_velocity.detach()
    return (1 - beta) * old + beta * velocity, (1 + beta) * old - beta * velocity


def adaptive_x0_loss(x0_prediction: torch.Tensor, clean: torch.Tensor, weight_min: float) -> torch.Tensor:
    """mean_dims (x̂0 − x0)² / w with w = sg(mean_dims |x̂0 − x0|) clipped below at `weight_min`,
    the weight computed in float64 as the official code does (§4.2). [B, ...] -> [B]."""
    with torch.no_grad():
        weight = _mean_dims((x0_prediction.double() - clean.double()).abs()).clamp(min=weight_min)  # [B]
    squared = (x0_prediction - clean) ** 2  # [B, ...]
    return _mean_dims(squared / _broadcast(weight, squared).to(squared.dtype))  # [B]


class NFTLossOutput(NamedTuple):
    loss: torch.Tensor  # scalar with grad: adv_clip_max · mean_b ℓ_b
    positive_loss: torch.Tensor  # [B] detached L⁺
    negative_loss: torch.Tensor  # [B] detached L⁻


def nft_policy_loss(
    velocity: torch.Tensor,
    old_velocity: torch.Tensor,
    noisy: torch.Tensor,
    clean: torch.Tensor,
    sigma: torch.Tensor,
    optimality: torch.Tensor,
    beta: float,
    adv_clip_max: float,
    weight_min: float = 1e-5,
) -> NFTLossOutput:
    """DiffusionNFT policy loss with adaptive x0 weighting, as the official code computes it (§4.2):

        v± = implicit_velocities(v_θ, v_old, β);  x̂0± = x_σ − σ·v±
        L± = adaptive_x0_loss(x̂0±, x0);  ℓ = r·L⁺/β + (1 − r)·L⁻/β;  loss = adv_clip_max · mean_b ℓ

    velocity, old_velocity, noisy, clean [B, ...]; sigma, optimality [B]. The x0-space form
    replaces the velocity MSE of §4.1 (they differ by the per-sample factor σ² that the adaptive
    weight absorbs); the ×adv_clip_max rescale is the official code's."""
    if beta <= 0:
        raise ValueError(f"algorithm.nft.beta must be > 0, got {beta}")
    positive, negative = implicit_velocities(velocity, old_velocity, beta)  # [B, ...] x2
    s = _broadcast(sigma.to(noisy.dtype), noisy)  # [B, 1, ...]
    positive_loss = adaptive_x0_loss(noisy - s * positive, clean, weight_min)  # [B]
    negative_loss = adaptive_x0_loss(noisy - s * negative, clean, weight_min)  # [B]
    r = optimality.detach()  # [B]
    per_sample = r * positive_loss / beta + (1 - r) * negative_loss / beta  # [B]
    return NFTLossOutput(adv_clip_max * per_sample.mean(), positive_loss.detach(), negative_loss.detach())


def old_policy_decay(optimizer_steps: int, flat: int, rate: float, hold: float) -> float:
    """The soft-update weight of the sampling (old) policy, DiffusionNFT `return_decay` (§4.2):
    η = 0 before `flat` optimizer steps, then min(rate·(steps − flat), hold).
    θ_old ← η·θ_old + (1 − η)·θ; η = 0 is a hard copy (on-policy)."""
    if optimizer_steps < flat:
        return 0.0
    return min((optimizer_steps - flat) * rate, hold)


class DPOLossOutput(NamedTuple):
    loss: torch.Tensor  # scalar with grad
    implicit_accuracy: torch.Tensor  # [P] detached: 1 where the policy prefers the chosen more than the reference does
    inside: torch.Tensor  # [P] detached logit of the preference


def flow_dpo_loss(
    chosen_error: torch.Tensor,
    rejected_error: torch.Tensor,
    ref_chosen_error: torch.Tensor,
    ref_rejected_error: torch.Tensor,
    beta: float,
) -> DPOLossOutput:
    """Diffusion-DPO with the flow-matching target (§5.3; Wallace et al., verl-omni `DPOLoss`):

        inside = −½·β·[(e_θ(w) − e_ref(w)) − (e_θ(l) − e_ref(l))],   L = −mean_p log σ(inside)

    Each e is the per-pair velocity MSE mean_dims (v̂(x_σ) − (ε − x0))² [P], the chosen (w) and
    rejected (l) images noised with the same σ and ε. At e_θ == e_ref, L = log 2."""
    if beta <= 0:
        raise ValueError(f"algorithm.dpo.beta must be > 0, got {beta}")
    margin = (chosen_error - ref_chosen_error.detach()) - (rejected_error - ref_rejected_error.detach())  # [P]
    inside = -0.5 * beta * margin  # [P]
    loss = -F.logsigmoid(inside).mean()
    return DPOLossOutput(loss, (inside.detach() > 0).float(), inside.detach())


def velocity_error(velocity: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """mean_dims (v̂ − v)²: [B, ...] -> [B] (the flow-matching loss per sample)."""
    return _mean_dims((velocity.float() - target.float()) ** 2)


def dgpo_group_weights(
    advantages: torch.Tensor,
    error_gap: torch.Tensor,
    group_index: torch.Tensor,
    group_sizes: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """DGPO's per-group weight, the sigmoid of the group preference logit (§9.2):

        S_g = Σ_{b ∈ g} A_b·β·(e_θ,b − e_ref,b) / |g|,   w_b = σ(S_{g(b)})

    advantages (clamped), error_gap = e_θ − e_ref (no grad), group_index (dense 0..G−1) and
    group_sizes |g(b)| are [B]; a group's members must all be in the batch. -> [B]. The
    gradient of −log σ(−S_g) is σ(S_g)·β/|g|·Σ A_b ∇e_θ,b: w carries the logit's saturation."""
    if beta <= 0:
        raise ValueError(f"algorithm.dgpo.beta must be > 0, got {beta}")
    terms = advantages.detach().float() * beta * error_gap.detach().float() / group_sizes.float()  # [B]
    num_groups = int(group_index.max()) + 1 if group_index.numel() else 0
    sums = torch.zeros(num_groups, dtype=terms.dtype, device=terms.device).index_add_(0, group_index, terms)  # [G]
    return torch.sigmoid(sums)[group_index]  # [B]


def dgpo_clip_mask(
    error: torch.Tensor, old_error: torch.Tensor, advantages: torch.Tensor, clip_range: float
) -> torch.Tensor:
    """Where DGPO's PPO-style clip stops a sample's gradient (§9.2): with ρ = exp(e_old − e_θ)
    (the error ratio, > 1 when the policy fits the sample better than the EMA weights),
    ρ > 1 + c where A > 0 and ρ < 1 − c where A ≤ 0. [B] x3 -> bool [B]."""
    ratio = torch.exp(old_error.detach().float() - error.detach().float())  # [B]
    return torch.where(advantages > 0, ratio > 1.0 + clip_range, ratio < 1.0 - clip_range)


def dgpo_policy_loss(
    error: torch.Tensor, group_weights: torch.Tensor, advantages: torch.Tensor, clipped: torch.Tensor
) -> torch.Tensor:
    """L = mean_b w_b·A_b·e_b with e_b the velocity error, detached where `clipped` (§9.2).
    [B] x4 -> scalar with grad through e."""
    kept = torch.where(clipped, error.detach(), error)  # [B]
    return (group_weights.detach() * advantages.detach() * kept).mean()


_AWM_FLOOR = 1e-10
"""Added to the error before the root / power of AWM's huber and ghuber weightings (the reference's)."""


def awm_log_prob(
    velocity: torch.Tensor,
    target: torch.Tensor,
    sigma: torch.Tensor,
    weighting: AWMWeighting = "ghuber",
    ghuber_power: float = 0.25,
) -> torch.Tensor:
    """AWM's per-sample "log-likelihood" ℓ = −w(e, σ): the weighted flow-matching error of v_θ
    at x_σ against the target ε − x0, in float64 as the reference computes it (§11.1):

        e = mean_dims (v_θ − (ε − x0))²
        uniform e | t σ·e | t_squared σ²·e | huber σ·(√(e + 1e-10) − 1e-5)
        ghuber σ·((e + 1e-10)^p − (1e-10)^p)/p

    velocity, target [B, ...]; sigma [B]. Returns ℓ [B] float64 (with grad through velocity)."""
    if weighting not in AWM_WEIGHTINGS:
        raise ValueError(f"algorithm.awm.weighting={weighting!r}: choose one of {AWM_WEIGHTINGS}")
    error = _mean_dims((velocity.double() - target.double()) ** 2)  # [B]
    t = sigma.double().reshape(-1)  # [B]
    if weighting == "uniform":
        weighted = error
    elif weighting == "t":
        weighted = error * t
    elif weighting == "t_squared":
        weighted = error * t**2
    elif weighting == "huber":
        weighted = (torch.sqrt(error + _AWM_FLOOR) - _AWM_FLOOR**0.5) * t
    else:
        floor = torch.tensor(_AWM_FLOOR, dtype=torch.float64)
        weighted = (torch.pow(error + _AWM_FLOOR, ghuber_power) - torch.pow(floor, ghuber_power)) * t / ghuber_power
    return -weighted  # [B]


def awm_advantages(advantages: torch.Tensor, adv_clip_max: float, advantage_max: float) -> torch.Tensor:
    """A ← clamp(A, ±adv_clip_max) / adv_clip_max · advantage_max (§11.1; [B] -> [B])."""
    return advantages.clamp(-adv_clip_max, adv_clip_max) / adv_clip_max * advantage_max


def awm_policy_loss(log_prob: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """−mean_b A_b · exp(ℓ_b − sg ℓ_b) (§11.1): the reference's on-policy surrogate, whose ratio is
    exactly 1, so the value is −mean A and the gradient −mean_b A_b ∇ℓ_b: samples with A > 0
    lower their weighted matching error, samples with A < 0 raise it. (The reference's PPO clip
    at clip_range 1 never acts on a ratio of 1 and is not kept.) log_prob, advantages [B] -> scalar."""
    ratio = torch.exp(log_prob - log_prob.detach())  # [B] == 1
    return -(advantages.to(log_prob.dtype) * ratio).mean()


# Flow-matching SFT (§12): the SD3 pretraining loss as diffusers' training scripts compute it.


def timestep_density(
    scheme: str, count: int, logit_mean: float, logit_std: float, mode_scale: float, generator: torch.Generator
) -> torch.Tensor:
    """u ∈ (0, 1) [count] float32 on the CPU, the SD3 paper's timestep densities (§12):
    logit_normal: u = sigmoid(n), n ~ N(logit_mean, logit_std²); mode: u = 1 − r − s·(cos²(πr/2) − 1 + r),
    r ~ U[0, 1); any other scheme: u ~ U[0, 1). One draw of the generator per value, in the
    order diffusers' `compute_density_for_timestep_sampling` draws them."""
    if scheme == "logit_normal":
        return torch.sigmoid(torch.normal(logit_mean, logit_std, size=(count,), generator=generator))
    uniform = torch.rand(count, generator=generator)  # [count]
    if scheme == "mode":
        return 1 - uniform - mode_scale * (torch.cos(torch.pi * uniform / 2) ** 2 - 1 + uniform)
    return uniform


def training_sigma_table(num_train_timesteps: int, shift: float) -> torch.Tensor:
    """The scheduler's training σ's [T] float32, 1 → shift(1/T): σ_i = time_shift((T − i)/T, shift),
    as `FlowMatchEulerDiscreteScheduler.__init__` builds them (static shift)."""
    t = torch.arange(num_train_timesteps, 0, -1, dtype=torch.float32) / num_train_timesteps  # [T]
    return shift * t / (1 + (shift - 1) * t)


def density_sigmas(u: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """σ = table[⌊u·T⌋] [B] (u [B] in [0, 1)); u = 1 exactly (a float32 sigmoid can round to 1)
    takes the last entry, where diffusers' index would fall off the table."""
    indices = (u * table.shape[0]).long().clamp(max=table.shape[0] - 1)  # [B]
    return table[indices]


def sd3_loss_weighting(scheme: str, sigma: torch.Tensor) -> torch.Tensor:
    """Per-sample loss weight [B] (§12): sigma_sqrt: σ⁻²; cosmap: 2 / (π·(1 − 2σ + 2σ²)); else 1."""
    if scheme == "sigma_sqrt":
        return sigma.float() ** -2.0
    if scheme == "cosmap":
        return 2 / (torch.pi * (1 - 2 * sigma + 2 * sigma**2))
    return torch.ones_like(sigma)


def flow_matching_loss(
    velocity: torch.Tensor,
    noisy: torch.Tensor,
    clean: torch.Tensor,
    noise: torch.Tensor,
    sigma: torch.Tensor,
    weight: torch.Tensor,
    precondition_outputs: bool,
) -> torch.Tensor:
    """The rectified-flow pretraining loss per sample (§12), [B]:
    preconditioned: mean_dims w·((x_σ − σ·v̂) − x0)²;  else mean_dims w·(v̂ − (ε − x0))².
    velocity, noisy, clean, noise [B, ...]; sigma, weight [B]. Computed in float32."""
    if precondition_outputs:
        prediction = noisy.float() - _broadcast(sigma.float(), noisy) * velocity.float()  # x̂0
        target = clean.float()
    else:
        prediction, target = velocity.float(), (noise - clean).float()
    return _mean_dims(_broadcast(weight.float(), prediction) * (prediction - target) ** 2)  # [B]
