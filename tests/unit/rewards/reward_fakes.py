"""Scorers for runtime tests, loaded by dotted path ("reward_fakes:ConstantReward").

conftest.py puts this folder on sys.path (and on the Ray workers' PYTHONPATH), so the real
registry resolution path is exercised, in-process and inside Ray actors alike.
"""

from __future__ import annotations

import os
import threading
import time

import torch


class _Base:
    name = "fake"

    def __init__(self, device="cpu", **kwargs):
        self.device = device
        self.kwargs = kwargs
        self.offloaded = False

    def offload(self):
        self.offloaded = True

    def onload(self):
        self.offloaded = False


class MeanPixelReward(_Base):
    """Deterministic image reward: mean pixel / 255, optionally after sleeping delay_s."""

    def score(self, images, prompts, metadata):
        time.sleep(self.kwargs.get("delay_s", 0.0))
        return images.float().mean(dim=(1, 2, 3)) / 255.0


class SlowStartReward(MeanPixelReward):
    """Sleeps delay_s while being built (a reward model that loads slowly)."""

    def __init__(self, device="cpu", **kwargs):
        super().__init__(device, delay_s=0.0)
        time.sleep(kwargs.get("delay_s", 0.0))


class PromptLengthReward(_Base):
    def score(self, images, prompts, metadata):
        return torch.tensor([float(len(p)) for p in prompts])


class ThreadProbeReward(_Base):
    """Scores 0 and records, per call, the thread it ran on and its torch thread-local state."""

    def __init__(self, device="cpu", **kwargs):
        super().__init__(device, **kwargs)
        self.calls = []

    def score(self, images, prompts, metadata):
        self.calls.append(
            {
                "thread": threading.current_thread().name,
                "num_threads": torch.get_num_threads(),
                "grad_enabled": torch.is_grad_enabled(),
            }
        )
        return torch.zeros(len(prompts))


class NanReward(_Base):
    """NaN for the prompt equal to kwargs["bad_prompt"]."""

    def score(self, images, prompts, metadata):
        return torch.tensor([float("nan") if p == self.kwargs["bad_prompt"] else 0.5 for p in prompts])


class ShortReward(_Base):
    def score(self, images, prompts, metadata):
        return torch.zeros(len(prompts) - 1)


class RaisingReward(_Base):
    def score(self, images, prompts, metadata):
        raise ValueError("scorer exploded")


class ExplodingConstructor(_Base):
    def __init__(self, device="cpu", **kwargs):
        raise RuntimeError("must never be constructed")

    def score(self, images, prompts, metadata):
        raise AssertionError


class CrashReward(_Base):
    """Kills its own process on every call: an actor that dies each time."""

    def score(self, images, prompts, metadata):
        os._exit(1)


class CallSizeProbe(MeanPixelReward):
    """MeanPixelReward that records the batch size (`CALL_SIZES`) and the prompts
    (`CALL_PROMPTS`) of every call."""

    def score(self, images, prompts, metadata):
        CALL_SIZES.append(len(prompts))
        CALL_PROMPTS.append(list(prompts))
        return super().score(images, prompts, metadata)


CALL_SIZES: list[int] = []
CALL_PROMPTS: list[list[str]] = []


class MetadataReward(_Base):
    """metadata["value"] of each sample: shows per-sample metadata reaches the scorer."""

    def score(self, images, prompts, metadata):
        return torch.tensor([float(m["value"]) for m in metadata])
