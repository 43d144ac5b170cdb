"""HPSv2 / HPSv2.1 reward: human-preference score of a CLIP ViT-H/14 fine-tuned on HPD.

Where it fits: a model-backed reward scored by the reward runtime on decoded uint8 images.

score = cos(image_embed, text_embed) of the HPS model, the diagonal of HPSv2's
`image_features @ text_features.T` (tgxs002/HPSv2 `hpsv2/img_score.py`, commit 866735e;
DanceGRPO trains on the same number): about 0.2-0.35 for generated images. Preprocessing is
HPSv2's evaluation transform (`create_model_and_transforms(..., light_augmentation=True)` ->
`image_transform(224, is_train=False, resize_longest_max=True)` in its vendored open_clip
`transform.py`): `ToTensor`, then `ResizeMaxSize(224)` on the tensor (the long side to 224
with torchvision's antialiased bicubic on [0, 1] floats, the short side `round()`ed, padded
to 224 x 224 with black, the odd pixel at the bottom/right), then OpenAI mean/std. Not the
`laion/CLIP-ViT-H-14-laion2B-s32B-b79K` processor's shortest-side crop: the two agree on a
square image only (at 480 x 832 they differ by up to 3.8 normalised units per pixel).

Architecture and weights: HPSv2 fine-tunes open_clip's ViT-H-14 (laion2B-s32B-b79K). That
model's transformers port is `laion/CLIP-ViT-H-14-laion2B-s32B-b79K`, so the scorer builds a
transformers `CLIPModel` from that config (`base_model`) — no open_clip install, whose
torchvision dependency has no CPU build matching the pinned torch on PyPI — and loads the HPS
weights into it with the open_clip -> transformers key mapping below. The HPS checkpoints
(`HPS_v2_compressed.pt`, `HPS_v2.1_compressed.pt` from the `xswu/HPSv2` hub repo) are pickles;
genalign reads safetensors only, so convert once where you trust the file:
`safetensors.torch.save_file(torch.load(pt, weights_only=True)["state_dict"], "hps_v2.1.safetensors")`
and set `reward.kwargs.hpsv2.weights_path` to it. `hpsv2` and `hpsv21` differ only in which
checkpoint you point them at; the name records which one a run used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from genalign.models.config import ComputeDtype
from genalign.rewards.clip_encoder import ClipEncoder
from genalign.rewards.image_transform import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, ImageTransform
from genalign.rewards.model_sizes import DeviceModel
from genalign.rewards.options import parse_options
from genalign.rewards.pretrained import load_pretrained, load_weights_file, resolve_dtype

LAYER_KEYS = {
    "ln_1": "layer_norm1",
    "ln_2": "layer_norm2",
    "attn.out_proj": "self_attn.out_proj",
    "mlp.c_fc": "mlp.fc1",
    "mlp.c_proj": "mlp.fc2",
}
"""open_clip residual-block module -> transformers CLIPEncoderLayer module (weights and biases)."""
TOP_KEYS = {
    "token_embedding.weight": "text_model.embeddings.token_embedding.weight",
    "positional_embedding": "text_model.embeddings.position_embedding.weight",
    "ln_final.weight": "text_model.final_layer_norm.weight",
    "ln_final.bias": "text_model.final_layer_norm.bias",
    "logit_scale": "logit_scale",
    "visual.conv1.weight": "vision_model.embeddings.patch_embedding.weight",
    "visual.class_embedding": "vision_model.embeddings.class_embedding",
    "visual.positional_embedding": "vision_model.embeddings.position_embedding.weight",
    "visual.ln_pre.weight": "vision_model.pre_layrnorm.weight",
    "visual.ln_pre.bias": "vision_model.pre_layrnorm.bias",
    "visual.ln_post.weight": "vision_model.post_layernorm.weight",
    "visual.ln_post.bias": "vision_model.post_layernorm.bias",
}
PROJECTIONS = {"text_projection": "text_projection.weight", "visual.proj": "visual_projection.weight"}
"""open_clip keeps projections as [D, P] parameters (x @ proj); transformers as Linear [P, D]."""


def open_clip_to_transformers(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An open_clip ViT CLIP state dict (OpenAI layout) -> transformers `CLIPModel` keys.

    Fused attention in_proj [3D, D] / [3D] splits into q, k, v; projections are transposed.
    A key this mapping does not know is an error (a checkpoint of another architecture)."""
    out: dict[str, torch.Tensor] = {}
    unknown = []
    for key, value in state.items():
        if key in TOP_KEYS:
            out[TOP_KEYS[key]] = value
        elif key in PROJECTIONS:
            out[PROJECTIONS[key]] = value.t().contiguous()
        elif ".resblocks." in key:
            tower, rest = ("vision_model", key[len("visual.") :]) if key.startswith("visual.") else ("text_model", key)
            _, _, after = rest.partition("transformer.resblocks.")
            index, _, leaf = after.partition(".")
            prefix = f"{tower}.encoder.layers.{index}."
            if leaf in ("attn.in_proj_weight", "attn.in_proj_bias"):
                kind = leaf.rsplit("_", 1)[1]  # weight | bias
                for name, part in zip(("q_proj", "k_proj", "v_proj"), value.chunk(3, dim=0)):
                    out[f"{prefix}self_attn.{name}.{kind}"] = part.contiguous()
                continue
            module, _, kind = leaf.rpartition(".")
            if module not in LAYER_KEYS:
                unknown.append(key)
                continue
            out[f"{prefix}{LAYER_KEYS[module]}.{kind}"] = value
        else:
            unknown.append(key)
    if unknown:
        raise ValueError(
            f"not an open_clip ViT CLIP state dict: unknown keys {unknown[:5]}{' ...' if len(unknown) > 5 else ''}"
        )
    return out


def hps_transform(image_size: int) -> ImageTransform:
    """HPSv2's evaluation transform at the model's image size (see the module docstring)."""
    return ImageTransform(
        mean=OPENAI_CLIP_MEAN,
        std=OPENAI_CLIP_STD,
        longest_edge=image_size,
        mode="bicubic",
        resampler="tensor",
        pad_fill=0.0,
    )


@dataclass
class HPSOptions:
    weights_path: str | None = None
    """Safetensors file of the HPS checkpoint's state_dict (required; see the module docstring)."""
    base_model: str = "laion/CLIP-ViT-H-14-laion2B-s32B-b79K"
    """Hub id or local directory with the CLIPModel config and tokenizer of the architecture HPS
    fine-tuned (its weights are not loaded; images are preprocessed as HPSv2 does, not by its
    preprocessor_config.json)."""
    dtype: ComputeDtype = "float32"

    def device_models(self, reward: str) -> tuple[DeviceModel, ...]:
        """Models on the scorer's device (the memory plan counts them): a CLIPModel of base_model's
        architecture, which the HPS weights fill."""
        return (DeviceModel("base_model", self.base_model, self.dtype, "CLIPModel"),)


class HPSv2Reward:
    name = "hpsv2"
    differentiable = True

    def __init__(self, device: str = "cpu", **kwargs: Any):
        from transformers import CLIPConfig, CLIPModel

        self.options = parse_options(self.name, HPSOptions, kwargs)
        opts = self.options
        state = load_weights_file(
            self.name,
            opts.weights_path,
            "the HPS checkpoint",
            "convert HPS_v2*_compressed.pt as genalign/rewards/hps.py describes",
        )
        dtype = resolve_dtype(self.name, opts.dtype)
        config = load_pretrained(
            CLIPConfig.from_pretrained, opts.base_model, reward=self.name, key="base_model", what="CLIP config"
        )
        model = CLIPModel(config)
        try:
            model.load_state_dict(open_clip_to_transformers(state), strict=True)
        except (ValueError, RuntimeError) as exc:  # unknown keys, missing keys, wrong shapes
            detail = " ".join(str(exc).split())
            raise ValueError(
                f"reward.kwargs.{self.name}.weights_path={opts.weights_path!r} does not fit "
                f"reward.kwargs.{self.name}.base_model={opts.base_model!r}: {detail}"
            ) from exc
        self.encoder = ClipEncoder(
            opts.base_model,
            opts.base_model,
            device,
            dtype,
            reward=self.name,
            model=model.to(dtype).eval().requires_grad_(False),
            transform=hps_transform(config.vision_config.image_size),
        )

    @torch.no_grad()
    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        image_embeds = self.encoder.image_embeds(images)  # [B, D], unit norm
        text_embeds = self.encoder.text_embeds(prompts)  # [B, D], unit norm
        return (image_embeds * text_embeds).sum(-1).float().cpu()  # [B] cosine

    def score_pixels(self, pixels: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        """`score` on float pixels in [0, 1], differentiable in them (AlignProp's HPS loss is 1 − this)."""
        image_embeds = self.encoder.pixel_embeds(pixels)  # [B, D], unit norm
        return (image_embeds * self.encoder.text_embeds(prompts)).sum(-1)  # [B] cosine

    def offload(self) -> None:
        self.encoder.offload()

    def onload(self) -> None:
        self.encoder.onload()


class HPSv21Reward(HPSv2Reward):
    """The same scorer for the HPSv2.1 checkpoint (a separate name, so runs say which one)."""

    name = "hpsv21"
