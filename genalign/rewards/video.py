"""Video media for rewards: image scorers applied per frame, and a video-native reward.

Where it fits: a video family (wan) decodes uint8 video `[B, F, 3, H, W]`. Both reward
runtimes (local and Ray) call every scorer through `score_media`, so any image scorer works
on video unchanged: the frames are flattened to `[B·F, 3, H, W]`, scored in chunks of at
most `frame_batch_size` frames (reward.batch_size: the memory bound of one scorer call), and
reduced per video with `reward.video_reduction` ("mean" over frames, or "min": the worst
frame, a stricter signal that a single broken frame cannot hide behind). A scorer that sets
`video_native = True` (`TemporalConsistencyReward`) receives the video itself; one that sets
`min_frames` (2 for a frame difference) is refused by `genalign config` when
`model.num_frames` is fewer. Images `[B, 3, H, W]` pass straight through, so image families
see no difference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, get_args

import torch

from genalign.rewards.base import is_video_native
from genalign.rewards.config import VideoReduction
from genalign.rewards.options import parse_options

VIDEO_REDUCTIONS = get_args(VideoReduction)


def reduce_frames(frame_scores: torch.Tensor, reduction: VideoReduction) -> torch.Tensor:
    """Per-frame scores [B, F] -> one score per video [B]: mean or min over frames."""
    if reduction == "mean":
        return frame_scores.mean(dim=1)  # [B]
    if reduction == "min":
        return frame_scores.min(dim=1).values  # [B]
    raise ValueError(f"reward.video_reduction={reduction!r}: choose one of {list(VIDEO_REDUCTIONS)}")


def score_media(
    scorer,
    images: torch.Tensor,
    prompts: list[str],
    metadata: list[dict[str, Any]],
    reduction: VideoReduction = "mean",
    frame_batch_size: int = 16,
) -> torch.Tensor:
    """`scorer.score` on images [B, 3, H, W] or video [B, F, 3, H, W] -> scores [B].

    Images, and any media for a scorer with `video_native = True`, go to the scorer as they
    are. Video for an image scorer is scored per frame, `frame_batch_size` frames per call,
    and reduced over frames with `reduction`."""
    if images.ndim == 4 or is_video_native(scorer):
        return scorer.score(images, prompts, metadata)
    batch, num_frames = images.shape[:2]
    frames = images.flatten(0, 1)  # [B·F, 3, H, W]
    frame_prompts = [p for p in prompts for _ in range(num_frames)]
    frame_metadata = [m for m in metadata for _ in range(num_frames)]
    scores = []
    for start in range(0, frames.shape[0], frame_batch_size):
        stop = start + frame_batch_size
        scores.append(
            torch.as_tensor(scorer.score(frames[start:stop], frame_prompts[start:stop], frame_metadata[start:stop]))
            .float()
            .cpu()
        )
    frame_scores = torch.cat(scores)  # [B·F]
    if frame_scores.shape != (batch * num_frames,):
        raise ValueError(f"scored {batch * num_frames} frames but got {tuple(frame_scores.shape)} scores")
    return reduce_frames(frame_scores.view(batch, num_frames), reduction)  # [B]


@dataclass
class TemporalConsistencyOptions:
    """Options of the `temporal_consistency` reward."""

    def device_models(self, reward: str) -> tuple[()]:
        """Models on the scorer's device (the memory plan counts them): none, a rule."""
        return ()


def temporal_consistency(videos: torch.Tensor) -> torch.Tensor:
    """uint8 video [B, F, 3, H, W] -> float32 [B] = 1 − mean |x_{f+1} − x_f| / 255.

    In [0, 1]: 1 for a still video, lower the more consecutive frames differ (flicker, jumps).
    A frame-difference measure with no model to download; a frozen video scores 1, so use it
    as a weighted regulariser beside a content reward, not alone (alone it rewards no motion)."""
    if videos.dtype != torch.uint8 or videos.ndim != 5 or videos.shape[2] != 3:
        raise ValueError(
            f"temporal_consistency needs uint8 video [B, F, 3, H, W] (model.num_frames > 1), "
            f"got {videos.dtype} {tuple(videos.shape)}"
        )
    if videos.shape[1] < 2:
        raise ValueError("temporal_consistency needs at least 2 frames; set model.num_frames > 1")
    frames = videos.float() / 255.0  # [B, F, 3, H, W]
    change = (frames[:, 1:] - frames[:, :-1]).abs()  # [B, F-1, 3, H, W]
    return 1.0 - change.flatten(1).mean(dim=1)  # [B]


class TemporalConsistencyReward:
    """1 − mean absolute frame-to-frame change: a video-native smoothness signal."""

    name = "temporal_consistency"
    video_native = True
    min_frames = 2  # a change between frames: `genalign config` refuses model.num_frames=1

    def __init__(self, device: str = "cpu", **kwargs: Any):
        self.options = parse_options(self.name, TemporalConsistencyOptions, kwargs)
        self.device = device

    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        return temporal_consistency(images)  # [B]
