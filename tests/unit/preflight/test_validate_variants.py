"""Config checks of the GRPO variants: every recipe is valid, bad combinations are errors."""

from __future__ import annotations

import pytest

from genalign.config.loader import compose_config
from genalign.preflight.load import load_config
from genalign.preflight.validate import validate
from genalign.rollout.config import SDEWindowConfig
from genalign.training.setup import rollout_spec

VARIANT_RECIPES = ["shapes_flow_grpo_fast", "shapes_mix_grpo", "shapes_cps", "shapes_dance_grpo", "shapes_grpo_guard"]
BASE = "experiment/toy/shapes_grpo"


@pytest.mark.parametrize("recipe", VARIANT_RECIPES)
def test_variant_recipes_are_valid(recipe):
    assert validate(load_config(f"experiment/toy/{recipe}"), check_machine=False) == []


@pytest.mark.parametrize("option", ["flow_grpo_fast", "flow_grpo_fast_nocfg", "mix_grpo", "dance_grpo", "grpo_guard"])
def test_reference_algorithm_layers_are_valid(option):
    overrides = [f"/base/algorithm={option}"] + (["/base/rollout=dance_sde"] if option == "dance_grpo" else [])
    assert validate(load_config(BASE, overrides), check_machine=False) == []


def _cfg(overrides):
    from genalign.config.errors import ConfigError

    try:
        load_config(BASE, list(overrides))
    except ConfigError as error:
        return error
    raise AssertionError(f"{overrides} loaded without a config error")


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (["algorithm.name=grpo_guard", "rollout.kernel=cps"], "grpo_guard normalises a Gaussian log-ratio"),
        (["algorithm.name=grpo_guard", "algorithm.rollout_correction.mode=truncate"], "cannot be taken against"),
        (["algorithm.guard.reweight=false"], "GRPO-Guard option"),
        (["algorithm.guard.bias=per_sample"], "GRPO-Guard option"),
        (
            ["algorithm.name=grpo_guard", "algorithm.guard.bias=sample"],
            "algorithm.guard.bias='sample' is not supported",
        ),
        (["rollout.sde_window.size=6"], "must fit in [lo, hi) = [0, 5)"),
        (["rollout.sde_window.size=2", "rollout.sde_window.hi=11"], "must fit"),
        (["rollout.sde_window.size=2", "rollout.sde_window.shift_every=0"], "shift_every"),
        (["rollout.kernel=cps", "algorithm.timestep_fraction=1.0"], "final step (σ_next = 0) of CPS"),
        (["rollout.sde_window.schedule=sliding"], "rollout.sde_window.schedule='sliding' is not supported"),
        (["rollout.sde_window.size=2", "rollout.sde_window.draw=per_sample"], "rollout.sde_window.draw='per_sample'"),
        (["algorithm.name=grpo_guard", "rollout.sde_window.size=2"], "set rollout.sde_window.draw=per_step"),
        (
            ["algorithm.name=grpo_guard", "algorithm.timestep_selection=random"],
            "use algorithm.timestep_selection=first",
        ),
        (["algorithm.timestep_selection=last"], "algorithm.timestep_selection='last'"),
        (["algorithm.rollout_correction.threshold=1.0"], "threshold must be > 1"),
    ],
)
def test_bad_variant_combinations_are_config_errors(overrides, fragment):
    error = _cfg(overrides)
    assert fragment in str(error), str(error)


def test_cps_final_step_is_fine_when_it_is_an_ode_step():
    cfg = load_config(BASE, ["rollout.kernel=cps", "algorithm.timestep_fraction=1.0", "rollout.ode_final_step=true"])
    assert validate(cfg, check_machine=False) == []


def test_window_range_resolution_and_rollout_spec():
    assert SDEWindowConfig().bounds_range(10) == (0, 5)
    assert SDEWindowConfig(hi=-1).bounds_range(10) == (0, 9)
    assert SDEWindowConfig(lo=2, hi=7).bounds_range(10) == (2, 7)
    spec = rollout_spec(load_config("experiment/toy/shapes_mix_grpo"))
    assert spec.window.schedule == "progressive" and (spec.window.lo, spec.window.hi) == (0, 9)
    assert spec.at_step(1).sde_mask().tolist() == [True] * 4 + [False] * 6
    assert spec.at_step(11).sde_mask().tolist() == [False] + [True] * 4 + [False] * 5  # moved after 10 steps
    assert rollout_spec(load_config("experiment/toy/shapes_grpo_guard")).record_means
    assert not rollout_spec(load_config(BASE)).record_means


def test_step_sizes_count_the_trained_steps_of_each_variant():
    from genalign.preflight.step_sizes import StepSizes

    counts = {
        recipe: StepSizes.from_config(load_config(f"experiment/toy/{recipe}")).num_train_timesteps
        for recipe in VARIANT_RECIPES
    }
    assert counts == {
        "shapes_flow_grpo_fast": 2,
        "shapes_mix_grpo": 4,
        "shapes_cps": 3,
        "shapes_dance_grpo": 6,
        "shapes_grpo_guard": 3,
    }  # the demo trains the first 3 of its 10 steps; windows their size


def test_mix_grpo_layer_shares_the_initial_noise_within_a_group():
    """MixGRPO's script passes --init_same_noise: group members differ only from the window on."""
    assert load_config(BASE, ["/base/algorithm=mix_grpo"]).rollout.same_initial_noise is True


def test_grpo_guard_layer_uses_the_reference_micro_batch_bias():
    assert load_config(BASE, ["/base/algorithm=grpo_guard"]).algorithm.guard.bias == "micro_batch"
    assert load_config("experiment/toy/shapes_grpo_guard").algorithm.guard.bias == "per_sample"  # as measured


SD3_OCR = "experiment/diffusion/sd3_5/online_grpo_ocr"


def test_fast_layers_are_flow_grpo_s_cfg_and_no_cfg_configs():
    """config/grpo.py at 54809b5f: pickscore_sd3_fast (CFG 4.5) leaves the window to config/
    base.py, 2 steps placed in [0, 10); geneval_sd3_fast_nocfg / pickscore_sd3_fast_nocfg train
    without CFG, 3 steps in [0, num_steps // 2), the CPS kernel. Both at noise level 0.8."""
    cfg = load_config(SD3_OCR, ["/base/algorithm=flow_grpo_fast"])
    window = cfg.rollout.sde_window
    assert (window.size, window.bounds_range(cfg.rollout.num_steps)) == (2, (0, 10))
    assert (cfg.rollout.kernel, cfg.rollout.noise_level, cfg.rollout.guidance_scale) == ("flow_sde", 0.8, 4.5)
    assert validate(cfg, check_machine=False) == []
    cfg = load_config(SD3_OCR, ["/base/algorithm=flow_grpo_fast_nocfg"])
    window = cfg.rollout.sde_window
    assert (window.size, window.bounds_range(cfg.rollout.num_steps)) == (3, (0, 5))
    assert (cfg.rollout.kernel, cfg.rollout.noise_level, cfg.rollout.guidance_scale) == ("cps", 0.8, 1.0)
    assert cfg.eval.guidance_scale == 1.0 and validate(cfg, check_machine=False) == []


def test_micro_batch_order_follows_each_reference_script():
    """train_sd3.py shuffles a round's samples before the micro-batch split; train_sd3_fast.py,
    train_qwenimage.py and train_sd3_dpo.py split them in sampling order. The demo recipes keep
    the shuffle they were measured with."""
    assert load_config(SD3_OCR).actor.shuffle_samples is True
    for option in ("flow_grpo_fast", "flow_grpo_fast_nocfg", "dpo"):  # the layers as composed, unchecked
        assert compose_config(BASE, [f"/base/algorithm={option}"]).actor.shuffle_samples is False, option
    assert load_config("experiment/diffusion/qwen_image/online_grpo_ocr").actor.shuffle_samples is False
    for recipe in ("shapes_grpo", "shapes_flow_grpo_fast", "shapes_dpo", "offline_dpo"):
        assert load_config(f"experiment/toy/{recipe}").actor.shuffle_samples is True, recipe


def test_fast_windows_are_drawn_per_sampling_batch_and_guard_may_draw_per_step():
    assert load_config(BASE, ["/base/algorithm=flow_grpo_fast"]).rollout.sde_window.draw == "per_batch"
    assert rollout_spec(load_config(BASE, ["/base/algorithm=flow_grpo_fast"])).window.draw == "per_batch"
    assert rollout_spec(load_config("experiment/toy/shapes_flow_grpo_fast")).window.draw == "per_step"  # as measured
    guard = load_config(
        BASE, ["algorithm.name=grpo_guard", "rollout.sde_window.size=2", "rollout.sde_window.draw=per_step"]
    )
    assert validate(guard, check_machine=False) == []
