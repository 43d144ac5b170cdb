"""NextStep-1's sampler and its teacher-forced scoring: the decoder proposes a condition per
image token, the flow head walks an SDE from noise to the token under that condition.

Where it fits: the policy's `sample_tokens` / `token_log_probs` (policy.py) call these two
functions; both step the head with `genalign.sampling.kernels.transition_step`, so a head step
drawn in the rollout and the same step scored in replay are one computation (parity exactly 0).

What a trajectory stores (per sample): the head's whole walk for every image token,
`walks` [N, K + 1, D] (x at each of the K + 1 σ's of `head.head_sigmas`), from which the
token itself is the last state (layer-normed when the checkpoint samples with `use_norm`, as
the authors' pipeline does). Its log-prob positions are the stochastic head steps of every
token, [N·(K − 1)] (the last step is the authors' deterministic Euler step): the RL path
trains each token's head as Flow-GRPO trains a denoiser (docs/algorithms.md §6.3).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F

from genalign.models.base import guided_velocity
from genalign.models.nextstep.modeling import NextStepModel
from genalign.sampling.kernels import ode_step, transition_step

NoiseSource = Callable[[int], torch.Tensor]
"""draw(k) -> [B, D] float32: the head's initial noise (k = 0) and step k's noise (k >= 1) for
the token being sampled; rollout draws it from each sample's own generator."""


class Streams(NamedTuple):
    """Prompt ids [S, L] and padding [S, L] of the decoder streams run together: the B
    conditional rows, then (with CFG) the B unconditional ones."""

    ids: torch.Tensor
    padding: torch.Tensor


def token_from_walk(final_state: torch.Tensor, use_norm: bool) -> torch.Tensor:
    """The image token from the head's last state [..., D]: a parameter-free layer norm over
    the D values when `use_norm` (the authors' pipeline `use_norm=True`), else the state."""
    return F.layer_norm(final_state, final_state.shape[-1:], eps=1e-6) if use_norm else final_state


def guided(velocity: torch.Tensor, batch: int, guidance_scale: float, detach_uncond: bool = False) -> torch.Tensor:
    """CFG over [S, ...] rows = [conditional; unconditional] -> [B, ...] (`guided_velocity`,
    the authors' `get_velocity_from_cfg`); w <= 1 runs the conditional rows alone."""
    if guidance_scale <= 1.0:
        return velocity[:batch]
    return guided_velocity(velocity[batch:], velocity[:batch], guidance_scale, detach_uncond)


class Walks(NamedTuple):
    walks: torch.Tensor  # [B, N, K + 1, D] float32 the head's states, token by token
    log_probs: torch.Tensor  # [B, N·(K − 1)] float32 each stochastic step's log-prob as drawn


def head_walk(
    model: NextStepModel,
    cond: torch.Tensor,
    batch: int,
    sigmas: torch.Tensor,
    guidance_scale: float,
    kernel: str,
    noise_level: float,
    draw: NoiseSource,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row: x_0 = draw(0), K − 1 kernel steps (step k's noise draw(k + 1)) and
    the last deterministic Euler step. `cond` [S, H] -> the walk [B, K + 1, D] float32 and the
    kernel steps' log-probs [B, K − 1]."""
    head = model.image_head
    x = draw(0).float()  # [B, D]
    walk, log_probs = [x], []
    last = len(sigmas) - 2
    for k in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[k], sigmas[k + 1]
        streams = torch.cat([x] * (cond.shape[0] // batch))  # [S, D] the same state in every stream
        v = guided(head.velocity(streams, sigma, cond).float(), batch, guidance_scale)  # [B, D]
        if k == last:
            x = ode_step(x, v, sigma, sigma_next)  # [B, D]
        else:  # σ_1 guards a kernel that divides by 1 − σ (flow_sde) at σ_0 = 1, as the flow families' schedules
            step = transition_step(
                kernel, x, v, sigma, sigma_next, noise_level, noise=draw(k + 1), sigma_max_guard=float(sigmas[1])
            )
            x = step.prev_latents
            log_probs.append(step.log_prob)
        walk.append(x)
    return torch.stack(walk, dim=1), torch.stack(log_probs, dim=1)  # [B, K + 1, D], [B, K − 1]


@torch.no_grad()
def sample_walks(
    model: NextStepModel,
    streams: Streams,
    num_tokens: int,
    sigmas: torch.Tensor,
    guidance_scale: float,
    kernel: str,
    noise_level: float,
    draw: NoiseSource,
    use_norm: bool,
) -> Walks:
    """Autoregressive sampling with a key-value cache: prefill the prompt, then per image token
    a head walk and one decoder step on its embedding (in every stream)."""
    from transformers import DynamicCache

    batch = streams.ids.shape[0] // (2 if guidance_scale > 1.0 else 1)
    cache = DynamicCache()
    padding = streams.padding
    hidden, cache = model.decode_hidden(model.embed_tokens(streams.ids), padding, cache)  # [S, L, H]
    state = hidden[:, -1]  # [S, H]
    walks, log_probs = [], []
    for i in range(num_tokens):
        walk, walk_log_probs_i = head_walk(
            model, model.head_condition(state, i), batch, sigmas, guidance_scale, kernel, noise_level, draw
        )  # [B, K + 1, D], [B, K − 1]
        walks.append(walk)
        log_probs.append(walk_log_probs_i)
        token = token_from_walk(walk[:, -1], use_norm)  # [B, D]
        embed = model.image_in_projector(token.to(model.image_in_projector.weight.dtype))  # [B, H]
        embed = torch.cat([embed] * (streams.ids.shape[0] // batch))[:, None]  # [S, 1, H]
        padding = torch.cat([padding, padding.new_ones(padding.shape[0], 1)], dim=1)  # [S, L + i + 1]
        hidden, cache = model.decode_hidden(embed, padding, cache)
        state = hidden[:, -1]  # [S, H]
    return Walks(torch.stack(walks, dim=1), torch.cat(log_probs, dim=1))  # [B, N, K + 1, D], [B, N·(K − 1)]


def walk_log_probs(
    model: NextStepModel,
    streams: Streams,
    walks: torch.Tensor,
    sigmas: torch.Tensor,
    guidance_scale: float,
    kernel: str,
    noise_level: float,
    use_norm: bool,
    detach_uncond: bool = False,
) -> torch.Tensor:
    """Teacher forcing: one decoder forward over [prompt, tokens 0..N−2] gives every token's
    condition, one batched head call every stochastic step's velocity, and the kernel scores
    the stored next states. walks [B, N, K + 1, D] -> log-probs [B, N·(K − 1)] float32 (token
    major); grad follows the caller's mode."""
    batch, count, states, dim = walks.shape
    steps = states - 2  # stochastic steps per token (the last step is deterministic)
    repeat = streams.ids.shape[0] // batch  # S / B
    tokens = token_from_walk(walks[:, :, -1], use_norm)  # [B, N, D]
    weight = model.image_in_projector.weight
    image_embeds = model.image_in_projector(tokens[:, :-1].to(weight.dtype))  # [B, N − 1, H]
    embeds = torch.cat(
        [model.embed_tokens(streams.ids), torch.cat([image_embeds] * repeat)], dim=1
    )  # [S, L + N − 1, H]
    padding = torch.cat([streams.padding, streams.padding.new_ones(len(streams.padding), count - 1)], dim=1)
    hidden, _ = model.decode_hidden(embeds, padding)  # [S, L + N − 1, H]
    prompt_len = streams.ids.shape[1]
    index = torch.arange(count, device=walks.device)  # [N]
    cond = model.head_condition(hidden[:, prompt_len - 1 :], index)  # [S, N, H]
    x = walks[:, :, :steps].reshape(-1, dim)  # [B·N·(K−1), D]
    nxt = walks[:, :, 1 : steps + 1].reshape(-1, dim)  # [B·N·(K−1), D]
    sigma = sigmas[:steps].to(walks.device).repeat(batch * count)  # [B·N·(K−1)]
    sigma_next = sigmas[1 : steps + 1].to(walks.device).repeat(batch * count)  # [B·N·(K−1)]
    cond_rows = cond[:, :, None].expand(-1, -1, steps, -1).reshape(repeat * batch * count * steps, -1)
    velocity = model.image_head.velocity(torch.cat([x] * repeat), sigma.repeat(repeat), cond_rows).float()
    v = guided(velocity, len(x), guidance_scale, detach_uncond)  # [B·N·(K−1), D]
    step = transition_step(
        kernel, x, v, sigma.cpu(), sigma_next.cpu(), noise_level, prev_latents=nxt, sigma_max_guard=float(sigmas[1])
    )
    return step.log_prob.reshape(batch, count * steps)  # [B, N·(K−1)]
