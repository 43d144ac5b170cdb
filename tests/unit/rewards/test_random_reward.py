import numpy as np
import torch

from genalign.rewards.random_reward import RandomReward, random_scores


def test_scores_ignore_images_and_follow_seed_and_call_count():
    black = torch.zeros(4, 3, 8, 8, dtype=torch.uint8)
    white = torch.full((4, 3, 8, 8), 255, dtype=torch.uint8)
    first, second = RandomReward(seed=3), RandomReward(seed=3)
    a0 = first.score(black, ["p"] * 4, [{}] * 4)
    b0 = second.score(white, ["q"] * 4, [{}] * 4)
    assert torch.equal(a0, b0)  # same (seed, call 0), different images and prompts
    a1 = first.score(black, ["p"] * 4, [{}] * 4)
    assert not torch.equal(a0, a1)  # call 1 draws afresh
    assert torch.equal(a1, random_scores(3, 1, 4))
    assert not torch.equal(a0, RandomReward(seed=4).score(black, ["p"] * 4, [{}] * 4))


def test_scores_are_uniform_in_unit_interval():
    scores = random_scores(0, 0, 4000)
    assert scores.dtype == torch.float32
    assert scores.min() >= 0 and scores.max() < 1
    assert abs(scores.mean().item() - 0.5) < 0.02
    assert abs(np.histogram(scores.numpy(), bins=4, range=(0, 1))[0] / 4000 - 0.25).max() < 0.03
