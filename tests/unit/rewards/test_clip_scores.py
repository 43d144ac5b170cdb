"""CLIPScore and PickScore from embeddings, by hand (docs/algorithms.md §7.2); the models
themselves are exercised on tiny CLIPs in tests/integration/test_rewards_clip.py."""

from __future__ import annotations

import math

import torch

from genalign.rewards.clip_score import clip_score
from genalign.rewards.pickscore import pickscore


def _unit(*values: float) -> torch.Tensor:
    vector = torch.tensor(values)
    return vector / vector.norm()


def test_clip_score_is_100_cos_over_30():
    image = torch.stack([_unit(1.0, 0.0), _unit(1.0, 1.0)])  # [2, 2]
    text = torch.stack([_unit(1.0, 0.0), _unit(1.0, 0.0)])
    # cos = 1 and 1/√2
    torch.testing.assert_close(clip_score(image, text), torch.tensor([100 / 30, 100 / math.sqrt(2) / 30]))


def test_pickscore_is_the_learned_scale_times_cos_over_26():
    image = torch.stack([_unit(3.0, 4.0)])
    text = torch.stack([_unit(0.0, 1.0)])  # cos = 0.8
    logit_scale = torch.tensor(math.log(100.0))
    torch.testing.assert_close(pickscore(image, text, logit_scale), torch.tensor([100 * 0.8 / 26]))
