"""The reward models' architecture files genalign ships (genalign/rewards/architectures/, which
the memory plan counts) against the published files of tests/fixtures/: every value a published
file states must be the shipped one."""

from __future__ import annotations

import json

import pytest

from genalign.rewards.model_sizes import shipped_reward_file


def shipped_config(hub_id: str, component: str = "model") -> dict:
    return json.loads(shipped_reward_file(hub_id).read_text())["components"][component]["config"]


def stated(published: dict, shipped: dict) -> tuple[dict, dict]:
    """The published values of the keys the shipped config states, beside the shipped values."""
    keys = [key for key in shipped if key not in ("model_type",)]
    return {key: published[key] for key in keys}, {key: shipped[key] for key in keys}


@pytest.mark.parametrize(
    "hub_id, architecture, quick_gelu",
    [
        ("openai/clip-vit-large-patch14", "OPEN_CLIP_VIT_L_14", True),  # OpenAI's weights: QuickGELU
        ("laion/CLIP-ViT-H-14-laion2B-s32B-b79K", "OPEN_CLIP_VIT_H_14", None),
        ("yuvalkirstain/PickScore_v1", "OPEN_CLIP_VIT_H_14", None),  # a fine-tune of laion's CLIP-H
    ],
)
def test_clip_files_are_the_published_open_clip_architectures(hub_id, architecture, quick_gelu):
    import published

    config = published.open_clip_config(getattr(published, architecture), quick_gelu=quick_gelu, tiny=False)
    shipped = shipped_config(hub_id)
    assert shipped["projection_dim"] == config.projection_dim
    for tower in ("text_config", "vision_config"):
        real, ours = stated(getattr(config, tower).to_dict(), shipped[tower])
        assert ours == real, (hub_id, tower)


def test_image_reward_text_tower_is_blips_published_med_config():
    from published import blip_text_config

    real, ours = stated(blip_text_config(tiny=False).to_dict(), shipped_config("THUDM/ImageReward", "text"))
    assert ours == real


def test_detector_file_is_genevals_published_mmdet_config():
    """Swin-S (embed 96, depths 2/2/18/2, heads 3/6/12/24, window 7, MLP ratio 4), a 256-wide
    Mask2Former head of 8 heads with 100 queries, 6 pixel-decoder layers (feed-forward 1024), 9
    decoder layers (transformers counts decoder_layers - 1 of them, feed-forward 2048) and the 80
    COCO thing classes."""
    from published import GENEVAL_DETECTOR, mmdet_config

    model = mmdet_config(GENEVAL_DETECTOR)["model"]
    swin, head = model["backbone"], model["panoptic_head"]
    shipped = shipped_config("facebook/mask2former-swin-small-coco-instance")
    backbone = shipped["backbone_config"]
    assert (backbone["embed_dim"], backbone["depths"], backbone["num_heads"], backbone["window_size"]) == (
        swin["embed_dims"],
        swin["depths"],
        swin["num_heads"],
        swin["window_size"],
    )
    assert backbone.get("mlp_ratio", 4.0) == swin["mlp_ratio"]  # SwinConfig's default when the file omits it
    encoder = head["pixel_decoder"]["encoder"]
    decoder = head["transformer_decoder"]
    assert shipped["num_labels"] == head["num_things_classes"] + head["num_stuff_classes"]
    assert shipped["num_queries"] == head["num_queries"]
    assert (
        shipped["hidden_dim"]
        == shipped["feature_size"]
        == shipped["mask_feature_size"]
        == head["feat_channels"]
        == head["out_channels"]
    )
    assert shipped["encoder_layers"] == encoder["num_layers"]
    assert shipped["encoder_feedforward_dim"] == encoder["transformerlayers"]["ffn_cfgs"]["feedforward_channels"]
    assert shipped["decoder_layers"] - 1 == decoder["num_layers"]
    assert shipped["num_attention_heads"] == decoder["transformerlayers"]["attn_cfgs"]["num_heads"]
    assert shipped["dim_feedforward"] == decoder["transformerlayers"]["feedforward_channels"]
    assert shipped["feature_strides"] == head["strides"]
