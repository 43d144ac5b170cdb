"""Finite numbers only: where a NaN or infinity would poison a run, it stops with one line.

Where it fits: a loaded checkpoint's tensors (`runs.checkpoint.load_checkpoint`), the base
model's weights (`training.setup.build_policy`), each rollout's latents and decoded images
(`rollout.collector`) are checked here. A NaN in a LoRA tensor otherwise makes every image
NaN, every reward equal, every group's advantage zero: nothing trains, the loss check never
fires, and checkpoints are written with the NaN in them.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

from genalign.config.errors import UserError


class NonFiniteError(UserError, FloatingPointError):
    """A NaN or infinity where the run needs finite numbers; the message says where.

    `rows` are the batch rows (samples) that hold one, when the check was over a batch."""

    def __init__(self, message: str, rows: list[int] | None = None):
        super().__init__(message)
        self.rows = rows or []


def kind(tensor: torch.Tensor) -> str:
    """ "NaN", "inf" or "NaN and inf": what a non-finite tensor holds (for the message)."""
    values = tensor.detach()
    has_nan, has_inf = bool(torch.isnan(values).any()), bool(torch.isinf(values).any())
    return " and ".join(name for name, present in (("NaN", has_nan), ("inf", has_inf)) if present)


def is_finite(tensor: torch.Tensor) -> bool:
    """True for integer/bool tensors and float tensors without NaN or inf (one host sync)."""
    if not (tensor.is_floating_point() or tensor.is_complex()):
        return True
    return bool(torch.isfinite(tensor.detach()).all())


def first_non_finite(tensors: dict[str, torch.Tensor]) -> str | None:
    """The name of the first tensor holding a NaN or inf (in the dict's order), else None."""
    return next((name for name, tensor in tensors.items() if torch.is_tensor(tensor) and not is_finite(tensor)), None)


def non_finite_rows(batch: torch.Tensor) -> list[int]:
    """Rows (dim 0) of `batch` [B, ...] holding a NaN or inf."""
    if batch.numel() == 0 or not batch.is_floating_point():
        return []
    bad = ~torch.isfinite(batch.detach()).reshape(batch.shape[0], -1).all(dim=1)  # [B]
    return bad.nonzero().flatten().tolist()


def require_finite_rows(batch: torch.Tensor, what: str) -> None:
    """Raise `NonFiniteError` (with `rows`) when any row of `batch` [B, ...] is not finite."""
    rows = non_finite_rows(batch)
    if rows:
        raise NonFiniteError(f"{what}: rows {rows} hold {kind(batch[rows])}", rows=rows)


@contextmanager
def named_step(where: str) -> Iterator[None]:
    """Prefix a `NonFiniteError` raised inside with where it happened ("step 7", "eval step 0")."""
    try:
        yield
    except NonFiniteError as exc:
        raise NonFiniteError(f"{where}: {exc}", rows=exc.rows) from None
