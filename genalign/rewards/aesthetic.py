"""LAION aesthetic reward: an MLP on the L2-normalised CLIP ViT-L/14 image embedding.

Where it fits: a model-backed reward scored by the reward runtime on decoded uint8 images.

score = MLP(normalize(CLIP image embedding)), the raw LAION "aesthetic score" (typically 4-7
for generated images; Flow-GRPO reports ~5-6), exactly as Flow-GRPO's
`flow_grpo/aesthetic_scorer.py`. The MLP is 768 -> 1024 -> 128 -> 64 -> 16 -> 1 with dropouts
0.2/0.2/0.1 between the first layers (inactive at eval) and no activations, the layout of
`sac+logos+ava1-l14-linearMSE.pth`.

Weights: that head is distributed as a pickle (.pth); genalign reads safetensors only, so
`head_path` must be a safetensors file with the same key names as the original state dict
(`layers.0.weight`, `layers.0.bias`, `layers.2.*`, `layers.4.*`, `layers.6.*`, `layers.7.*`).
Convert once where you trust the file: `safetensors.torch.save_file(torch.load(pth,
weights_only=True), "aesthetic_head.safetensors")`. The input width is read from the file, so
a head for another CLIP width loads too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from genalign.models.config import ComputeDtype
from genalign.rewards.clip_encoder import ClipEncoder
from genalign.rewards.model_sizes import DeviceModel
from genalign.rewards.options import parse_options

HIDDEN_SIZES = (1024, 128, 64, 16)


@dataclass
class AestheticOptions:
    head_path: str | None = None
    """Safetensors file of the LAION MLP head (required; see the module docstring)."""
    model_name: str = "openai/clip-vit-large-patch14"
    """Hub id or local directory of the CLIP model whose image embedding the head was trained on."""
    processor_name: str | None = None
    """Where preprocessor_config.json lives; None: same as model_name."""
    dtype: ComputeDtype = "float32"

    def device_models(self, reward: str) -> tuple[DeviceModel, ...]:
        """Models on the scorer's device (the memory plan counts them): the whole CLIPModel (its
        text tower too) and the float32 head."""
        return (
            DeviceModel("model_name", self.model_name, self.dtype, "CLIPModel"),
            DeviceModel("head_path", "christophschuhmann/improved-aesthetic-predictor", "float32"),
        )


class AestheticMLP(nn.Module):
    """The LAION head; module indices match the original `nn.Sequential` so state dicts load as-is."""

    def __init__(self, input_size: int = 768):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(input_size, HIDDEN_SIZES[0]),
            nn.Dropout(0.2),
            nn.Linear(HIDDEN_SIZES[0], HIDDEN_SIZES[1]),
            nn.Dropout(0.2),
            nn.Linear(HIDDEN_SIZES[1], HIDDEN_SIZES[2]),
            nn.Dropout(0.1),
            nn.Linear(HIDDEN_SIZES[2], HIDDEN_SIZES[3]),
            nn.Linear(HIDDEN_SIZES[3], 1),
        )

    def forward(self, embeds: torch.Tensor) -> torch.Tensor:
        return self.layers(embeds).squeeze(-1)  # [B, D] -> [B]


def load_aesthetic_head(path: str) -> AestheticMLP:
    """Read the head from safetensors; the first layer's weight gives the input width."""
    from pathlib import Path

    from safetensors.torch import load_file

    if not Path(path).is_file():
        raise FileNotFoundError(
            f"reward.kwargs.aesthetic.head_path={path!r} does not exist; point it at the LAION "
            f"MLP head converted to safetensors (see genalign/rewards/aesthetic.py)"
        )
    state = load_file(path)
    if "layers.0.weight" not in state:
        raise ValueError(
            f"reward.kwargs.aesthetic.head_path={path!r}: no 'layers.0.weight' in the file; expected the "
            f"LAION head's keys layers.{{0,2,4,6,7}}.{{weight,bias}}, found {sorted(state)[:6]}"
        )
    head = AestheticMLP(input_size=state["layers.0.weight"].shape[1])
    head.load_state_dict(state, strict=True)
    return head.eval().requires_grad_(False)


class AestheticReward:
    name = "aesthetic"
    differentiable = True

    def __init__(self, device: str = "cpu", **kwargs: Any):
        self.options = parse_options(self.name, AestheticOptions, kwargs)
        opts = self.options
        if opts.head_path is None:
            raise ValueError(
                "reward.kwargs.aesthetic.head_path is required: a safetensors file of the LAION "
                "aesthetic MLP head (see genalign/rewards/aesthetic.py for the conversion)"
            )
        self.device = device
        self.head = load_aesthetic_head(opts.head_path).to(device)
        self.encoder = ClipEncoder.from_options(opts, device, self.name, text=False)

    @torch.no_grad()
    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        embeds = self.encoder.image_embeds(images)  # [B, D] float32, unit norm
        return self.head(embeds).float().cpu()  # [B]

    def score_pixels(self, pixels: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        """`score` on float pixels in [0, 1], differentiable in them (AlignProp's aesthetic loss)."""
        return self.head(self.encoder.pixel_embeds(pixels)).float()  # [B]

    def offload(self) -> None:
        self.encoder.offload()
        self.head.to("cpu")

    def onload(self) -> None:
        self.encoder.onload()
        self.head.to(self.device)
