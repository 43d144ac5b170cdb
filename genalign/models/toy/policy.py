"""`ToyPolicy`: the shipped CPU demo model behind the `FlowPolicy` protocol.

Where it fits: `model.family=toy` (the default recipe `experiment/toy/shapes_grpo`). The
collector samples with `velocity` + the SDE kernels, replay calls the same `velocity` with
gradients, the toy rewards see `decode`d uint8 32x32 images. It is deliberately the SD3 code
path in miniature (network.py): same transformer class, timestep 1000·σ, batched true CFG over
[uncond, cond], same LoRA targets — only there is no VAE (latents are the pixels in [-1, 1],
[3, 32, 32]) and the text encoder is a learned lookup of the prompt's colour and shape words.
"""

from __future__ import annotations

from pathlib import Path

import torch

from genalign.data.toy_shapes import IMAGE_SIZE, from_unit_range, to_unit_range
from genalign.models.base import Condition, ModelConfig, resolve_device, resolve_dtype
from genalign.models.sd3 import SD3_LORA_TARGETS, SD3_REPEATED_BLOCKS, sd3_transformer_velocity
from genalign.models.spec import FamilySpec
from genalign.models.toy.network import ToyTextEncoder, load_toy_model, velocity_from_x0
from genalign.sampling.schedules import flow_match_sigmas

PREDICTIONS = ("x0", "velocity")
"""What a toy transformer outputs (toy_model.json "prediction"; see network.PREDICTION)."""
BUILTIN = "builtin"
"""`model.path=builtin`: the weights shipped in genalign/assets/toy/."""


def builtin_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "assets" / "toy"


def resolve_toy_path(path: str | Path) -> Path:
    return SPEC.weights_dir(str(path))


SPEC = FamilySpec(
    name="toy",
    policy="genalign.models.toy.policy:ToyPolicy",
    package="genalign.models.toy",
    size_multiple=16,
    fixed_size=IMAGE_SIZE,
    text_encoders=False,
    draws_text=False,
    export="none",
    differentiable_decode=True,
    hub_weights=False,
    builtin_path=BUILTIN,
    builtin_dir="genalign.models.toy.policy:builtin_dir",
)
"""The shipped CPU demo: pixel space at exactly 32 x 32, local weights only ("builtin" or a
`genalign pretrain-demo` directory); no pipeline outside genalign loads it, so no LoRA export."""


class ToyPolicy:
    """Tiny pixel-space SD3 transformer + lookup text encoder; see the module docstring."""

    spec = SPEC
    family = SPEC.name
    lora_target_modules = SD3_LORA_TARGETS
    repeated_blocks = SD3_REPEATED_BLOCKS

    def __init__(
        self,
        transformer: torch.nn.Module,
        text_encoder: ToyTextEncoder,
        device: torch.device,
        dtype: torch.dtype = torch.float32,
        shift: float = 1.0,
        cfg_batch: str = "joint",
        prediction: str = "x0",
    ):
        if prediction not in PREDICTIONS:
            raise ValueError(f"toy model prediction {prediction!r}: choose one of {PREDICTIONS}")
        self.prediction = prediction
        self.device = torch.device(device)
        self.dtype = dtype
        self.shift = shift
        self.cfg_batch = cfg_batch
        transformer.to(device=self.device)
        if next(transformer.parameters()).dtype != dtype:  # diffusers warns on every cast
            transformer.to(dtype=dtype)
        self.transformer = transformer.requires_grad_(False)
        self.text_encoder = text_encoder.to(self.device).requires_grad_(False).eval()
        self.patch_size = int(transformer.config.patch_size)
        self.image_size = int(transformer.config.sample_size)

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> "ToyPolicy":
        policy = cls.from_pretrained(cfg.path, dtype=resolve_dtype(cfg.dtype), device=resolve_device(cfg.device))
        policy.cfg_batch = cfg.cfg_batch
        return policy

    @classmethod
    def from_pretrained(
        cls, path: str | Path = BUILTIN, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
    ) -> "ToyPolicy":
        """Load "builtin" (the shipped weights) or a directory written by `genalign pretrain-demo`;
        the transformer goes through `SD3Transformer2DModel.from_pretrained`."""
        transformer, text_encoder, record = load_toy_model(resolve_toy_path(path), dtype)
        return cls(
            transformer,
            text_encoder,
            torch.device(device),
            dtype,
            float(record.get("shift", 1.0)),
            prediction=record.get("prediction", "velocity"),
        )

    @torch.no_grad()
    def encode_prompts(self, prompts: list[str], with_negative: bool) -> Condition:
        """embeds [B, 2, 32] (colour, shape tokens), pooled [B, 64]; the negative is the empty
        prompt. An unknown word is a ValueError naming it."""
        embeds, pooled = self.text_encoder(self.text_encoder.token_ids(list(prompts)))  # [B, 2, D], [B, 2D]
        if not with_negative:
            return Condition(embeds=embeds, pooled=pooled)
        negative, negative_pooled = self.text_encoder(self.text_encoder.token_ids([""] * len(prompts)))
        return Condition(embeds=embeds, pooled=pooled, negative_embeds=negative, negative_pooled=negative_pooled)

    def velocity(
        self,
        latents: torch.Tensor,
        sigma: torch.Tensor,
        cond: Condition,
        guidance_scale: float,
        detach_uncond: bool = False,
    ) -> torch.Tensor:
        """v̂ [B, 3, 32, 32] float32 at sigma [B]: the SD3 transformer call, timestep 1000·σ,
        batched [uncond, cond] CFG when guidance_scale > 1. An x0-predicting model's output is
        turned into v̂ = (x − x̂0) / σ; CFG commutes with that map (affine in x̂0 for fixed x, σ)."""
        out = sd3_transformer_velocity(
            self.transformer,
            latents,
            sigma,
            cond,
            guidance_scale,
            self.device,
            self.dtype,
            detach_uncond,
            self.cfg_batch,
        )
        if self.prediction == "velocity":
            return out
        return velocity_from_x0(latents.to(out.device, out.dtype), out, sigma)

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Pixels in [-1, 1] [B, 3, 32, 32] -> uint8 [B, 3, 32, 32] on the CPU (no VAE)."""
        return from_unit_range(latents.detach().cpu())

    def decode_pixels(self, latents: torch.Tensor) -> torch.Tensor:
        """Pixels in [-1, 1] -> float [B, 3, 32, 32] in [0, 1] on the device, differentiable
        (`decode` before its uint8 rounding: the same clamp)."""
        return (latents.to(self.device).clamp(-1, 1) + 1) / 2

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 [B, 3, 16, 16] -> pixels in [-1, 1] float32 on the device (the inverse of
        `decode` up to uint8 rounding; the toy model has no VAE)."""
        return to_unit_range(images).to(self.device, torch.float32)

    def latent_shape(self, height: int, width: int) -> tuple[int, int, int]:
        if (height, width) != (self.image_size, self.image_size):
            raise ValueError(
                f"rollout.height/width: the toy model generates {self.image_size}x{self.image_size} "
                f"images (its position table has no room for more), got {height}x{width}; set "
                f"rollout.height={IMAGE_SIZE} rollout.width={IMAGE_SIZE}"
            )
        return (3, height, width)

    def sigmas(self, num_steps: int, latent_shape: tuple[int, ...]) -> torch.Tensor:
        """diffusers-style flow-matching schedule with the pretraining shift (1.0: none)."""
        return flow_match_sigmas(num_steps, shift=self.shift)
