"""image_reward on a tiny random BLIP in ImageReward's checkpoint layout (timm ViT names, BLIP's
BERT names, `mlp.layers.*`), converted to safetensors and loaded through the scorer. The text
tower is BLIP's published MED config for a ViT-L (tests/fixtures/README.md) shrunk in width and
depth; the ViT is ImageReward's ViT-L/16 at 224 pixels (BLIP's `create_vit("large")`, no config
file) shrunk likewise. BERT's vocabulary is not shipped: the tokenizer is a small WordPiece one."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from genalign.rewards.image_reward import MEAN, STD, ImageRewardReward, configs_from_shapes, split_checkpoint

TIMM_NAMES = {
    "embeddings.class_embedding": "cls_token",
    "embeddings.position_embedding": "pos_embed",
    "embeddings.patch_embedding.weight": "patch_embed.proj.weight",
    "embeddings.patch_embedding.bias": "patch_embed.proj.bias",
    "post_layernorm.weight": "norm.weight",
    "post_layernorm.bias": "norm.bias",
}
TIMM_BLOCK = {
    "layer_norm1": "norm1",
    "self_attn.qkv": "attn.qkv",
    "self_attn.projection": "attn.proj",
    "layer_norm2": "norm2",
    "mlp.fc1": "mlp.fc1",
    "mlp.fc2": "mlp.fc2",
}
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def timm_name(key: str) -> str:
    if key in TIMM_NAMES:
        return TIMM_NAMES[key]
    _, _, index, rest = key.split(".", 3)  # encoder.layers.<i>.<module>.<kind>
    module, _, kind = rest.rpartition(".")
    return f"blocks.{index}.{TIMM_BLOCK[module]}.{kind}"


VIT_L_16 = dict(
    hidden_size=1024,
    intermediate_size=4096,
    num_hidden_layers=24,
    num_attention_heads=16,
    image_size=224,
    patch_size=16,
    layer_norm_eps=1e-6,
)
"""ImageReward's image encoder: `BLIP_Pretrain(image_size=224, vit="large")`, BLIP's ViT-L/16 (in
code, `create_vit`; heads of 64, MLP ratio 4, LayerNorm eps 1e-6)."""


def vision_config(tiny: bool = True):
    from published import TINY_HEADS
    from transformers import BlipVisionConfig

    spec = dict(VIT_L_16)
    if tiny:  # 2 heads of 64, 2 blocks; the real image size and patch
        spec.update(
            hidden_size=TINY_HEADS * 64,
            intermediate_size=TINY_HEADS * 64 * 4,
            num_hidden_layers=2,
            num_attention_heads=TINY_HEADS,
        )
    return BlipVisionConfig(**spec)


def checkpoint(vision, text, head) -> dict[str, torch.Tensor]:
    """The modules' tensors under ImageReward.pt's names (with the unused ones it also holds)."""
    state = {f"blip.visual_encoder.{timm_name(k)}": v for k, v in vision.state_dict().items()}
    state.update({f"blip.text_encoder.{k}": v for k, v in text.state_dict().items()})
    state.update({f"mlp.{k}": v for k, v in head.state_dict().items()})
    device = next(head.parameters()).device  # "meta" for shapes only
    state["blip.text_encoder.embeddings.position_ids"] = torch.arange(
        text.config.max_position_embeddings, device=device
    )[None]
    state["blip.vision_proj.weight"] = torch.zeros(4, vision.config.hidden_size, device=device)
    return state


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Modules built here from the configs, their weights written in ImageReward's layout, a BERT tokenizer."""
    from published import blip_text_config
    from transformers import BertTokenizer, BlipVisionModel
    from transformers.models.blip.modeling_blip_text import BlipTextModel

    from genalign.rewards.aesthetic import AestheticMLP

    root = tmp_path_factory.mktemp("image_reward")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *LETTERS]
    (root / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizer(str(root / "vocab.txt")).save_pretrained(root / "tokenizer")
    torch.manual_seed(0)
    vision = BlipVisionModel(vision_config()).eval()
    text = BlipTextModel(blip_text_config(encoder_width=vision.config.hidden_size), add_pooling_layer=False).eval()
    head = AestheticMLP(input_size=text.config.hidden_size).eval()
    for p in head.parameters():
        torch.nn.init.normal_(p, std=0.3)
    save_file(checkpoint(vision, text, head), str(root / "image_reward.safetensors"))
    return {
        "path": str(root / "image_reward.safetensors"),
        "tokenizer": str(root / "tokenizer"),
        "vision": vision,
        "text": text,
        "head": head,
    }


def test_the_architecture_read_from_a_full_size_checkpoint_is_blips_published_config():
    """ImageReward.pt's tensor shapes at full size (on meta) -> `configs_from_shapes` gives back
    the published MED config (widths, depth, heads of 64, eps, positions, vocabulary, the ViT-L's
    1024 wide cross-attention) and the ViT-L/16 at 224."""
    from published import BLIP_MED_LARGE, blip_text_config, read_json
    from transformers import BlipVisionModel
    from transformers.models.blip.modeling_blip_text import BlipTextModel

    from genalign.rewards.aesthetic import AestheticMLP

    with torch.device("meta"):
        vision = BlipVisionModel(vision_config(tiny=False))
        text = BlipTextModel(blip_text_config(tiny=False), add_pooling_layer=False)
        head = AestheticMLP(input_size=text.config.hidden_size)
    vision_state, text_state, _ = split_checkpoint(checkpoint(vision, text, head))
    vision_config_read, text_config_read = configs_from_shapes(vision_state, text_state)
    med = read_json(BLIP_MED_LARGE)
    assert not med["add_type_embeddings"] and not any("token_type" in key for key in text_state)
    read = text_config_read.to_dict()
    assert {
        key: read[key]
        for key in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "max_position_embeddings",
            "layer_norm_eps",
            "hidden_act",
        )
    } == {
        key: med[key]
        for key in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "max_position_embeddings",
            "layer_norm_eps",
            "hidden_act",
        )
    }
    assert read["encoder_hidden_size"] == med["encoder_width"] == vision_config_read.hidden_size
    assert {key: getattr(vision_config_read, key) for key in VIT_L_16} == VIT_L_16


def test_score_is_imagereward_formula_on_the_checkpoint(tiny):
    from transformers import BertTokenizer

    reward = ImageRewardReward(weights_path=tiny["path"], tokenizer_name=tiny["tokenizer"])
    images = torch.randint(0, 256, (2, 3, 40, 48), generator=torch.Generator().manual_seed(1), dtype=torch.uint8)
    prompts = ["a cat", "blue sky over hills"]
    scores = reward.score(images, prompts, [{}, {}])
    # by hand, with the modules the checkpoint was written from: ViT tokens -> BERT [CLS] reading
    # the prompt (35 tokens, padded) with cross-attention -> MLP -> (x - mean) / std
    pixels = reward.transform(images)
    tokenizer = BertTokenizer.from_pretrained(tiny["tokenizer"])
    tokens = tokenizer(prompts, padding="max_length", truncation=True, max_length=35, return_tensors="pt")
    with torch.no_grad():
        image_tokens = tiny["vision"](pixel_values=pixels).last_hidden_state
        hidden = tiny["text"](
            input_ids=tokens["input_ids"],
            attention_mask=tokens["attention_mask"],
            encoder_hidden_states=image_tokens,
            encoder_attention_mask=torch.ones(image_tokens.shape[:-1], dtype=torch.long),
        ).last_hidden_state
        expected = (tiny["head"](hidden[:, 0]) - MEAN) / STD
    assert scores.shape == (2,) and torch.allclose(scores, expected, atol=1e-6)
    assert pixels.shape[-2:] == (224, 224)  # image size read from the checkpoint's position embedding
    assert reward.text.config.num_attention_heads == 2 and reward.vision.config.num_hidden_layers == 2


def test_bad_checkpoints_name_the_key(tiny, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"reward.kwargs.image_reward.weights_path=None"):
        ImageRewardReward()
    with pytest.raises(ValueError, match=r"unknown keys \['blip.itm_head.weight'\]"):
        split_checkpoint({"blip.itm_head.weight": torch.zeros(1)})
    from safetensors.torch import load_file

    broken = {k: v for k, v in load_file(tiny["path"]).items() if k != "mlp.layers.7.bias"}
    save_file(broken, str(tmp_path / "broken.safetensors"))
    with pytest.raises(ValueError, match=r"reward.kwargs.image_reward.weights_path=.*layers.7.bias"):
        ImageRewardReward(weights_path=str(tmp_path / "broken.safetensors"), tokenizer_name=tiny["tokenizer"])
