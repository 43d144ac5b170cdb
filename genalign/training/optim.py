"""The optimizer of the trained weights (AdamW, Flow-GRPO defaults in `ActorConfig`)."""

from __future__ import annotations

import torch

from genalign.training.config import ActorConfig


def build_optimizer(parameters: list[torch.nn.Parameter], actor: ActorConfig) -> torch.optim.AdamW:
    if not parameters:
        raise ValueError("no trainable parameters: check model.train_mode and model.lora.target_modules")
    return torch.optim.AdamW(
        parameters, lr=actor.lr, betas=tuple(actor.betas), weight_decay=actor.weight_decay, eps=actor.eps
    )
