"""NextStep-1's flow-matching head: a small AdaLN MLP that turns one decoder condition into one
continuous image token, and the σ schedule its sampler walks.

Where it fits: `modeling.NextStepModel.image_head`; the family's sampler (`sampling.py`) calls
`velocity` once per head step through the shared SDE kernels (`genalign/sampling/kernels.py`),
so rollout and replay score a head step with the same function as every flow family.

Conventions. The authors' head is trained on x_t = t·x_data + (1 − t)·ε and predicts
u = x_data − ε (t = 0 noise, t = 1 data). genalign's convention (docs/algorithms.md §1) is
σ = 1 − t with the velocity ε − x_data, so `velocity` returns −u evaluated at t = 1 − σ.

The module and parameter names are the published checkpoint's (`image_head.net.*`: the
authors' `FlowMatchingHead` / `SimpleMLPAdaLN`, stepfun-ai/NextStep-1 6e49bae
`nextstep/models/modeling_fm_head.py`), so a checkpoint's head loads unchanged; the code is
ours.
"""

from __future__ import annotations

import math

import torch
from torch import nn

FREQUENCY_DIM = 256
"""Width of the sinusoidal time features (the authors' `frequency_embedding_size`)."""


def time_features(t: torch.Tensor, dim: int = FREQUENCY_DIM, max_period: float = 10000.0) -> torch.Tensor:
    """[cos(t·f_j), sin(t·f_j)] with f_j = max_period^(−j/(dim/2)), j < dim/2: [B] -> [B, dim] float32."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32) / half).to(t.device)  # [dim/2]
    angles = t[:, None].float() * freqs[None]  # [B, dim/2]
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)  # [B, dim]


def _mlp(d_in: int, d_hidden: int, d_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, d_hidden), nn.SiLU(), nn.Linear(d_hidden, d_out))


class _TimeEmbedding(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.mlp = _mlp(FREQUENCY_DIM, dim, dim)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.mlp(time_features(t).to(self.mlp[0].weight.dtype))  # [B, dim]


class _ResidualBlock(nn.Module):
    """x + gate · MLP(LN(x)·(1 + scale) + shift), (shift, scale, gate) from the condition y."""

    def __init__(self, dim: int):
        super().__init__()
        self.in_ln = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = _mlp(dim, dim, dim)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim, 3 * dim))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        shift, scale, gate = self.adaLN_modulation(y).chunk(3, dim=-1)  # 3 x [B, dim]
        return x + gate * self.mlp(self.in_ln(x) * (1 + scale) + shift)  # [B, dim]


class _OutputLayer(nn.Module):
    def __init__(self, dim: int, out_dim: int):
        super().__init__()
        self.norm_final = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(dim, out_dim)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim, 2 * dim))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(y).chunk(2, dim=-1)  # 2 x [B, dim]
        return self.linear(self.norm_final(x) * (1 + scale) + shift)  # [B, out_dim]


class AdaLNMLP(nn.Module):
    """u(x_t, t, c): the head network, token [B, D] x time [B] x condition [B, H] -> [B, D]."""

    def __init__(self, token_dim: int, cond_dim: int, dim: int, layers: int):
        super().__init__()
        self.time_embed = _TimeEmbedding(dim)
        self.cond_embed = nn.Linear(cond_dim, dim)
        self.input_proj = nn.Linear(token_dim, dim)
        self.res_blocks = nn.ModuleList(_ResidualBlock(dim) for _ in range(layers))
        self.final_layer = _OutputLayer(dim, token_dim)

    def forward(self, x: torch.Tensor, t: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        y = self.time_embed(t) + self.cond_embed(c)  # [B, dim]
        h = self.input_proj(x)  # [B, dim]
        for block in self.res_blocks:
            h = block(h, y)
        return self.final_layer(h, y)  # [B, D]


class FlowHead(nn.Module):
    """The checkpoint's `image_head` (its one child is `net`)."""

    def __init__(self, token_dim: int, cond_dim: int, dim: int, layers: int):
        super().__init__()
        self.token_dim = token_dim
        self.net = AdaLNMLP(token_dim, cond_dim, dim, layers)

    def velocity(self, x: torch.Tensor, sigma: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """genalign's velocity ε − x_data at σ: x [B, D], σ [B] (or 0-d), cond [B, H] -> [B, D]
        in the head's dtype. The network reads t = 1 − σ in the condition's dtype (as the
        authors' sampler casts its time)."""
        t = (1 - torch.as_tensor(sigma, dtype=torch.float32, device=x.device)).expand(x.shape[0])  # [B]
        dtype = self.net.input_proj.weight.dtype
        return -self.net(x.to(dtype), t.to(cond.dtype), cond.to(dtype))  # [B, D]


def head_sigmas(num_steps: int, shift: float = 1.0, last_step: float = 0.04) -> torch.Tensor:
    """The σ's of the authors' head sampler (`FlowMatchingHead.sample`), float32 [num_steps + 1].

    t_i = linspace(0, 1 − last_step, num_steps)_i, shifted t ← t / (shift − (shift − 1)·t);
    σ_i = 1 − t_i for i < num_steps, and a last Euler step of length `last_step` in t:
    σ_num_steps = σ_(num_steps−1) − last_step (0 without a shift; the authors keep the step
    length under a shift, so the walk then stops short of σ = 0, and so does ours).
    """
    if num_steps < 2:
        raise ValueError(f"the head sampler needs at least 2 steps, got {num_steps}")
    t = torch.linspace(0, 1 - last_step, num_steps)  # [K]
    t = t / (shift - (shift - 1) * t)  # [K]
    sigmas = 1 - t  # [K]
    return torch.cat([sigmas, sigmas[-1:] - last_step])  # [K + 1]
