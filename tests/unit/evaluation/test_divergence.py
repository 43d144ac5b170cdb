import math

import pytest
import torch

from genalign.evaluation.evaluator import EvalHistory, gold_divergence, standard_error

SE = [0.01, 0.01, 0.01, 0.01]
"""A standard error of 0.01 per evaluation: the difference of two means has SE 0.01·√2, so a
change counts when it exceeds 2·0.0141 = 0.028."""


def flagged(reward, gold, window=3, se=SE):
    return gold_divergence(reward, gold, window, se[: len(reward)], se[: len(gold)])


def test_reward_up_gold_flat_is_flagged():
    assert flagged([0.2, 0.5, 0.9], [0.6, 0.6, 0.55])


def test_reward_and_gold_up_is_not_flagged():
    assert not flagged([0.2, 0.5, 0.9], [0.3, 0.4, 0.5])


def test_reward_flat_is_not_flagged_even_if_gold_falls():
    assert not flagged([0.5, 0.5, 0.505], [0.6, 0.5, 0.4])


def test_too_few_evaluations_is_not_flagged():
    assert not flagged([0.1, 0.9], [0.5, 0.5])


def test_only_the_last_window_counts():
    # early gold rise does not hide a later divergence
    assert flagged([0.1, 0.2, 0.4, 0.8], [0.1, 0.5, 0.5, 0.5])


def test_the_tolerance_is_the_evaluations_noise():
    """A reward rise of 0.05 fires when evaluations are precise (SE 0.01) and not when they are
    noisy (SE 0.05: the rise is within 2·0.05·√2 = 0.14); a fixed 0.01 fired on both."""
    reward, gold = [0.40, 0.42, 0.45], [0.50, 0.50, 0.50]
    assert flagged(reward, gold, se=[0.01] * 3)
    assert not flagged(reward, gold, se=[0.05] * 3)
    # gold up by less than its own noise still counts as "did not rise"
    assert flagged([0.2, 0.5, 0.9], [0.50, 0.51, 0.52], se=[0.01] * 3)
    assert not flagged(reward, gold, se=[math.nan, 0.01, 0.01])  # unknown noise never fires


def test_standard_error_and_old_history():
    assert standard_error(torch.tensor([1.0, 3.0])) == pytest.approx(math.sqrt(2.0) / math.sqrt(2.0))
    assert standard_error(torch.tensor([1.0])) == 0.0
    old = EvalHistory.from_dict({"steps": [0, 5], "reward": [0.1, 0.2], "gold": [0.3, 0.3]})
    assert len(old.reward_se) == 2 and all(math.isnan(v) for v in old.reward_se)
    assert EvalHistory.from_dict(old.to_dict()).to_dict().keys() == old.to_dict().keys()
