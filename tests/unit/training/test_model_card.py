"""The exported model card: Hub front matter and the training/eval facts, from config + history."""

from __future__ import annotations

import yaml

from genalign.config.loader import load_config
from genalign.training.model_card import model_card

OCR = "experiment/diffusion/sd3_5/online_grpo_ocr"


def front_matter(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def test_lora_card_has_hub_front_matter_recipe_reward_steps_and_latest_eval():
    cfg = load_config(OCR, ["reward.components.jpeg_compressibility=0.5", "eval.gold_rewards={jpeg_incompressibility: 1.0}"])
    history = {"steps": [0, 60, 120], "reward": [0.25, 0.5, 0.75], "gold": [5.0, 5.5, 6.0]}
    card = model_card(cfg, 60, history, "lora", "EMA (decay 0.9)")
    assert front_matter(card) == {"base_model": "stabilityai/stable-diffusion-3.5-medium", "library_name": "diffusers",
                                  "tags": ["lora", "genalign", "diffusers", "text-to-image", "grpo", "sd3"]}
    for text in (f"- recipe: `{OCR}`", "- reward (weighted_sum): `ocr` x 1, `jpeg_compressibility` x 0.5",
                 "- steps trained: 60 of 1000 (8 prompts x 8 samples per step)", "- weights: EMA (decay 0.9)",
                 "- LoRA: rank 32, alpha 64", "Latest evaluation (step 60,",  # not step 120: after this checkpoint
                 "| eval reward (mean) | 0.5000 |", "| gold reward jpeg_incompressibility (mean) | 5.5000 |",
                 "| eval reward at step 0 (mean) | 0.2500 |", "pipe.load_lora_weights("):
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
    assert ("DiffusionPipeline.from_pretrained('nvidia/Cosmos-Predict2.5-2B', revision='diffusers/base/post-trained')"
            in card)
    assert "from_pretrained('stabilityai/stable-diffusion-3.5-medium')" in model_card(
        load_config(OCR), 10, {"steps": [], "reward": [], "gold": []}, "lora", "live (no EMA)")
