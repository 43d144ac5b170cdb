"""The exported model card: Hub front matter and the training/eval facts, from config + history."""

from __future__ import annotations

import yaml

from genalign.export.model_card import model_card
from genalign.preflight.load import load_config

OCR = "experiment/diffusion/sd3_5/online_grpo_ocr"


def front_matter(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def test_lora_card_has_hub_front_matter_recipe_reward_steps_and_latest_eval():
    cfg = load_config(
        OCR, ["reward.components.jpeg_compressibility=0.5", "eval.gold_rewards={jpeg_incompressibility: 1.0}"]
    )
    history = {"steps": [0, 60, 120], "reward": [0.25, 0.5, 0.75], "gold": [5.0, 5.5, 6.0]}
    card = model_card(cfg, 60, history, "lora", "EMA (decay 0.9)")
    assert front_matter(card) == {
        "base_model": "stabilityai/stable-diffusion-3.5-medium",
        "license": "other",
        "license_name": "stabilityai-ai-community",
        "license_link": "https://huggingface.co/stabilityai/stable-diffusion-3.5-medium/blob/main/LICENSE.md",
        "pipeline_tag": "text-to-image",
        "library_name": "diffusers",
        "tags": ["lora", "genalign", "diffusers", "text-to-image", "grpo", "sd3"],
    }
    for text in (
        f"- recipe: `{OCR}`",
        "- reward (weighted_sum): `ocr` x 1, `jpeg_compressibility` x 0.5",
        "- steps trained: 60 of 1000 (8 prompts x 8 samples per step)",
        "- weights: EMA (decay 0.9)",
        "- LoRA: rank 32, alpha 64",
        "Latest evaluation (step 60,",  # not step 120: after this checkpoint
        "| eval reward (mean) | 0.5000 |",
        "| gold reward jpeg_incompressibility (mean) | 5.5000 |",
        "| eval reward at step 0 (mean) | 0.2500 |",
        "pipe.load_lora_weights(",
    ):
        assert text in card, text


def test_transformer_card_without_evaluation():
    cfg = load_config(None)
    card = model_card(cfg, 100, {"steps": [], "reward": [], "gold": []}, "transformer", "live (no EMA)")
    assert front_matter(card)["tags"][0] == "genalign" and "lora" not in front_matter(card)["tags"]
    assert "No evaluation ran before this checkpoint." in card
    assert "transformer = AutoModel.from_pretrained(" in card and "transformer=transformer" in card
    assert "- recipe: `experiment/toy/shapes_grpo`" in card and "LoRA:" not in card


def test_the_card_loads_the_base_model_at_its_revision():
    cfg = load_config("experiment/diffusion/cosmos/online_grpo_pickscore")
    card = model_card(cfg, 10, {"steps": [], "reward": [], "gold": []}, "lora", "live (no EMA)")
    assert (
        "DiffusionPipeline.from_pretrained('nvidia/Cosmos-Predict2.5-2B', revision='diffusers/base/post-trained', "
        "dtype=torch.bfloat16)" in card
    )
    assert "from_pretrained('stabilityai/stable-diffusion-3.5-medium', dtype=torch.bfloat16)" in model_card(
        load_config(OCR), 10, {"steps": [], "reward": [], "gold": []}, "lora", "live (no EMA)"
    )


NO_EVAL = {"steps": [], "reward": [], "gold": []}


def test_a_local_model_is_never_carded_as_the_presets_model(tmp_path):
    """A local tiny SD3 run through the SD3.5 recipe: no base_model, no SD3.5 licence; the
    snippet loads the directory the run loaded."""
    local = tmp_path / "tiny-sd3"
    local.mkdir()
    card = model_card(load_config(OCR, [f"model.path={local}"], check_files=False), 10, NO_EVAL, "lora", "live")
    front = front_matter(card)
    assert "base_model" not in front and "license" not in front and "## License" not in card
    assert "stabilityai" not in card
    assert f"DiffusionPipeline.from_pretrained({str(local)!r}, dtype=torch.bfloat16)" in card
    assert "set model.card.base_model to the Hub id of a local copy" in card


def test_a_local_copy_named_by_model_card_base_model_keeps_the_presets_licence(tmp_path):
    local = tmp_path / "sd35"  # e.g. a snapshot copied to a cluster's shared disk
    local.mkdir()
    cfg = load_config(
        OCR, [f"model.path={local}", "model.card.base_model=stabilityai/stable-diffusion-3.5-medium"], check_files=False
    )
    card = model_card(cfg, 10, NO_EVAL, "lora", "live")
    front = front_matter(card)
    assert front["base_model"] == "stabilityai/stable-diffusion-3.5-medium" and front["license"] == "other"
    assert "from_pretrained('stabilityai/stable-diffusion-3.5-medium', dtype" in card and str(local) not in card


def test_another_hub_model_is_carded_under_its_own_id_without_the_presets_licence():
    cfg = load_config(
        OCR, ["model.path=someone/sd35-finetune", "model.card.base_model=stabilityai/other"], check_files=False
    )
    front = front_matter(model_card(cfg, 10, NO_EVAL, "lora", "live"))
    assert front["base_model"] == "someone/sd35-finetune" and "license" not in front  # the path wins; no guess
    mit = load_config(
        OCR,
        [
            "model.path=someone/sd35-finetune",
            "model.card.describes=null",
            "model.card.license=mit",
            "model.card.license_name=null",
            "model.card.license_link=null",
        ],
        check_files=False,
    )
    assert front_matter(model_card(mit, 10, NO_EVAL, "lora", "live"))["license"] == "mit"  # the user's own licence


def test_a_local_model_without_a_hub_id_has_no_base_model(tmp_path):
    local = tmp_path / "mine"
    local.mkdir()
    cfg = load_config(OCR, [f"model.path={local}", "model.card.base_model=null"], check_files=False)
    assert "base_model" not in front_matter(model_card(cfg, 10, NO_EVAL, "lora", "live"))


def test_video_families_are_tagged_text_to_video_and_carry_their_licence():
    cfg = load_config("experiment/diffusion/wan_2_1/online_grpo_pickscore")
    card = model_card(cfg, 10, NO_EVAL, "lora", "live", pipeline_tag="text-to-video")
    front = front_matter(card)
    assert front["pipeline_tag"] == "text-to-video" and "text-to-video" in front["tags"]
    assert front["license"] == "apache-2.0" and "license_name" not in front
    assert front["base_model"] == "Wan-AI/Wan2.1-T2V-1.3B-Diffusers"
    assert "## License" in card and "apache-2.0." in card


def test_the_families_declare_their_modality():
    from genalign.models.registry import MODEL_FAMILIES
    from genalign.models.spec import family_spec

    tags = {name: family_spec(name).pipeline_tag for name in MODEL_FAMILIES.names()}
    assert tags == {
        "sd3": "text-to-image",
        "flux": "text-to-image",
        "flux_kontext": "image-to-image",
        "qwen_image": "text-to-image",
        "wan": "text-to-video",
        "wan_i2v": "image-to-video",
        "qwen_image_edit": "image-to-image",
        "qwen_image_edit_plus": "image-to-image",
        "cosmos": "text-to-video",
        "hunyuan_video15": "text-to-video",
        "hunyuan_video15_i2v": "image-to-video",
        "janus": "text-to-image",
        "nextstep": "text-to-image",
        "toy": "text-to-image",
        "flux2_klein": "text-to-image",
        "flux2": "text-to-image",
        "z_image": "text-to-image",
    }


def test_every_preset_names_its_models_licence():
    from genalign.hub import HUB_ID

    for recipe in (
        OCR,
        "experiment/diffusion/flux/online_grpo_ocr",
        "experiment/diffusion/qwen_image/online_grpo_ocr",
        "experiment/diffusion/wan_2_1/online_grpo_pickscore",
        "experiment/diffusion/cosmos/online_grpo_pickscore",
        "experiment/diffusion/hunyuan_video15/online_grpo_pickscore",
        "experiment/autoregressive/janus_pro/online_grpo_ocr",
    ):
        cfg = load_config(recipe)
        card = cfg.model.card
        assert HUB_ID.match(card.describes) and card.describes == cfg.model.path and card.license, recipe
        assert card.base_model is None, recipe  # model.path is the Hub id
        assert card.license != "other" or (card.license_name and card.license_link), recipe


def test_sample_sheets_are_shown_beside_the_card_and_the_latest_is_the_widget():
    card = model_card(
        load_config(OCR),
        60,
        NO_EVAL,
        "lora",
        "live",
        sample_sheets={"samples_step_0.png": 0, "samples_step_60.png": 60},
        eval_prompts=["a sign that says 'open'", "a cup", "a cup"],
    )
    assert "![evaluation samples at step 0](samples_step_0.png)" in card
    assert card.index("![evaluation samples at step 0]") < card.index("![evaluation samples at step 60]")
    assert front_matter(card)["widget"] == [
        {"text": "a sign that says 'open'; a cup", "output": {"url": "samples_step_60.png"}}
    ]
    assert "image = pipe(\"a sign that says 'open'\", height=512, width=512, num_inference_steps=40)" in card
    assert "widget" not in front_matter(model_card(load_config(OCR), 60, NO_EVAL, "lora", "live"))


def test_model_card_keys_are_checked():
    import pytest

    from genalign.config.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        load_config(None, ["model.card.license=other", "model.card.base_model=/data/sd35"])
    assert [p.split(": ", 1)[1] if p.startswith("<") else p for p in err.value.problems] == [
        "model.card.license=other needs model.card.license_name (and license_link): the Hub shows that name for a "
        "licence it does not list",
        "model.card.base_model='/data/sd35' is not a Hub id (org/name); set the id the base model has on the Hub, "
        "or null",
    ]


def test_model_card_keys_may_change_on_resume_and_may_be_absent_from_old_checkpoints():
    from genalign.config.loader import config_to_dict
    from genalign.runs.resume import incompatible_keys

    now = config_to_dict(load_config(OCR))
    old = config_to_dict(load_config(OCR))
    del old["model"]["card"]  # a checkpoint written before model.card existed
    assert incompatible_keys(old, now) == []
    old["model"]["card"] = {"license": "mit"}
    assert incompatible_keys(old, now) == []
    old["model"]["lora"]["rank"] = 4  # run state still counts
    assert incompatible_keys(old, now) == ["model.lora.rank: checkpoint 4 vs now 32"]


def test_an_editing_familys_card_loads_a_source_image_in_its_snippet():
    from genalign.export.model_card import usage_snippet

    cfg = load_config("experiment/diffusion/flux_kontext/online_grpo_edit", [])
    lines = usage_snippet(cfg, "lora", None, "image-to-image", "user/kontext-lora", ["make the red circle orange"])
    code = "\n".join(lines)
    compile(code, "<card>", "exec")  # valid Python
    assert "pipe.load_lora_weights('user/kontext-lora')" in code
    assert "pipe(image=load_image('source.png'), prompt='make the red circle orange'" in code
