from concurrent.futures import Future

import pytest
import torch

from genalign.rewards.base import RewardError
from genalign.rewards.composite import LocalRewardRuntime, build_reward_runtime
from genalign.rewards.config import RewardConfig
from genalign.rewards.scores import RewardScores, batch_ranges, check_scores

FAKES = [
    f"reward_fakes:{name}"
    for name in (
        "MeanPixelReward",
        "PromptLengthReward",
        "NanReward",
        "ShortReward",
        "RaisingReward",
        "ExplodingConstructor",
        "CrashReward",
        "ThreadProbeReward",
    )
]
"""Every fake scorer (tests/unit/rewards/reward_fakes.py): dotted rewards import only when allowed."""


def fake_config(**fields) -> RewardConfig:
    """A RewardConfig whose reward.allow_import lists the fakes."""
    return RewardConfig(allow_import=FAKES, **fields)


def test_total_is_weighted_sum_and_stats_cover_total_and_components():
    scores = RewardScores({"a": torch.tensor([1.0, 3.0]), "b": torch.tensor([0.0, 2.0])}, {"a": 0.5, "b": -1.0})
    # total = 0.5*[1, 3] - [0, 2] = [0.5, -0.5]
    assert scores.total.tolist() == [0.5, -0.5]
    stats = scores.stats(prefix="eval_reward")
    assert stats["eval_reward_mean"] == 0.0
    assert stats["eval_reward_std"] == pytest.approx(0.5)  # population std
    assert stats["eval_reward_min"] == -0.5 and stats["eval_reward_max"] == 0.5
    assert stats["eval_reward_a_mean"] == 2.0 and stats["eval_reward_a_std"] == 1.0
    assert stats["eval_reward_b_min"] == 0.0 and stats["eval_reward_b_max"] == 2.0
    assert len(stats) == 12


def test_batch_ranges_cover_everything_once():
    assert batch_ranges(5, 2) == [(0, 2), (2, 4), (4, 5)]
    assert batch_ranges(4, 16) == [(0, 4)]


def test_local_runtime_chunks_and_matches_direct_scoring(fakes_on_path, images):
    cfg = fake_config(
        components={
            "reward_fakes:MeanPixelReward": 2.0,
            "reward_fakes:PromptLengthReward": 0.5,
            "reward_fakes:ExplodingConstructor": 0.0,
        },
        batch_size=4,
    )
    runtime = build_reward_runtime(cfg, "cpu")  # the zero-weight component is never constructed
    prompts = ["a", "bb", "ccc", "dddd", "eeeee", "ffffff"]
    scores = runtime.score(images, prompts, [])
    assert set(scores.components) == {"reward_fakes:MeanPixelReward", "reward_fakes:PromptLengthReward"}
    pixel = torch.arange(6) * 40 / 255.0
    assert torch.allclose(scores.components["reward_fakes:MeanPixelReward"], pixel)
    assert scores.components["reward_fakes:PromptLengthReward"].tolist() == [1, 2, 3, 4, 5, 6]
    assert torch.allclose(scores.total, 2.0 * pixel + 0.5 * torch.arange(1, 7))
    assert scores.weights == {"reward_fakes:MeanPixelReward": 2.0, "reward_fakes:PromptLengthReward": 0.5}
    future = runtime.score_async(images, prompts, [{}] * 6)
    assert torch.equal(future.result().total, scores.total)


def test_eval_components_override_but_kwargs_come_from_cfg(fakes_on_path, images):
    cfg = fake_config(
        components={"reward_fakes:ExplodingConstructor": 1.0}, kwargs={"reward_fakes:NanReward": {"bad_prompt": "p3"}}
    )
    runtime = build_reward_runtime(cfg, "cpu", components={"reward_fakes:NanReward": 1.0})
    assert runtime.scorers["reward_fakes:NanReward"].kwargs == {"bad_prompt": "p3"}


def test_non_finite_score_names_reward_prompt_and_global_index(fakes_on_path, images):
    cfg = fake_config(
        components={"reward_fakes:NanReward": 1.0},
        kwargs={"reward_fakes:NanReward": {"bad_prompt": "p4"}},
        batch_size=4,
    )
    runtime = build_reward_runtime(cfg, "cpu")
    with pytest.raises(RewardError, match=r"'reward_fakes:NanReward'.*non-finite.*sample 4 \(prompt 'p4'\)"):
        runtime.score(images, [f"p{i}" for i in range(6)], [])
    future = runtime.score_async(images, [f"p{i}" for i in range(6)], [])  # submitting does not raise
    with pytest.raises(RewardError, match=r"'reward_fakes:NanReward'.*non-finite.*sample 4 \(prompt 'p4'\)"):
        future.result()


def test_missing_score_names_the_first_unscored_sample():
    with pytest.raises(RewardError, match=r"reward 'r' returned \(2,\).*sample 4 \(prompt 'c'\) has no score"):
        check_scores("r", torch.zeros(2), ["a", "b", "c"], start=2)
    with pytest.raises(RewardError, match="returned list"):
        check_scores("r", [0.0], ["a"])


def test_scorer_exception_is_chained_with_reward_and_batch_range(fakes_on_path, images):
    cfg = fake_config(components={"reward_fakes:RaisingReward": 1.0}, batch_size=4)
    with pytest.raises(RewardError, match=r"'reward_fakes:RaisingReward' failed on samples \[0, 4\) of 6") as info:
        build_reward_runtime(cfg, "cpu").score(images, ["p"] * 6, [])
    assert isinstance(info.value.__cause__, ValueError)
    assert str(info.value.__cause__) == "scorer exploded"


def test_async_scorer_exception_surfaces_from_the_future_as_reward_error(fakes_on_path, images):
    runtime = build_reward_runtime(fake_config(components={"reward_fakes:RaisingReward": 1.0}, batch_size=4), "cpu")
    future = runtime.score_async(images, ["p"] * 6, [])
    assert isinstance(future, Future)
    with pytest.raises(RewardError, match=r"'reward_fakes:RaisingReward' failed on samples \[0, 4\) of 6") as info:
        future.result()
    assert str(info.value.__cause__) == "scorer exploded"
    with pytest.raises(ValueError, match="5 prompts for 6 images"):  # input errors too, at result()
        runtime.score_async(images, ["p"] * 5, []).result()
    runtime.close()


def test_async_scoring_runs_on_one_worker_thread_with_the_callers_torch_state(fakes_on_path, images):
    runtime = build_reward_runtime(fake_config(components={"reward_fakes:ThreadProbeReward": 1.0}), "cpu")
    with torch.no_grad():
        futures = [runtime.score_async(images, ["p"] * 6, []) for _ in range(3)]
    assert all(future.result().total.tolist() == [0.0] * 6 for future in futures)
    calls = runtime.scorers["reward_fakes:ThreadProbeReward"].calls
    assert len({call["thread"] for call in calls}) == 1 and calls[0]["thread"].startswith("genalign-reward")
    assert all(call["num_threads"] == torch.get_num_threads() and not call["grad_enabled"] for call in calls)
    runtime.close()


def test_async_chunks_make_the_same_calls_as_serial_scoring(images):
    """One worker thread keeps call order: the `random` reward (call-counted) gives the same
    scores for 3 async chunks of 2 as for one serial batch scored 2 at a time."""
    cfg = fake_config(components={"random": 1.0}, kwargs={"random": {"seed": 3}}, batch_size=2)
    serial = build_reward_runtime(cfg, "cpu").score(images, ["p"] * 6, [])
    runtime = build_reward_runtime(cfg, "cpu")
    futures = [runtime.score_async(images[i : i + 2], ["p"] * 2, []) for i in (0, 2, 4)]
    assert torch.equal(RewardScores.cat([f.result() for f in futures]).total, serial.total)
    runtime.close()


def test_offload_waits_for_submitted_scoring_and_blocks_new_submissions(fakes_on_path, images):
    cfg = fake_config(
        components={"reward_fakes:MeanPixelReward": 1.0}, kwargs={"reward_fakes:MeanPixelReward": {"delay_s": 0.2}}
    )
    runtime = build_reward_runtime(cfg, "cpu")
    future = runtime.score_async(images, ["p"] * 6, [])
    runtime.offload()  # never moves a model a thread is scoring with
    assert future.done() and runtime.scorers["reward_fakes:MeanPixelReward"].offloaded
    with pytest.raises(RuntimeError, match="call onload"):
        runtime.score_async(images, ["p"] * 6, [])
    runtime.onload()
    assert runtime.score_async(images, ["p"] * 6, []).result().total.shape == (6,)
    runtime.close()
    assert runtime._pool is None and runtime.scorers == {}


def test_config_errors_are_listed_together():
    cfg = fake_config(
        components={"ocrr": 1.0, "jpeg_compressibility": float("nan")}, runtime="spark", batch_size=0, num_threads=0
    )
    with pytest.raises(ValueError) as info:
        build_reward_runtime(cfg, "cpu")
    message = str(info.value)
    assert "unknown reward 'ocrr'; did you mean 'ocr'?" in message
    assert "reward.components.jpeg_compressibility=nan" in message
    assert "reward.runtime='spark'" in message and "reward.batch_size must be positive, got 0" in message
    assert "reward.num_threads must be positive, got 0" in message  # RewardConfig.problems, as preflight says it
    with pytest.raises(ValueError, match="every weight is 0"):
        build_reward_runtime(fake_config(components={"ocr": 0.0}), "cpu")
    with pytest.raises(ValueError, match="no component has a non-zero weight"):  # eval.gold_rewards all 0
        build_reward_runtime(fake_config(components={"ocr": 1.0}), "cpu", components={"ocr": 0.0})


def test_unknown_scorer_kwarg_is_a_type_error_naming_the_key():
    cfg = fake_config(components={"random": 1.0}, kwargs={"random": {"sed": 1}})
    with pytest.raises(TypeError, match=r"reward\.kwargs\.random\.sed \(did you mean 'seed'\?\)"):
        build_reward_runtime(cfg, "cpu")


def test_input_validation_and_offload_reach_every_scorer(fakes_on_path, images):
    runtime = build_reward_runtime(fake_config(components={"reward_fakes:MeanPixelReward": 1.0}), "cpu")
    with pytest.raises(ValueError, match="uint8"):
        runtime.score(images.float(), ["p"] * 6, [])
    with pytest.raises(ValueError, match="5 prompts for 6 images"):
        runtime.score(images, ["p"] * 5, [])
    runtime.offload()
    assert runtime.scorers["reward_fakes:MeanPixelReward"].offloaded
    runtime.onload()
    assert not runtime.scorers["reward_fakes:MeanPixelReward"].offloaded
    assert isinstance(runtime, LocalRewardRuntime)
