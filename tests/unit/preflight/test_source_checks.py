"""The checks of an editing run before anything loads: source images at the run's size, a
family that takes no source images, a scorer that needs them on a manifest without any."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from genalign.config.loader import compose_config
from genalign.preflight.files import file_problems

RECIPE = "experiment/diffusion/flux_kontext/online_grpo_edit"


def edit_manifest(folder: Path, size: int, with_source: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.zeros((size, size, 3), dtype=np.uint8)).save(folder / "a.png")
    row = {"prompt": "make it red", **({"source_image": "a.png"} if with_source else {})}
    path = folder / "edits.jsonl"
    path.write_text(json.dumps(row) + "\n")
    return path


def problems(overrides: list[str]) -> list[str]:
    cfg = compose_config(RECIPE, ["reward.components.vlm_judge=0.0", *overrides])
    return file_problems(cfg, output_dir=False, resume=False)


def test_the_shipped_recipe_and_its_prompt_set_pass():
    assert [p for p in problems([]) if "source" in p] == []


def test_a_source_of_another_size_than_the_rollout_names_file_and_row(tmp_path):
    path = edit_manifest(tmp_path, 64)
    found = problems([f"data.manifest={path}", f"data.eval_manifest={path}", "rollout.height=32", "rollout.width=32"])
    assert any(
        p.startswith(f"data.manifest: line 1 of {path}") and "is 64x64, the rollout is 32x32" in p for p in found
    ), found


def test_the_eval_manifest_is_checked_at_the_evaluations_size(tmp_path):
    path = edit_manifest(tmp_path, 64)
    found = problems([f"data.manifest={path}", f"data.eval_manifest={path}", "rollout.height=64", "rollout.width=64"])
    assert not [p for p in found if "source" in p or "64x64" in p]
    found = problems([f"data.eval_manifest={path}", "eval.height=32", "eval.width=32"])
    assert any(p.startswith("data.eval_manifest:") and "the rollout is 32x32" in p for p in found), found


def test_a_text_to_image_family_refuses_source_images(tmp_path):
    path = edit_manifest(tmp_path, 512)
    found = problems(["model.family=flux", f"data.manifest={path}"])
    assert any(
        p.startswith(f"data.manifest: {path}:1 carries 1 source image(s)")
        and "model.family=flux is text-conditioned only" in p
        for p in found
    ), found


def test_a_scorer_that_needs_the_source_refuses_a_manifest_without_one(tmp_path):
    path = edit_manifest(tmp_path, 512, with_source=False)
    found = problems([f"data.manifest={path}"])
    assert any(
        p.startswith("reward.components.image_similarity compares each result with its source image")
        and "data.manifest names none" in p
        for p in found
    ), found
    assert not any("data.eval_manifest names none" in p for p in found)  # the shipped eval set has sources


def test_the_memory_plan_counts_the_source_tokens_beside_the_targets():
    """Kontext's sequence is [text, target, source]: at 512x512 and 128 text tokens, 128 + 2 x 1024
    tokens a row where FLUX.1's text-to-image is 128 + 1024."""
    from genalign.models.architecture import load_architecture
    from genalign.models.spec import family_spec
    from genalign.preflight.memory_terms import _tokens

    kontext = compose_config(RECIPE, [])
    flux = compose_config("experiment/diffusion/flux/online_grpo_ocr", [])
    kontext_arch = load_architecture(family_spec("flux_kontext"), kontext.model.path)
    flux_arch = load_architecture(family_spec("flux"), flux.model.path)
    assert kontext_arch.geometry.source_images == 1 and flux_arch.geometry.source_images == 0
    assert _tokens(kontext, kontext_arch) == 128 + 2 * 1024 and _tokens(flux, flux_arch) == 128 + 1024


def test_an_image_to_video_family_refuses_a_prompt_without_its_first_frame(tmp_path):
    """Wan I2V animates each prompt's source image (`FamilySpec.source_required`): a row without one
    is one line naming the row, before anything loads; the shipped image-to-video sets pass."""
    path = edit_manifest(tmp_path, 480, with_source=False)
    recipe = "experiment/diffusion/wan_2_2/i2v_a14b_online_grpo_pickscore"
    found = file_problems(compose_config(recipe, [f"data.manifest={path}"]), output_dir=False, resume=False)
    assert any(
        p.startswith(f"data.manifest: {path}:1 carries no source image") and "model.family=wan_i2v needs one" in p
        for p in found
    ), found
    assert not any("data.eval_manifest" in p for p in found)
    shipped = file_problems(compose_config(recipe, []), output_dir=False, resume=False)
    assert not [p for p in shipped if "source" in p]


def test_a_spec_needing_sources_must_take_some():
    import pytest

    from genalign.models.spec import FamilySpec

    with pytest.raises(ValueError, match="source_required"):
        FamilySpec(name="x", policy="m:P", export="none", source_required=True)


def test_pipeline_source_resolution_counts_the_sources_at_the_pipelines_size():
    """model.source_resolution=pipeline: the memory plan counts each source at the size
    QwenImageEditPipeline resizes it to (about 1024² pixels at its ratio, sides multiples of 32):
    a 512x512 source is 1024x1024, 4096 tokens where the run's size is 1024; a 512x768 one is
    832x1248 (round(sqrt(1024² x 1.5) / 32) x 32 = 1248, round(1248.1 / 1.5 / 32) x 32 = 832),
    52 x 78 = 4056 tokens where the run's size is 32 x 48 = 1536."""
    from genalign.models.architecture import load_architecture
    from genalign.models.spec import family_spec
    from genalign.preflight.memory_terms import _tokens

    for family, recipe in [
        ("qwen_image_edit", "experiment/diffusion/qwen_image_edit/online_grpo_edit"),
        ("qwen_image_edit_plus", "experiment/diffusion/qwen_image_edit_plus/online_grpo_edit"),
    ]:
        for (height, width), run_tokens, pipeline_tokens in [((512, 512), 1024, 4096), ((512, 768), 1536, 4056)]:
            size = [f"rollout.height={height}", f"rollout.width={width}"]
            run = compose_config(recipe, size)
            pipeline = compose_config(recipe, [*size, "model.source_resolution=pipeline"])
            arch = load_architecture(family_spec(family), run.model.path)
            assert arch.geometry.source_images == 1
            assert _tokens(pipeline, arch) - _tokens(run, arch) == pipeline_tokens - run_tokens, (family, height, width)


def test_flux_kontext_pipeline_source_resolution_counts_the_sources_at_the_preferred_kontext_size():
    """model.source_resolution=pipeline on FLUX.1 Kontext: the memory plan counts the source at the
    preferred Kontext resolution nearest its aspect ratio (FluxKontextPipeline's `_auto_resize`),
    16 pixels a token: a 512x512 source is 1024x1024, 64 x 64 = 4096 tokens where the run's size is
    1024; a 512x640 one (ratio 1.25: 1104/944 = 1.169 is nearer than 1184/880 = 1.345) is 944x1104,
    59 x 69 = 4071 tokens where the run's size is 32 x 40 = 1280. The result's tokens do not move."""
    from genalign.models.architecture import load_architecture
    from genalign.models.spec import family_spec
    from genalign.preflight.memory_terms import _tokens

    for (height, width), run_tokens, pipeline_tokens in [((512, 512), 1024, 4096), ((512, 640), 1280, 4071)]:
        size = [f"rollout.height={height}", f"rollout.width={width}"]
        run = compose_config(RECIPE, size)
        pipeline = compose_config(RECIPE, [*size, "model.source_resolution=pipeline"])
        arch = load_architecture(family_spec("flux_kontext"), run.model.path)
        assert _tokens(pipeline, arch) - _tokens(run, arch) == pipeline_tokens - run_tokens, (height, width)


def test_pipeline_source_resolution_on_a_family_without_that_resize_is_refused_naming_the_key():
    """Wan I2V's pipeline resizes its source to the result's size, the run's: no second size."""
    from genalign.config.errors import ConfigError
    from genalign.preflight.load import load_config

    recipe = "experiment/diffusion/wan_2_2/i2v_a14b_online_grpo_pickscore"
    with pytest.raises(ConfigError, match="model.source_resolution=pipeline: model.family=wan_i2v"):
        load_config(recipe, ["model.source_resolution=pipeline"])
    assert compose_config(recipe, []).model.source_resolution == "run"


def test_a_source_resolution_that_is_no_choice_is_one_line_naming_the_key():
    from genalign.config.errors import ConfigError
    from genalign.preflight.load import load_config

    with pytest.raises(ConfigError) as raised:
        load_config(RECIPE, ["model.source_resolution=native"])
    message = str(raised.value)
    assert "model.source_resolution" in message and "native" in message and "\n" not in message.strip(), message
    assert compose_config(RECIPE, []).model.source_resolution == "run"  # Flow-GRPO's, the default


FLF2V_RECIPE = "experiment/diffusion/wan_2_1/flf2v_14b_online_grpo_pickscore"
I2V_RECIPE = "experiment/diffusion/wan_2_1/i2v_14b_online_grpo_pickscore"


def test_each_wan_i2v_checkpoint_takes_its_own_count_of_source_images_before_loading():
    """FLF2V's transformer embeds a first and a last frame, Wan 2.1 I2V's one image
    (`FamilySpec.source_count`, asked of the checkpoint's architecture file): a manifest whose rows
    carry the other count is one line naming the row and the checkpoint; the shipped sets pass."""
    shipped = file_problems(compose_config(FLF2V_RECIPE, []), output_dir=False, resume=False)
    assert not [p for p in shipped if "source" in p], shipped
    one_image = compose_config(FLF2V_RECIPE, ["data.manifest=datasets/i2v/train_240.jsonl"])
    found = file_problems(one_image, output_dir=False, resume=False)
    assert any(
        p.startswith("data.manifest: ")
        and ":1 carries 1 source image(s); model.path=Wan-AI/Wan2.1-FLF2V-14B-720P-Diffusers takes 2 a prompt" in p
        for p in found
    ), found
    two_images = compose_config(I2V_RECIPE, ["data.eval_manifest=datasets/i2v/test_flf2v_240.jsonl"])
    found = file_problems(two_images, output_dir=False, resume=False)
    assert any(
        p.startswith("data.eval_manifest: ") and "carries 2 source image(s)" in p and "takes 1 a prompt" in p
        for p in found
    ), found
