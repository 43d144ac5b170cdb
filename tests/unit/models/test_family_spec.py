"""Each model family's `FamilySpec`: declared beside its policy in the family's folder, what the
config checks, export, the rollout and the memory plan read, light to import, and the only place
a family's facts live."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from genalign.config.registry import RegistryError
from genalign.models.base import Policy
from genalign.models.registry import MODEL_FAMILIES
from genalign.models.spec import FamilySpec, MissingCalibration, families_with, family_spec
from genalign.models.tiny_random import tiny_families
from genalign.preflight.values import token_family_names


@pytest.mark.parametrize("name", MODEL_FAMILIES.names())
def test_each_family_declares_its_spec_beside_its_policy(name):
    spec = family_spec(name)
    policy = spec.policy_class()
    assert spec.name == name and policy.spec is spec and policy.family == name
    # the class declares every member of the protocol callers use (instances add device, dtype, transformer)
    declared = {"spec", "family", "lora_target_modules", "repeated_blocks", "from_config"}
    assert declared <= set(dir(policy)) and declared <= set(Policy.__annotations__) | {"from_config"}
    if spec.export == "diffusers":
        assert policy.diffusers_pipeline == spec.pipeline_class


@pytest.mark.parametrize("name", MODEL_FAMILIES.names())
def test_each_family_is_a_folder_holding_its_files(name):
    """models/<family>/ holds the policy and its SPEC (which the registry line names), its tiny
    builder, the architecture files and the calibration the memory plan reads
    (docs/extending.md §3)."""
    spec = family_spec(name)
    folder = Path(importlib.import_module("genalign.models").__file__).parent / name
    assert spec.package == f"genalign.models.{name}" and spec.folder == folder
    assert importlib.import_module(spec.package).SPEC is spec and spec.policy.startswith(f"{spec.package}.")
    assert spec.tiny_builder is None or spec.tiny_builder.startswith(f"{spec.package}.tiny:")
    assert spec.architecture_files() and {file.parent for file in spec.architecture_files()} == {
        folder / "architectures"
    }
    assert spec.calibration()["measured_on"].startswith(f"{name}: ")  # the folder's own, not another family's


def test_a_missing_calibration_is_a_refusal_naming_what_is_missing(tmp_path, monkeypatch):
    one_module = FamilySpec(name="x", policy="m:P", export="none")
    assert one_module.folder is None and one_module.architecture_files() == ()
    with pytest.raises(MissingCalibration, match="names no package"):
        one_module.calibration()
    (tmp_path / "probe_family").mkdir()
    (tmp_path / "probe_family" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    folder = FamilySpec(name="x", policy="m:P", export="none", package="probe_family")
    assert folder.folder == tmp_path / "probe_family" and folder.architecture_files() == ()
    with pytest.raises(MissingCalibration, match=r"probe_family/calibration\.json does not exist"):
        folder.calibration()
    (tmp_path / "probe_family" / "calibration.json").write_text('{"replay": 1.0')
    with pytest.raises(MissingCalibration, match=r"probe_family/calibration\.json: not valid JSON"):
        folder.calibration()
    (tmp_path / "probe_family" / "calibration.json").write_text('{"replay": 1.0}')
    with pytest.raises(MissingCalibration, match=r"calibration\.json: missing rollout_peak, replay_compiled, "):
        folder.calibration()
    with pytest.raises(ValueError, match="package='no_such_package.family' is not an importable package"):
        FamilySpec(name="x", policy="m:P", export="none", package="no_such_package.family").folder


def test_the_specs_say_what_the_old_family_tables_said():
    assert families_with(lambda s: s.sampler == "token") == ["janus", "nextstep"] == token_family_names()
    assert families_with(lambda s: s.media == "video") == [
        "cosmos",
        "hunyuan_video15",
        "hunyuan_video15_i2v",
        "wan",
        "wan_i2v",
    ]
    assert families_with(lambda s: s.negative_prompt) == [
        "cosmos",
        "hunyuan_video15",
        "hunyuan_video15_i2v",
        "wan",
        "wan_i2v",
        "z_image",
    ]
    qwen_edits = ["qwen_image_edit", "qwen_image_edit_plus"]
    assert families_with(lambda s: s.guidance_embedding) == ["flux", "flux2", "flux_kontext", "qwen_image", *qwen_edits]
    assert families_with(lambda s: s.text_encoders) == [
        "cosmos",
        "flux",
        "flux2",
        "flux2_klein",
        "flux_kontext",
        "hunyuan_video15",
        "hunyuan_video15_i2v",
        "qwen_image",
        *qwen_edits,
        "sd3",
        "wan",
        "wan_i2v",
        "z_image",
    ]
    assert families_with(lambda s: s.source_images > 0) == [
        "flux_kontext",
        "hunyuan_video15_i2v",
        *qwen_edits,
        "wan_i2v",
    ]
    # wan_i2v: up to 2 (Wan 2.1 FLF2V's first and last frame; each checkpoint its own count, `source_count`)
    assert [family_spec(name).source_images for name in ["flux_kontext", *qwen_edits, "wan_i2v"]] == [1, 1, 3, 2]
    assert {name: family_spec(name).size_multiple for name in MODEL_FAMILIES.names()} == dict.fromkeys(
        MODEL_FAMILIES.names(), 16
    )
    assert families_with(lambda s: s.fixed_size is not None) == ["toy"] and family_spec("toy").fixed_size == 32
    assert {name: family_spec(name).export for name in MODEL_FAMILIES.names()} == {
        "cosmos": "diffusers",
        "flux": "diffusers",
        "flux_kontext": "diffusers",
        "hunyuan_video15": "diffusers",
        "hunyuan_video15_i2v": "diffusers",
        "janus": "peft",
        "nextstep": "checkpoint",
        "qwen_image": "diffusers",
        "qwen_image_edit": "diffusers",
        "qwen_image_edit_plus": "diffusers",
        "sd3": "diffusers",
        "toy": "none",
        "wan": "diffusers",
        "flux2_klein": "diffusers",
        "flux2": "diffusers",
        "wan_i2v": "diffusers",
        "z_image": "diffusers",
    }
    assert family_spec("janus").pipeline_class == "JanusForConditionalGeneration"
    assert families_with(lambda s: not s.gradient_checkpointing) == ["janus", "nextstep"]
    assert families_with(lambda s: not s.split_cfg) == ["flux2", "janus", "nextstep"]  # FLUX.2 [dev]: no CFG
    assert family_spec("toy").builtin_path == "builtin" and not family_spec("toy").hub_weights


def test_every_family_but_the_shipped_demo_names_its_tiny_builder():
    assert tiny_families() == [
        "cosmos",
        "flux",
        "flux2",
        "flux2_klein",
        "flux_kontext",
        "hunyuan_video15",
        "hunyuan_video15_i2v",
        "janus",
        "nextstep",
        "qwen_image",
        "qwen_image_edit",
        "qwen_image_edit_plus",
        "sd3",
        "wan",
        "wan_i2v",
        "z_image",
    ]
    with pytest.raises(ValueError, match="declares no tiny builder"):
        family_spec("toy").build_tiny()


def test_reading_the_specs_imports_no_model_library():
    code = (
        "import sys\nfrom genalign.models.registry import MODEL_FAMILIES\nfrom genalign.models.spec import "
        "family_spec\n[family_spec(n).policy_class() for n in MODEL_FAMILIES.names()]\n"
        "print(sorted(m for m in ('diffusers', 'transformers', 'peft') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip() == "[]"


def test_a_spec_refuses_impossible_declarations():
    with pytest.raises(ValueError, match="sampler='sde'"):
        FamilySpec(name="x", policy="m:P", sampler="sde")
    with pytest.raises(ValueError, match="export='diffusers' needs pipeline_class"):
        FamilySpec(name="x", policy="m:P")
    with pytest.raises(ValueError, match="fixed_size"):
        FamilySpec(name="x", policy="m:P", export="none", fixed_size=20)
    assert FamilySpec(name="v", policy="m:P", export="none", media="video").pipeline_tag == "text-to-video"


def test_a_dotted_family_resolves_only_when_allowed():
    with pytest.raises(RegistryError, match=r"listed in model.allow_import"):
        family_spec("user_family:SPEC")
    assert family_spec("user_family:SPEC", ["user_family:SPEC"]).name == "pixel_sd3"
    with pytest.raises(RegistryError, match="not a FamilySpec"):
        family_spec("user_family:PixelSD3Policy", ["user_family:PixelSD3Policy"])


def test_the_family_checks_read_the_spec():
    from genalign.config.schema import ExperimentConfig
    from genalign.models.family_checks import family_problems

    cfg = ExperimentConfig()
    cfg.model.family, cfg.model.gradient_checkpointing, cfg.model.negative_prompt = "janus", True, "blurry"
    cfg.rollout.height = cfg.rollout.width = 384
    assert family_problems(cfg) == [
        "model.gradient_checkpointing=true: model.family=janus does not support it; set it to false",
        "model.negative_prompt is set but model.family=janus uses a fixed negative prompt for CFG; remove it "
        "(families that read it: cosmos, hunyuan_video15, hunyuan_video15_i2v, wan, wan_i2v, z_image)",
    ]
    cfg.model.family, cfg.model.gradient_checkpointing, cfg.model.num_frames = "wan", False, 33
    assert family_problems(cfg) == []
    cfg.model.family = "no_such_family"
    assert family_problems(cfg) == []  # the registry check names it


JANUS_RECIPE = "experiment/autoregressive/janus_pro/online_grpo_ocr"
JANUS_UNREAD = {  # each key Janus-Pro's spec declares unread, set away from its default
    "rollout.num_steps": 20,
    "rollout.noise_level": 1.0,
    "rollout.kernel": "cps",
    "eval.num_steps": 10,
}


def test_janus_declares_the_flow_samplers_keys_unread():
    """The token collector hands Janus-Pro's sampler guidance and temperature only, in rollout and
    evaluation: the flow sampler's steps, noise and kernel are settings it does not have."""
    spec = family_spec("janus")
    assert set(spec.unread_keys) == set(JANUS_UNREAD) and spec.unread_reason
    assert not spec.reads("rollout.num_steps") and spec.reads("rollout.temperature")
    assert spec.reads_override("rollout.guidance_scale=5") and not spec.reads_override("+eval.num_steps=2")


@pytest.mark.parametrize("key", sorted(JANUS_UNREAD))
def test_a_key_janus_does_not_read_is_a_config_error_naming_it(key):
    from genalign.config.errors import ConfigError
    from genalign.preflight.load import load_config

    value = JANUS_UNREAD[key]
    with pytest.raises(ConfigError) as error:
        load_config(JANUS_RECIPE, [f"{key}={value}"], check_files=False)
    assert (
        f"{key}={value}: model.family=janus does not read it (it draws its image tokens one at a time from "
        "the generation head's softmax: no denoising steps, SDE noise or transition kernel); remove it"
    ) in str(error.value)


@pytest.mark.parametrize("model", ["pro_7b", "pro_1b"])
def test_the_shipped_janus_recipe_loads_and_leaves_the_unread_keys_at_their_defaults(model):
    from genalign.config.schema import ExperimentConfig
    from genalign.models.family_checks import unread_key_problems
    from genalign.preflight.load import load_config

    cfg = load_config(JANUS_RECIPE, [f"/model/autoregressive/janus_pro={model}"], check_files=False)
    assert cfg.model.family == "janus" and unread_key_problems(family_spec("janus"), cfg) == []
    defaults = ExperimentConfig()
    assert (cfg.rollout.num_steps, cfg.rollout.noise_level, cfg.rollout.kernel, cfg.eval.num_steps) == (
        defaults.rollout.num_steps,
        defaults.rollout.noise_level,
        defaults.rollout.kernel,
        defaults.eval.num_steps,
    )


@pytest.mark.parametrize("name", MODEL_FAMILIES.names())
def test_each_familys_unread_keys_are_config_keys(name):
    from genalign.config.schema import ExperimentConfig
    from genalign.models.family_checks import unread_key_problems

    spec = family_spec(name)
    assert unread_key_problems(spec, ExperimentConfig()) == []  # each resolves, at its default
    assert all(not spec.reads(key) for key in spec.unread_keys)


def test_a_spec_names_why_its_keys_are_unread_and_a_typo_is_reported():
    from dataclasses import replace

    from genalign.config.schema import ExperimentConfig
    from genalign.models.family_checks import unread_key_problems

    with pytest.raises(ValueError, match="unread_keys needs unread_reason"):
        replace(family_spec("toy"), unread_keys=("rollout.num_steps",))
    typo = replace(family_spec("toy"), unread_keys=("rollout.num_step",), unread_reason="none")
    assert unread_key_problems(typo, ExperimentConfig()) == [
        "model.family=toy: its FamilySpec's unread_keys names 'rollout.num_step', not a config key"
    ]


def test_nextsteps_head_walk_reads_the_rollout_keys_and_refuses_what_it_cannot_train():
    from genalign.config.schema import ExperimentConfig
    from genalign.models.family_checks import family_problems

    cfg = ExperimentConfig()
    cfg.model.family, cfg.rollout.height, cfg.rollout.width = "nextstep", 64, 64
    spec = family_spec("nextstep")
    assert spec.reads("rollout.num_steps") and spec.rollout_sampler is not None
    for steps, kernel, noise in ((20, "em_sde", 1.0), (2, "flow_sde", 0.7), (50, "cps", 0.5)):
        cfg.rollout.num_steps, cfg.rollout.kernel, cfg.rollout.noise_level = steps, kernel, noise
        cfg.eval.num_steps = steps
        assert family_problems(cfg) == []
    # evaluation samples with the policy the walk is built into: another eval.num_steps is refused
    cfg.eval.num_steps = 40
    assert family_problems(cfg) == [
        "eval.num_steps=40: model.family=nextstep evaluates with the walk its policy is built with, "
        "rollout.num_steps=50; set eval.num_steps=50 (or eval.num_steps: ${rollout.num_steps}, as its model "
        "preset does)"
    ]
    cfg.eval.num_steps = 1
    cfg.rollout.num_steps, cfg.rollout.noise_level = 1, 0.0
    assert family_problems(cfg) == [
        "rollout.num_steps=1: NextStep-1's flow head walks at least 2 steps (one stochastic step, then the "
        "authors' last Euler step); the authors sample with 50",
        "rollout.noise_level=0: NextStep-1's flow head then draws no noise and records no log-probs for AR-GRPO "
        "to train; the authors' sampler is noise level 1.0",
    ]
    assert family_spec("janus").rollout_sampler_problems(cfg.rollout) == []  # reads them per call: no check
