"""The GPU suite's planning (benchmarks/gpu_suite_plan.py) and bookkeeping (gpu_suite.py): counts
shrunk without touching the shapes that set the memory, the memory-plan adapter, the real-shape
items planned for an 80 and a 141 GB card, a run made once for two items, and what an item says
when it failed or the budget ended it (tests/integration/test_gpu_suite.py runs it whole)."""

import dataclasses
import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("gpu_suite", REPO / "benchmarks" / "gpu_suite.py")
suite = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = suite  # dataclasses look their module up while the class is built
spec.loader.exec_module(suite)
from benchmarks import gpu_suite_plan as plan  # noqa: E402  (importable once gpu_suite put the repository on the path)
from benchmarks.random_weights import random_family_overrides  # noqa: E402
from genalign.config.loader import compose_config  # noqa: E402
from genalign.preflight.load import load_config  # noqa: E402
from genalign.preflight.memory_plan import estimate_memory  # noqa: E402


@pytest.mark.parametrize("family", ["toy", "cosmos", "qwen_image", "janus", "nextstep"])
def test_shrinking_keeps_the_chunk_and_micro_batch_and_gives_valid_configs(family, tmp_path):
    recipe = plan.family_recipes()[family]
    base = [
        *plan.model_overrides(family, tiny=False),
        *plan.common_overrides(recipe, tmp_path, family, 2),
        "/base/distributed=local",
    ]
    full = compose_config(recipe, base)
    candidates = list(plan.shrink_candidates(recipe, base))
    assert compose_config(recipe, candidates[0][0]).rollout.n == full.rollout.n  # the group shrinks only if needed
    for overrides, shrunk in candidates:
        cfg = load_config(recipe, overrides)  # every candidate is a config the recipe accepts
        assert (cfg.rollout.sample_batch_size, cfg.actor.micro_batch_size) == (
            full.rollout.sample_batch_size,
            full.actor.micro_batch_size,
        )
        assert (cfg.rollout.height, cfg.rollout.width, cfg.model.num_frames) == (
            full.rollout.height,
            full.rollout.width,
            full.model.num_frames,
        )
        samples = cfg.rollout.rollout_batch_size * cfg.rollout.n
        assert (
            samples
            % math.lcm(cfg.rollout.sample_batch_size, cfg.actor.micro_batch_size or cfg.rollout.sample_batch_size)
            == 0
        )
        assert cfg.rollout.num_steps >= 2 and all(" -> " in line for line in shrunk)


def test_the_plan_adapter_plans_the_registered_family(tmp_path):
    recipe = plan.RECIPES["sd3"]
    common = [*plan.common_overrides(recipe, tmp_path, "sd3", 2), "/base/distributed=local", "model.device=cpu"]
    random = load_config(recipe, [*random_family_overrides("sd3", "real"), *common])
    plain = estimate_memory(load_config(recipe, common))
    # the dotted family plans as the registered family its spec names, at the card size the suite states
    assert plan.plan_gib(random) == pytest.approx(max(r.peak_bytes for r in plain.roles) / 2**30)


def test_a_run_two_items_share_is_made_once(tmp_path):
    first = plan.Item("a", 1, "a", "train", steps=2, config={"x": 1}, estimate_s=30.0)
    again = plan.Item("b", 2, "b", "train", steps=2, config={"x": 1}, estimate_s=30.0)
    longer = plan.Item("c", 2, "c", "train", steps=3, config={"x": 1}, estimate_s=40.0)
    other = plan.Item("d", 3, "d", "train", steps=2, config={"x": 2}, estimate_s=30.0)
    plan.reuse_runs(items := [first, again, longer, other])
    assert [i.same_as for i in items] == [None, "a", None, None] and again.estimate_s == 0.0


def test_only_runs_the_named_items_in_the_order_named():
    items = [plan.Item(key, 1, key, "train") for key in ("sd3", "flux", "wan", "toy")]
    assert [i.key for i in plan.select(items, ["toy", "flux", "toy"])] == ["toy", "flux"]
    with pytest.raises(ValueError, match=r"--only fluxx: not in the time plan; its keys are sd3, flux, wan, toy"):
        plan.select(items, ["flux", "fluxx"])


def _item_dir(tmp_path: Path, state: dict, rows: int) -> Path:
    (tmp_path / "run").mkdir(parents=True)
    (tmp_path / "child.json").write_text(json.dumps(state))
    header = "step,step_images_per_s,time_rollout_s,time_reward_s,time_train_s,loss,parity_max_abs_log_prob_diff\n"
    body = "".join(f"{s},2.5,1.0,0.0,2.0,0.1,{'0.0' if s == 1 else ''}\n" for s in range(1, rows + 1))
    (tmp_path / "run" / "metrics.csv").write_text(header + body)
    return tmp_path


def test_an_item_says_what_it_has_when_the_budget_or_a_failure_ends_it(tmp_path):
    item = plan.Item("sd3", 1, "sd3", "train", steps=2, plan_gib=40.0)
    stopped = suite.result_of(item, _item_dir(tmp_path / "stopped", {"load_s": 3.0}, 1), 50.0, killed=True)
    assert stopped["status"] == "stopped" and stopped["reason"] == "stopped at the budget after 1 of 2 steps"
    assert stopped["parity"] == 0.0 and stopped["images_per_s"] == 2.5 and stopped["finite"] is True
    failed = suite.result_of(item, _item_dir(tmp_path / "failed", {"error": "OutOfMemoryError: CUDA"}, 0), 9.0, False)
    assert failed["status"] == "failed" and failed["reason"] == "OutOfMemoryError: CUDA"
    done = suite.result_of(item, _item_dir(tmp_path / "done", {"done": True, "peak_gib": 44.0}, 2), 60.0, False)
    assert done["status"] == "ok" and [s["step"] for s in done["steps"]] == [1, 2]
    assert done["peak_gib"] == 44.0 and done["peak_over_plan"] == pytest.approx(1.1)


def test_the_time_plan_counts_compilation_and_the_family_kind(tmp_path):
    recipe = plan.RECIPES["sd3"]
    base = [*random_family_overrides("sd3", "real"), "/base/distributed=local", "model.device=cpu"]
    eager = plan.estimate_s(load_config(recipe, base), "sd3", tiny=False, steps=2)
    compiled = plan.estimate_s(load_config(recipe, [*base, "model.compile=true"]), "sd3", tiny=False, steps=2)
    assert plan.START_S < eager and compiled > plan.COMPILE_S
    one_group = plan.estimate_s(
        load_config(recipe, [*base, "rollout.rollout_batch_size=1", "actor.gradient_accumulation_steps=1"]),
        "sd3",
        False,
        2,
    )
    assert one_group < eager  # the recipe's 8 groups a step cost more than one
    assert dataclasses.fields(plan.Item)  # the JSON's item fields are the dataclass's


QWEN_IMAGES = ("qwen_image", "qwen_image_edit", "qwen_image_edit_plus")
"""The 20B Qwen-Image transformer's families: one process needs more than an 80 GB card."""
ABOVE_80GB = (*QWEN_IMAGES, "nextstep", "flux2")
"""Families whose recipe needs more than an 80 GB card in one process (NextStep-1: the flow
head's walk over 1024 tokens, at one sample a micro-batch already; FLUX.2 [dev]: its 32 B
transformer beside the 24 B text encoder while it encodes, 121.5 GiB, which its recipe shards
over 8 GPUs with FSDP2)."""


@pytest.mark.parametrize("card_gib,big_ones_run", [(79.2, False), (139.8, True)])
def test_real_shapes_items_plan_for_the_card(card_gib, big_ones_run, tmp_path):
    """The GPU run's items, planned here: every family has a config the recipe accepts at its real
    shapes, with a memory plan (the toy family excepted) and a time estimate; Wan 2.2 T2V-A14B and
    I2V-A14B (both experts resident), Qwen-Image and its editing checkpoints, NextStep-1 and FLUX.2
    [dev] in one process run only on the 141 GB card, SD3.5 Large (its
    recipe checkpoints gradients) and Wan 2.2 TI2V-5B on both; SD3.5 Medium's family item is the
    comparison's genalign side. Planning never initialises CUDA (the items run in forked children)."""
    import torch

    items = {item.key: item for item in plan.build_items(tmp_path, tiny=False, card_gib=card_gib)}
    plan.reuse_runs(list(items.values()))
    for family in plan.family_recipes():
        item = items[family]
        assert item.settings and item.estimate_s > plan.START_S, item
        assert item.plan_gib is not None, item
        if family not in ABOVE_80GB:
            assert item.skip is None, item
        assert item.settings["dtype"] == compose_config(item.recipe).model.dtype
    for key in ("wan2_2_t2v_a14b", "wan2_2_i2v_a14b", *ABOVE_80GB, "qwen_image_edit_2511"):
        assert (items[key].skip is None) == big_ones_run, items[key]
    for key in ("sd3_5_large", "wan2_2_ti2v_5b"):
        assert items[key].skip is None and items[key].recipe == plan.VARIANT_RECIPES[key], items[key]
    assert items["wan2_2_i2v_a14b"].recipe == plan.VARIANT_RECIPES["wan2_2_i2v_a14b"]
    assert items["genalign"].same_as == "sd3" and items["genalign"].estimate_s == 0.0
    assert items["flow_grpo"].settings["group"] == items["sd3"].settings["group"] == 8
    assert not torch.cuda.is_initialized()


@pytest.mark.parametrize("family", sorted(plan.family_recipes()))
def test_tiny_overrides_set_no_key_the_family_does_not_read(family, tmp_path):
    """The suite's tiny shapes apply one list to every family: a key a family's spec names unread
    (Janus-Pro's rollout.num_steps) is left out, else the family's config would refuse it, and the
    report then says image tokens, not denoising steps."""
    from benchmarks.gpu_suite_report import _settings
    from genalign.models.spec import family_spec

    recipe, spec = plan.family_recipes()[family], family_spec(family)
    if not recipe:
        pytest.skip(f"{family}: no recipe shipped")
    tiny = plan.tiny_overrides(recipe, family)
    assert all(spec.reads_override(item) for item in tiny)
    assert any(item.startswith("rollout.num_steps=") for item in tiny) == spec.reads("rollout.num_steps")
    cfg = compose_config(recipe, [*plan.common_overrides(recipe, tmp_path, family, 2), *tiny])
    settings = plan.settings_of(cfg)
    assert (settings["denoising_steps"] is None) == (not spec.reads("rollout.num_steps"))
    assert ("image tokens" in _settings({"settings": settings})) == (settings["denoising_steps"] is None)
