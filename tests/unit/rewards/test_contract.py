"""The reward contract (rewards/base.py): only `score` is required, the optional members have
defaults wherever genalign calls them, and a reward that cannot score the run's frames is a
config error before anything loads."""

from __future__ import annotations

import pytest
import torch

from genalign.config.errors import ConfigError
from genalign.preflight.load import load_config
from genalign.rewards import base
from genalign.rewards.composite import LocalRewardRuntime


class PlainRule:
    """A scorer as a user writes it from the docs: no offload, onload, video_native or name."""

    def __init__(self, device="cpu"):
        self.calls = 0

    def score(self, images, prompts, metadata):
        self.calls += 1
        return images.float().flatten(1).mean(1) / 255.0


class Subclassed(base.RewardFunction):
    def __init__(self, device="cpu", **options):
        self.options = options

    def score(self, images, prompts, metadata):
        return torch.zeros(len(prompts))


def test_a_plain_class_with_score_is_a_complete_scorer_for_the_runtime():
    scorer = PlainRule()
    runtime = LocalRewardRuntime({"plain": scorer}, {"plain": 1.0}, batch_size=2)
    images = torch.full((3, 3, 4, 4), 51, dtype=torch.uint8)
    video = torch.full((2, 3, 3, 4, 4), 102, dtype=torch.uint8)  # [B, F, 3, H, W]: scored per frame
    runtime.offload()  # no offload method: nothing to do, no AttributeError
    runtime.onload()
    torch.testing.assert_close(runtime.score(images, ["a", "b", "c"], []).components["plain"], torch.full((3,), 0.2))
    torch.testing.assert_close(runtime.score(video, ["a", "b"], []).components["plain"], torch.full((2,), 0.4))
    runtime.close()
    assert not base.is_video_native(scorer) and base.min_frames(scorer) == 1


def test_the_protocols_defaults_are_inherited_by_a_subclass():
    scorer = Subclassed(device="cpu", target=1)
    scorer.offload()
    scorer.onload()
    assert (scorer.video_native, scorer.min_frames) == (False, 1)
    assert base.contract_problems(Subclassed, "k") == [] and base.contract_problems(PlainRule, "k") == []


@pytest.mark.parametrize(
    "source, problem",
    [
        ("class C:\n    def __init__(self, device='cpu'): pass", "C has no score(images, prompts, metadata) method"),
        (
            "class C:\n    def __init__(self, device='cpu'): pass\n    def score(self, images): pass",
            "C.score must take (images, prompts, metadata), got C.score(self, images)",
        ),
        (
            "class C:\n    def __init__(self, size): pass\n    def score(self, images, prompts, metadata): pass",
            "C(...) must accept device= (and its reward.kwargs options as keywords); its constructor is C(size)",
        ),
        (
            "class C:\n    def __init__(self, **kw): pass\n    def score(self, *args): pass\n    offload = 3",
            "C.offload must be a method taking no arguments (or be left out: it is optional)",
        ),
        (
            "class C:\n    min_frames = 0\n    def __init__(self, **kw): pass\n    def score(self, *args): pass",
            "C.min_frames must be an int >= 1, got 0",
        ),
    ],
)
def test_contract_problems_name_the_member(source, problem):
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102 - a test's own class definitions
    [found] = base.contract_problems(namespace["C"], "reward.components.m:C")
    assert found.startswith(f"reward.components.m:C: {problem}"), found


def test_temporal_consistency_on_single_frames_is_refused_before_anything_loads():
    """The Wan recipe samples 1 frame by default: a frame-difference reward cannot score that."""
    recipe = "experiment/diffusion/wan_2_1/online_grpo_pickscore"
    with pytest.raises(ConfigError) as err:
        load_config(recipe, ["reward.components.temporal_consistency=0.5"])
    assert err.value.problems == [
        "reward.components.temporal_consistency needs at least 2 frames per sample, but model.num_frames=1 makes "
        "single images: set model.num_frames to a video length the family takes (wan, cosmos: 4k + 1, e.g. 33), or "
        "remove temporal_consistency"
    ]
    with pytest.raises(ConfigError, match="eval.quality_metrics.temporal_consistency needs at least 2 frames"):
        load_config(recipe, ["eval.quality_metrics=[temporal_consistency]"])
    cfg = load_config(recipe, ["reward.components.temporal_consistency=0.5", "model.num_frames=5"])
    assert cfg.reward.components["temporal_consistency"] == 0.5


def test_needs_source_is_optional_and_must_be_a_bool():
    class Plain:
        def __init__(self, device="cpu"):
            pass

        def score(self, images, prompts, metadata):
            return torch.zeros(len(images))

    class Editing(Plain):
        needs_source = True

    class Wrong(Plain):
        needs_source = "yes"

    assert not base.wants_source(Plain) and base.wants_source(Editing)
    assert base.contract_problems(Editing, "x") == []
    assert base.contract_problems(Wrong, "x") == ["x: Wrong.needs_source must be True or False"]
    assert base.source_images([{}, {}]) is None  # text prompts carry none


def test_source_similarity_averages_a_prompts_sources():
    from genalign.rewards.image_similarity import source_similarity

    result = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # [B, D], unit rows
    sources = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [0.0, -1.0]]])  # [B, S=2, D]
    assert source_similarity(result, sources).tolist() == [0.5, 0.0]  # (1 + 0) / 2, (1 − 1) / 2
