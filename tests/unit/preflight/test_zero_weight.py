"""A weight of 0 turns a scorer off, written once (`rewards/config.py:active_weights`) and read
the same way by everything that builds, plans, places or checks scorers."""

from __future__ import annotations

from genalign.config.loader import compose_config
from genalign.evaluation.config import EvalConfig
from genalign.placement.ray_pools import ray_actor_pools
from genalign.preflight.files import local_scorers
from genalign.preflight.reward_memory import reward_memory
from genalign.preflight.validate import validate
from genalign.preflight.values import selected_reward_options
from genalign.rewards.config import RewardConfig, active_weights


def test_active_weights_drop_exact_zeros_only():
    assert active_weights({"a": 1.0, "b": 0.0, "c": -0.5, "d": -0.0}) == {"a": 1.0, "c": -0.5}
    assert RewardConfig(components={"ocr": 0.0, "jpeg_compressibility": 2.0}).active_components() == {
        "jpeg_compressibility": 2.0
    }
    assert EvalConfig(gold_rewards={"toy_shape_judge": 0.0}).active_gold_rewards() == {}


def test_a_zero_weight_scorer_is_neither_built_nor_planned_nor_placed_nor_checked():
    # the CPU demo with a second training reward and a second gold reward, each weighted 0
    cfg = compose_config(None, ["+reward.components.random=0", "+eval.gold_rewards.random=0", "reward.runtime=ray"])
    assert validate(cfg, check_machine=False) == []
    assert local_scorers(cfg) == {"toy_shape", "toy_shape_judge"}  # a zero gold reward too: no files to check
    assert {(key, name) for key, name, _ in selected_reward_options(cfg) if key != "eval.quality_metrics"} == {
        ("reward.components", "toy_shape"),
        ("eval.gold_rewards", "toy_shape_judge"),
    }
    pools = [pool.role for pool in ray_actor_pools(cfg)]
    assert pools == ["reward 'toy_shape'", "gold reward 'toy_shape_judge'"] + [
        f"quality metric {name!r}" for name in cfg.eval.quality_metrics
    ]


def test_a_zero_weight_scorer_has_no_memory_planned():
    def training_lines(weight: str) -> list[str]:
        memory = reward_memory(compose_config(None, [f"+reward.components.toy_shape_judge={weight}"]))
        return [text for text, _ in memory.training]

    assert any("toy_shape_judge" in text for text in training_lines("1"))  # the control: weighted, it is planned
    assert not any("toy_shape_judge" in text for text in training_lines("0"))
