"""ImageReward: a BLIP image-text encoder with an MLP head trained on human preference rankings.

Where it fits: a model-backed reward scored by the reward runtime on decoded uint8 images.

score = (MLP(h_CLS) - 0.16717) / 1.03334, where h_CLS is the [CLS] output of BLIP's BERT text
encoder reading the prompt (BERT tokenizer, padded to 35 tokens) with cross-attention to the
ViT-L/16 image tokens (224², bicubic, centre crop, CLIP mean/std), exactly THUDM/ImageReward's
`ImageReward.score` (`ImageReward/ImageReward.py`, commit c1392c6), which Flow-GRPO's
`imagereward_scorer.py` calls. Scores are z-scores over ImageReward's training set (≈ −2..2).

Model classes: transformers' BLIP (`BlipVisionModel`, and `BlipTextModel` with cross-attention),
the maintained port of the same BLIP code ImageReward builds on, rather than the
`image-reward` package, which pins its own BLIP copy, needs timm/fairscale and loads pickles.
The MLP is the LAION-style head the aesthetic reward uses (same layout). The architecture
(widths, depths, image size, vocabulary) is read from the checkpoint's tensor shapes; heads
are 64-dimensional as in BLIP's ViT and BERT.

Weights: `ImageReward.pt` (hub repo `THUDM/ImageReward`) is a pickle; genalign reads
safetensors only, so convert once where you trust the file:
`safetensors.torch.save_file(torch.load(pt, weights_only=True), "image_reward.safetensors")`
and set `reward.kwargs.image_reward.weights_path`. The tokenizer is BERT's (`tokenizer_name`,
default `bert-base-uncased`) with ImageReward's added `[DEC]` and `[ENC]` tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from genalign.models.config import ComputeDtype
from genalign.rewards.aesthetic import AestheticMLP
from genalign.rewards.image_transform import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, ImageTransform
from genalign.rewards.model_sizes import DeviceModel
from genalign.rewards.options import parse_options
from genalign.rewards.pretrained import load_pretrained, load_weights_file, resolve_dtype

MEAN, STD = 0.16717362830052426, 1.0333394966054072
"""ImageReward's normalisation of the head's output."""
MAX_TEXT_TOKENS = 35
HEAD_DIM = 64
VISION_KEYS = {
    "cls_token": "embeddings.class_embedding",
    "pos_embed": "embeddings.position_embedding",
    "patch_embed.proj.weight": "embeddings.patch_embedding.weight",
    "patch_embed.proj.bias": "embeddings.patch_embedding.bias",
    "norm.weight": "post_layernorm.weight",
    "norm.bias": "post_layernorm.bias",
}
BLOCK_KEYS = {
    "norm1": "layer_norm1",
    "attn.qkv": "self_attn.qkv",
    "attn.proj": "self_attn.projection",
    "norm2": "layer_norm2",
    "mlp.fc1": "mlp.fc1",
    "mlp.fc2": "mlp.fc2",
}
UNUSED = ("blip.vision_proj.", "blip.text_proj.", "blip.text_encoder.embeddings.position_ids")
"""Checkpoint tensors the score does not read (BLIP's contrastive projections, a buffer)."""


def split_checkpoint(state: dict[str, torch.Tensor]) -> tuple[dict, dict, dict]:
    """ImageReward state dict -> (BlipVisionModel, BlipTextModel, head) state dicts."""
    vision, text, head, unknown = {}, {}, {}, []
    for key, value in state.items():
        if key.startswith(UNUSED):
            continue
        if key.startswith("blip.visual_encoder."):
            rest = key[len("blip.visual_encoder.") :]
            if rest in VISION_KEYS:
                vision[VISION_KEYS[rest]] = value
                continue
            if rest.startswith("blocks."):
                _, index, leaf = rest.split(".", 2)
                module, _, kind = leaf.rpartition(".")
                if module in BLOCK_KEYS:
                    vision[f"encoder.layers.{index}.{BLOCK_KEYS[module]}.{kind}"] = value
                    continue
        elif key.startswith("blip.text_encoder."):
            text[key[len("blip.text_encoder.") :]] = value  # BLIP's BERT names are transformers' names
            continue
        elif key.startswith("mlp."):
            head[key[len("mlp.") :]] = value
            continue
        unknown.append(key)
    if unknown:
        more = " ..." if len(unknown) > 5 else ""
        raise ValueError(f"not an ImageReward checkpoint: unknown keys {unknown[:5]}{more}")
    return vision, text, head


def configs_from_shapes(vision: dict[str, torch.Tensor], text: dict[str, torch.Tensor]):
    """BlipVisionConfig and BlipTextConfig matching the checkpoint's tensor shapes."""
    from transformers import BlipTextConfig, BlipVisionConfig

    width = vision["embeddings.class_embedding"].shape[-1]
    patch = vision["embeddings.patch_embedding.weight"].shape[-1]
    grid = int(round((vision["embeddings.position_embedding"].shape[1] - 1) ** 0.5))
    vision_config = BlipVisionConfig(
        hidden_size=width,
        intermediate_size=vision["encoder.layers.0.mlp.fc1.weight"].shape[0],
        num_hidden_layers=1 + max(int(k.split(".")[2]) for k in vision if k.startswith("encoder.layers.")),
        num_attention_heads=width // HEAD_DIM,
        image_size=grid * patch,
        patch_size=patch,
        layer_norm_eps=1e-6,
    )
    hidden = text["embeddings.word_embeddings.weight"].shape[1]
    text_config = BlipTextConfig(
        vocab_size=text["embeddings.word_embeddings.weight"].shape[0],
        hidden_size=hidden,
        intermediate_size=text["encoder.layer.0.intermediate.dense.weight"].shape[0],
        num_hidden_layers=1 + max(int(k.split(".")[2]) for k in text if k.startswith("encoder.layer.")),
        num_attention_heads=hidden // HEAD_DIM,
        encoder_hidden_size=width,
        layer_norm_eps=1e-12,
        max_position_embeddings=text["embeddings.position_embeddings.weight"].shape[0],
    )
    return vision_config, text_config


def image_reward_transform(size: int) -> ImageTransform:
    """ImageReward's `_transform(n_px)`: torchvision `Resize(n_px, BICUBIC)` and `CenterCrop(n_px)`
    on the PIL image (Pillow's resampling; torchvision's rounded crop offset), CLIP mean/std."""
    return ImageTransform(
        mean=OPENAI_CLIP_MEAN,
        std=OPENAI_CLIP_STD,
        shortest_edge=size,
        crop_hw=(size, size),
        crop_rounding="round",
        mode="bicubic",
        resampler="pil",
    )


@dataclass
class ImageRewardOptions:
    weights_path: str | None = None
    """Safetensors file of ImageReward.pt's state dict (required; see the module docstring)."""
    tokenizer_name: str = "bert-base-uncased"
    """Hub id or local directory of BERT's tokenizer ([DEC] and [ENC] are added as ImageReward does)."""
    dtype: ComputeDtype = "float32"

    def device_models(self, reward: str) -> tuple[DeviceModel, ...]:
        """Models on the scorer's device (the memory plan counts them): ImageReward v1.0's BLIP towers and head."""
        return (DeviceModel("weights_path", "THUDM/ImageReward", self.dtype),)


class ImageRewardReward:
    name = "image_reward"
    differentiable = True

    def __init__(self, device: str = "cpu", **kwargs: Any):
        from transformers import AutoTokenizer, BlipVisionModel
        from transformers.models.blip.modeling_blip_text import BlipTextModel

        self.options = parse_options(self.name, ImageRewardOptions, kwargs)
        opts = self.options
        where = f"reward.kwargs.{self.name}.weights_path={opts.weights_path!r}"
        state = load_weights_file(
            self.name, opts.weights_path, "ImageReward.pt", "convert it as genalign/rewards/image_reward.py describes"
        )
        self.device = torch.device(device)
        self.dtype = resolve_dtype(self.name, opts.dtype)
        try:
            vision_state, text_state, head_state = split_checkpoint(state)
            vision_config, text_config = configs_from_shapes(vision_state, text_state)
            self.vision = BlipVisionModel(vision_config)
            self.vision.load_state_dict(vision_state, strict=True)
            self.text = BlipTextModel(text_config, add_pooling_layer=False)
            self.text.load_state_dict(text_state, strict=True)
            self.head = AestheticMLP(input_size=text_config.hidden_size)
            self.head.load_state_dict(head_state, strict=True)
        except (KeyError, ValueError, RuntimeError) as exc:
            raise ValueError(f"{where}: {' '.join(str(exc).split())}") from exc
        for module in (self.vision, self.text):
            module.to(self.device, self.dtype).eval().requires_grad_(False)
        self.head.to(self.device).eval().requires_grad_(False)  # fp32: a 5-layer MLP, as aesthetic keeps it
        self.tokenizer = load_pretrained(
            AutoTokenizer.from_pretrained,
            opts.tokenizer_name,
            reward=self.name,
            key="tokenizer_name",
            what="BERT tokenizer",
        )
        self.tokenizer.add_special_tokens({"bos_token": "[DEC]", "additional_special_tokens": ["[ENC]"]})
        self.transform = image_reward_transform(vision_config.image_size)

    @torch.no_grad()
    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        return self._score(self.transform(images.to(self.device)), prompts).cpu()

    def score_pixels(self, pixels: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        """`score` on float pixels in [0, 1], differentiable in them: ReFL's `score_gard` (its
        Resize(224, BICUBIC) on the decoder's float output, CenterCrop, CLIP normalisation)."""
        return self._score(self.transform.differentiable(pixels.to(self.device)), prompts)

    def _score(self, pixel_values: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        """Normalised model inputs [B, 3, 224, 224] -> standardised scores [B] float32 (grad follows the caller)."""
        image_tokens = self.vision(pixel_values=pixel_values.to(self.dtype)).last_hidden_state  # [B, 1 + N, Dv]
        tokens = self.tokenizer(
            prompts, padding="max_length", truncation=True, max_length=MAX_TEXT_TOKENS, return_tensors="pt"
        ).to(self.device)
        image_mask = torch.ones(image_tokens.shape[:-1], dtype=torch.long, device=self.device)
        hidden = self.text(
            input_ids=tokens["input_ids"],
            attention_mask=tokens["attention_mask"],
            encoder_hidden_states=image_tokens,
            encoder_attention_mask=image_mask,
        ).last_hidden_state
        raw = self.head(hidden[:, 0].float())  # [B]
        return ((raw - MEAN) / STD).float()

    def offload(self) -> None:
        for module in (self.vision, self.text, self.head):
            module.to("cpu")

    def onload(self) -> None:
        for module in (self.vision, self.text, self.head):
            module.to(self.device)
