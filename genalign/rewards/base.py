"""`RewardFunction`: the contract every scorer implements, shipped or your own.

Where it fits: the reward runtimes (`composite.py`, `ray_runtime.py`, the reward server) build
a scorer as `cls(device=..., **reward.kwargs.<name>)` and call `score` on decoded rollout
images (uint8 [B, 3, H, W], identical at train and eval time; video [B, F, 3, H, W] is scored
per frame by `rewards/video.py` unless the scorer sets `video_native`) with the prompts and
metadata (an editing prompt's source images ride in its metadata: `source_images`); the
composite weights the components. Only `score` is required: every other member
is optional, and genalign reads it through the functions below, which supply the default a
scorer leaves out (so a plain class with a `score` method is a complete scorer). The config
checks (`preflight/reward_contract.py`) hold a scorer to this before anything loads. A reward
never imports a model family.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar, Protocol

import torch

from genalign.data.source_images import load_sources


class RewardError(RuntimeError):
    """A scorer produced an unusable score; the message names the reward, prompt and sample."""


class RewardFunction(Protocol):
    """A scorer. Only `score` is required. The other members are optional: each has its
    default here, which a scorer inherits by subclassing `RewardFunction` (optional) and which
    genalign supplies for a plain class that leaves it out (`offload`, `onload`,
    `is_video_native`, `min_frames` below). The constructor takes `device=` (a torch device
    string) plus the scorer's `reward.kwargs.<name>` options as keywords."""

    name: ClassVar[str] = ""
    """Optional: a short name for messages; genalign names a scorer by its component key."""
    video_native: ClassVar[bool] = False
    """Optional: True when `score` takes whole videos [B, F, 3, H, W]; False (default): each
    frame is scored as an image and the frames' scores reduced by `reward.video_reduction`."""
    min_frames: ClassVar[int] = 1
    """Optional: frames per sample the scorer needs (a frame-difference reward: 2); `genalign
    config` refuses a run whose `model.num_frames` is fewer, before anything loads."""
    needs_source: ClassVar[bool] = False
    """Optional: True when the scorer compares each result with the source image(s) its prompt
    edits (an editing reward); they reach `score` in `metadata` (read them with
    `source_images(metadata)`), and `genalign config` refuses a run whose manifests carry
    none. False (default): sources, when present, are there to read but not required."""
    differentiable: ClassVar[bool] = False
    """Optional: True when the scorer also has `score_pixels`, scores that carry gradients to
    the image. An algorithm that back-propagates through the reward (reward feedback: ReFL,
    DRaFT, AlignProp) accepts only such scorers; `genalign config` refuses any other before
    anything loads."""

    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        """Required. uint8 images [B, 3, H, W] (video [B, F, 3, H, W] when `video_native`), the
        prompts and one metadata dict per sample (a .jsonl manifest's other fields) -> finite
        float32 scores [B] (on any device; the runtime moves them to the CPU)."""
        ...

    def score_pixels(self, pixels: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        """Required when `differentiable`: float pixels [B, 3, H, W] in [0, 1] (the decoder's
        output, not rounded to uint8) that may carry autograd history -> scores [B] on the
        pixels' device, differentiable in them. Its preprocessing stays in torch (no PIL round
        trip), and it scores what `score` scores up to uint8 rounding and resampling."""
        ...

    def offload(self) -> None:
        """Optional: move weights off the accelerator while the policy trains (default: nothing)."""

    def onload(self) -> None:
        """Optional: bring weights back before scoring (default: nothing)."""


OPTIONAL_METHODS = ("offload", "onload")
"""Methods a scorer may leave out (no-ops then)."""


def offload(scorer: Any) -> None:
    """`scorer.offload()` when it has one (a rule reward need not)."""
    method = getattr(scorer, "offload", None)
    if method is not None:
        method()


def onload(scorer: Any) -> None:
    """`scorer.onload()` when it has one."""
    method = getattr(scorer, "onload", None)
    if method is not None:
        method()


def is_video_native(scorer: Any) -> bool:
    """Whether `scorer` (an instance or its class) takes whole videos."""
    return bool(getattr(scorer, "video_native", RewardFunction.video_native))


def min_frames(scorer: Any) -> int:
    """Frames per sample `scorer` (an instance or its class) needs."""
    return int(getattr(scorer, "min_frames", RewardFunction.min_frames))


def wants_source(scorer: Any) -> bool:
    """Whether `scorer` (an instance or its class) needs its prompts' source images."""
    return bool(getattr(scorer, "needs_source", RewardFunction.needs_source))


def source_images(metadata: list[dict[str, Any]]) -> torch.Tensor | None:
    """The source images the samples' prompts edit, uint8 [B, S, 3, H, W], read from the paths
    the manifest resolved into each sample's metadata (data/source_images.py); None when the
    prompts carry none (text-to-image)."""
    return load_sources(metadata)


def is_differentiable(scorer: Any) -> bool:
    """Whether `scorer` (an instance or its class) gives image gradients through `score_pixels`."""
    return bool(getattr(scorer, "differentiable", RewardFunction.differentiable))


def contract_problems(cls: Any, where: str) -> list[str]:
    """Why the class `cls` (named `where`, e.g. "reward.components.my_pkg:MyReward") is not a
    scorer genalign can build and call, one line each; [] when it is. Read from the class
    alone: nothing is constructed."""
    if not inspect.isclass(cls):
        return [f"{where}: {cls!r} is not a class; a scorer is a class with a score(images, prompts, metadata) method"]
    problems = []
    score = getattr(cls, "score", None)
    if not callable(score):
        problems.append(
            f"{where}: {cls.__name__} has no score(images, prompts, metadata) method, the one member a "
            "scorer must have (docs/rewards.md#your-own-scorer)"
        )
    elif not _accepts(score, 4):  # self, images, prompts, metadata
        problems.append(
            f"{where}: {cls.__name__}.score must take (images, prompts, metadata), got "
            f"{cls.__name__}.score{_signature(score)}"
        )
    if not _takes_keyword(cls, "device"):
        problems.append(
            f"{where}: {cls.__name__}(...) must accept device= (and its reward.kwargs options as "
            f"keywords); its constructor is {cls.__name__}{_signature(cls)}"
        )
    for name in OPTIONAL_METHODS:
        method = getattr(cls, name, None)
        if method is not None and (not callable(method) or not _accepts(method, 1)):
            problems.append(
                f"{where}: {cls.__name__}.{name} must be a method taking no arguments (or be left out: it is optional)"
            )
    if not isinstance(getattr(cls, "needs_source", False), bool):
        problems.append(f"{where}: {cls.__name__}.needs_source must be True or False")
    if not isinstance(getattr(cls, "video_native", False), bool):
        problems.append(f"{where}: {cls.__name__}.video_native must be True or False")
    differentiable = getattr(cls, "differentiable", False)
    if not isinstance(differentiable, bool):
        problems.append(f"{where}: {cls.__name__}.differentiable must be True or False")
    elif differentiable and not (
        callable(score_pixels := getattr(cls, "score_pixels", None)) and _accepts(score_pixels, 4)
    ):
        problems.append(
            f"{where}: {cls.__name__} declares differentiable=True but has no score_pixels(pixels, prompts, "
            "metadata) method (float pixels in [0, 1] with grad -> scores [B])"
        )
    frames = getattr(cls, "min_frames", 1)
    if not isinstance(frames, int) or isinstance(frames, bool) or frames < 1:
        problems.append(f"{where}: {cls.__name__}.min_frames must be an int >= 1, got {frames!r}")
    return problems


def _signature(obj: Any) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"


def _accepts(function: Any, positional: int) -> bool:
    """Whether `function` (unbound: self counts) can be called with `positional` arguments."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return True  # a builtin or C method: nothing to read, nothing to refuse
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return True
    usable = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in usable if p.default is p.empty]
    return len(required) <= positional <= len(usable)


def _takes_keyword(cls: type, name: str) -> bool:
    """Whether `cls(name=...)` is accepted by its constructor's signature."""
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind is p.VAR_KEYWORD or (p.name == name and p.kind is not p.POSITIONAL_ONLY) for p in parameters)
