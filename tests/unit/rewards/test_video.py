"""Video media in the reward path: per-frame scoring with a reduction, chunked calls, a
video-native scorer, the temporal-consistency reward, and the runtimes on video."""

from __future__ import annotations

import pytest
import torch

from genalign.rewards.composite import build_reward_runtime
from genalign.rewards.config import RewardConfig
from genalign.rewards.video import TemporalConsistencyReward, reduce_frames, score_media, temporal_consistency


class FrameMean:
    """Mean pixel / 255 of each image, recording the batch size of every call."""

    name = "frame_mean"

    def __init__(self):
        self.calls: list[int] = []

    def score(self, images, prompts, metadata):
        assert images.ndim == 4 and len(prompts) == len(metadata) == images.shape[0]
        self.calls.append(images.shape[0])
        return images.float().mean(dim=(1, 2, 3)) / 255.0


def video(levels: list[list[int]]) -> torch.Tensor:
    """[B, F, 3, 2, 2] uint8 whose frame (b, f) is filled with levels[b][f]."""
    return torch.tensor(levels, dtype=torch.uint8)[:, :, None, None, None].expand(-1, -1, 3, 2, 2).contiguous()


def test_reduce_frames_mean_and_min_by_hand():
    scores = torch.tensor([[0.2, 0.4, 0.9], [1.0, 0.0, 0.5]])
    # means: (0.2+0.4+0.9)/3 = 0.5, (1+0+0.5)/3 = 0.5; mins: 0.2, 0.0
    torch.testing.assert_close(reduce_frames(scores, "mean"), torch.tensor([0.5, 0.5]))
    torch.testing.assert_close(reduce_frames(scores, "min"), torch.tensor([0.2, 0.0]))
    with pytest.raises(ValueError, match="reward.video_reduction='max'"):
        reduce_frames(scores, "max")


def test_image_scorer_on_video_is_per_frame_in_chunks_and_reduced():
    media = video([[0, 51, 255], [102, 102, 204]])  # 2 videos x 3 frames
    scorer = FrameMean()
    mean = score_media(scorer, media, ["a", "b"], [{}, {}], "mean", frame_batch_size=4)
    # frame scores 0, 0.2, 1 | 0.4, 0.4, 0.8 -> means 0.4, 0.5333; 6 frames in calls of <= 4
    torch.testing.assert_close(mean, torch.tensor([0.4, 1.6 / 3]))
    assert scorer.calls == [4, 2]
    torch.testing.assert_close(score_media(FrameMean(), media, ["a", "b"], [{}, {}], "min"), torch.tensor([0.0, 0.4]))
    images = media[:, 0]  # [B, 3, H, W]: passed through untouched
    torch.testing.assert_close(score_media(FrameMean(), images, ["a", "b"], [{}, {}], "min"), torch.tensor([0.0, 0.4]))


def test_temporal_consistency_by_hand_and_video_only():
    media = video([[0, 0, 0], [0, 255, 0], [0, 51, 102]])
    # mean |Δ| / 255 over the 2 transitions: 0 | (1 + 1)/2 = 1 | (0.2 + 0.2)/2 = 0.2
    torch.testing.assert_close(temporal_consistency(media), torch.tensor([1.0, 0.0, 0.8]))
    reward = TemporalConsistencyReward()
    # video_native: score_media hands it the whole video, not frames
    torch.testing.assert_close(score_media(reward, media, ["p"] * 3, [{}] * 3), torch.tensor([1.0, 0.0, 0.8]))
    with pytest.raises(ValueError, match="needs uint8 video"):
        temporal_consistency(media[:, 0])
    with pytest.raises(ValueError, match="at least 2 frames"):
        temporal_consistency(media[:, :1])


def test_local_runtime_scores_video_with_the_configured_reduction(fakes_on_path):
    media = video([[0, 255], [128, 128]])
    runtime = build_reward_runtime(
        RewardConfig(components={"jpeg_compressibility": 0.0, "temporal_consistency": 1.0}), "cpu"
    )
    # |255 - 0| / 255 = 1 -> 0; a still video -> 1
    torch.testing.assert_close(
        runtime.score(media, ["a", "b"], []).components["temporal_consistency"], torch.tensor([0.0, 1.0])
    )
    fake = {
        "components": {"reward_fakes:MeanPixelReward": 1.0},
        "allow_import": ["reward_fakes:MeanPixelReward"],
        "batch_size": 1,
    }
    for reduction, expected in (("mean", [0.5, 128 / 255]), ("min", [0.0, 128 / 255])):
        runtime = build_reward_runtime(RewardConfig(video_reduction=reduction, **fake), "cpu")
        torch.testing.assert_close(runtime.score(media, ["a", "b"], []).total, torch.tensor(expected))


def test_a_bad_video_reduction_is_a_config_error():
    with pytest.raises(ValueError, match="reward.video_reduction='median'"):
        build_reward_runtime(RewardConfig(components={"temporal_consistency": 1.0}, video_reduction="median"), "cpu")


def test_ray_reward_worker_body_scores_video_per_frame():
    """The Ray actor body (called here in-process) applies the same per-frame reduction."""
    from genalign.rewards.ray_runtime import RewardWorker

    media = video([[0, 255], [128, 128]])
    worker = RewardWorker("jpeg_compressibility", "cpu", {}, [], "min", 1)
    direct = torch.stack([worker.scorer.score(media[:, f], ["a", "b"], [{}, {}]) for f in range(2)], dim=1)  # [B, F]
    torch.testing.assert_close(worker.score(media, ["a", "b"], [{}, {}]), direct.min(dim=1).values)
