"""image_reward on a tiny random BLIP in ImageReward's checkpoint layout (timm ViT names, BLIP's
BERT names, `mlp.layers.*`), converted to safetensors and loaded through the scorer."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from genalign.rewards.image_reward import MEAN, STD, ImageRewardReward, split_checkpoint

TIMM_NAMES = {"embeddings.class_embedding": "cls_token", "embeddings.position_embedding": "pos_embed",
              "embeddings.patch_embedding.weight": "patch_embed.proj.weight",
              "embeddings.patch_embedding.bias": "patch_embed.proj.bias", "post_layernorm.weight": "norm.weight",
              "post_layernorm.bias": "norm.bias"}
TIMM_BLOCK = {"layer_norm1": "norm1", "self_attn.qkv": "attn.qkv", "self_attn.projection": "attn.proj",
              "layer_norm2": "norm2", "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def timm_name(key: str) -> str:
    if key in TIMM_NAMES:
        return TIMM_NAMES[key]
    _, _, index, rest = key.split(".", 3)  # encoder.layers.<i>.<module>.<kind>
    module, _, kind = rest.rpartition(".")
    return f"blocks.{index}.{TIMM_BLOCK[module]}.{kind}"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Modules built here from configs, their weights written in ImageReward's layout, a BERT tokenizer."""
    from transformers import BertTokenizer, BlipTextConfig, BlipVisionConfig, BlipVisionModel
    from transformers.models.blip.modeling_blip_text import BlipTextModel

    from genalign.rewards.aesthetic import AestheticMLP

    root = tmp_path_factory.mktemp("image_reward")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *LETTERS]
    (root / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizer(str(root / "vocab.txt")).save_pretrained(root / "tokenizer")
    torch.manual_seed(0)
    vision = BlipVisionModel(BlipVisionConfig(hidden_size=128, intermediate_size=64, num_hidden_layers=2,
                                              num_attention_heads=2, image_size=32, patch_size=8,
                                              layer_norm_eps=1e-6)).eval()
    text = BlipTextModel(BlipTextConfig(vocab_size=len(vocab) + 2, hidden_size=64, intermediate_size=32,
                                        num_hidden_layers=2, num_attention_heads=1, encoder_hidden_size=128,
                                        max_position_embeddings=40, layer_norm_eps=1e-12),
                         add_pooling_layer=False).eval()
    head = AestheticMLP(input_size=64).eval()
    for p in head.parameters():
        torch.nn.init.normal_(p, std=0.3)
    state = {f"blip.visual_encoder.{timm_name(k)}": v for k, v in vision.state_dict().items()}
    state.update({f"blip.text_encoder.{k}": v for k, v in text.state_dict().items()})
    state.update({f"mlp.{k}": v for k, v in head.state_dict().items()})
    state["blip.text_encoder.embeddings.position_ids"] = torch.arange(40)[None]
    state["blip.vision_proj.weight"] = torch.zeros(4, 128)
    save_file(state, str(root / "image_reward.safetensors"))
    return {"path": str(root / "image_reward.safetensors"), "tokenizer": str(root / "tokenizer"),
            "vision": vision, "text": text, "head": head}


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
        hidden = tiny["text"](input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"],
                              encoder_hidden_states=image_tokens,
                              encoder_attention_mask=torch.ones(image_tokens.shape[:-1], dtype=torch.long)
                              ).last_hidden_state
        expected = (tiny["head"](hidden[:, 0]) - MEAN) / STD
    assert scores.shape == (2,) and torch.allclose(scores, expected, atol=1e-6)
    assert pixels.shape[-2:] == (32, 32)  # image size read from the checkpoint's position embedding
    assert reward.text.config.num_attention_heads == 1 and reward.vision.config.num_hidden_layers == 2


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
