"""Ray reward runtime against a local 2-CPU Ray on loopback, one session for the module."""

import os
import time
from pathlib import Path

import pytest
import torch

from genalign.rewards.base import RewardError
from genalign.rewards.composite import build_reward_runtime
from genalign.rewards.config import RewardConfig
from genalign.rewards.ray_runtime import RayRewardRuntime

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
        "SlowStartReward",
    )
]
"""Every fake scorer (tests/unit/rewards/reward_fakes.py): dotted rewards import only when allowed."""


def fake_config(**fields) -> RewardConfig:
    """A RewardConfig whose reward.allow_import lists the fakes."""
    return RewardConfig(allow_import=FAKES, **fields)


pytestmark = pytest.mark.ray

PIXEL = "reward_fakes:MeanPixelReward"
FAKES_DIR = str(Path(__file__).parent)  # reward_fakes.py, for the actors' imports


@pytest.fixture(scope="module")
def ray_session():
    import ray

    from genalign.ray_session import init_ray

    python_path = os.pathsep.join(filter(None, [FAKES_DIR, os.environ.get("PYTHONPATH")]))
    init_ray(
        num_cpus=2, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": python_path, "OMP_NUM_THREADS": "1"}}
    )
    yield ray
    ray.shutdown()


def make_runtime(components, **overrides):
    cfg = fake_config(
        components=components,
        runtime="ray",
        num_cpus_per_worker=0.25,
        **{"batch_size": 2, "num_workers": 2, "timeout_s": 60.0, **overrides},
    )
    return build_reward_runtime(cfg, "cpu")


def test_same_scores_as_local_and_async_returns_at_once(ray_session, fakes_on_path, images):
    components = {PIXEL: 2.0, "reward_fakes:PromptLengthReward": 1.0, "jpeg_incompressibility": 1.0}
    prompts = [f"prompt {i}" * (i + 1) for i in range(6)]
    local = build_reward_runtime(fake_config(components=components, batch_size=4), "cpu").score(images, prompts, [])
    runtime = make_runtime(components, kwargs={PIXEL: {"delay_s": 2.0}})
    try:
        assert isinstance(runtime, RayRewardRuntime)
        future = runtime.score_async(images, prompts, [])
        # submitted, not waited on: the 3 pixel chunks on 2 actors need >= 4 s of sleep, so a
        # score_async that had waited would return a done future (no wall-clock bound to flake)
        assert not future.done()
        remote = future.result()
        assert remote.components.keys() == local.components.keys()
        for name in components:
            assert torch.equal(remote.components[name], local.components[name]), name
        assert torch.equal(remote.total, local.total)
        runtime.offload()
        runtime.onload()
    finally:
        runtime.close()


def test_actor_killed_between_calls_is_restarted_and_the_batch_retried(ray_session, images):
    runtime = make_runtime({PIXEL: 1.0})
    try:
        expected = runtime.score(images, ["p"] * 6, []).total
        old = runtime.pools[PIXEL].actors[1]
        ray_session.kill(old, no_restart=True)
        assert torch.equal(runtime.score(images, ["p"] * 6, []).total, expected)
        assert runtime.pools[PIXEL].actors[1] is not old
    finally:
        runtime.close()


def test_actor_killed_mid_call_is_restarted_and_the_batch_retried(ray_session, images):
    runtime = make_runtime({PIXEL: 1.0}, kwargs={PIXEL: {"delay_s": 1.0}})
    try:
        future = runtime.score_async(images, ["p"] * 6, [])
        time.sleep(0.3)  # the first chunk on actor 0 is sleeping inside score()
        ray_session.kill(runtime.pools[PIXEL].actors[0], no_restart=True)
        scores = future.result()
        assert torch.allclose(scores.total, torch.arange(6) * 40 / 255.0)
    finally:
        runtime.close()


def test_actor_dying_twice_is_an_error_naming_reward_and_actor(ray_session, images):
    runtime = make_runtime({"reward_fakes:CrashReward": 1.0}, num_workers=1)
    try:
        with pytest.raises(RewardError, match=r"reward 'reward_fakes:CrashReward' actor 0 .*died again"):
            runtime.score(images, ["p"] * 6, [])
    finally:
        runtime.close()


def test_slow_actor_is_a_timeout_error_not_a_hang(ray_session, images):
    # The 2 s bound is for scoring only: actor start-up on a loaded machine can take longer
    # and is bounded by reward.startup_timeout_s (the cause of an earlier flake).
    runtime = make_runtime({PIXEL: 1.0}, num_workers=1, timeout_s=2.0, kwargs={PIXEL: {"delay_s": 600.0}})
    try:
        start = time.monotonic()
        with pytest.raises(RewardError, match=r"actor 0 .*within reward\.timeout_s=2\.0"):
            runtime.score(images[:2], ["p"] * 2, [])
        assert time.monotonic() - start < 300  # not a hang: far below the 600 s the scorer sleeps
    finally:
        runtime.close()


def test_actor_start_up_is_bounded_by_its_own_timeout(ray_session, images):
    with pytest.raises(RewardError, match=r"start did not finish within reward\.startup_timeout_s=0\.5"):
        make_runtime(
            {"reward_fakes:SlowStartReward": 1.0},
            num_workers=1,
            timeout_s=600.0,
            startup_timeout_s=0.5,
            kwargs={"reward_fakes:SlowStartReward": {"delay_s": 600.0}},
        )


def test_scorer_exception_and_nan_keep_local_semantics(ray_session, images):
    runtime = make_runtime({"reward_fakes:RaisingReward": 1.0})
    try:
        with pytest.raises(RewardError, match=r"failed on samples \[0, 2\) of 4") as info:
            runtime.score(images[:4], ["p"] * 4, [])  # chunks [0, 2) and [2, 4) both fail; the first is named
    finally:
        runtime.close()
    assert "scorer exploded" in str(info.value)
    runtime = make_runtime({"reward_fakes:NanReward": 1.0}, kwargs={"reward_fakes:NanReward": {"bad_prompt": "p3"}})
    try:
        with pytest.raises(RewardError, match=r"non-finite score nan to sample 3 \(prompt 'p3'\)"):
            runtime.score(images, [f"p{i}" for i in range(6)], [])
    finally:
        runtime.close()
