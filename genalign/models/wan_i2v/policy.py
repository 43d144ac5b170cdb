"""Wan 2.1 I2V (480P / 720P) and Wan 2.2 I2V-A14B behind the `FlowPolicy` protocol: Wan that
animates a source image (the first frame) under a text prompt.

Where it fits: Wan text-to-video (`models/wan/policy.py`: prompt encoding, CFG with the negative
prompt, the flow shift, the two experts and their boundary, decoding) plus the `SourceEncoder`
side: each prompt's source image is encoded once per step (rollout/chunks.py) into
`Condition.source_latents`, which `velocity` reads at every step of rollout and replay.
Loading is `WanImageToVideoPipeline.from_pretrained`.

What WanImageToVideoPipeline does (its `prepare_latents`, `encode_image` and denoising loop),
checked on the tiny models (tests/integration/test_wan_i2v.py):
- The source image, at the video's size, becomes a video: the image as frame 0, zeros (in the
  VAE's [-1, 1] pixel space) for the other num_frames − 1, VAE-encoded to its posterior mode and
  normalised per channel (`(z − mean) / std`): the first-frame latents [C, F_lat, h, w].
- A mask marks the given frame: `t` channels (the VAE's temporal factor, 4) that are 1 on latent
  frame 0 and 0 after. The condition is [mask, first-frame latents], 4 + 16 = 20 channels,
  concatenated after the noisy latents on the channel axis at every step: the transformer reads
  36 channels and predicts the 16 of the velocity.
- Wan 2.1 I2V also feeds the image through CLIP ViT-H/14 (`image_encoder`, the penultimate
  layer's hidden states, 257 tokens x 1280) as `encoder_hidden_states_image`, which its blocks
  attend to beside the text (their `add_k_proj` / `add_v_proj`). Wan 2.2 I2V-A14B has no image
  encoder (`image_dim` null): the concatenated condition alone carries the image.
- Both CFG branches read the same image condition; the negative branch changes the text only.
- Wan 2.2 I2V-A14B's two experts switch at `boundary_ratio` 0.9 (its model_index.json), the
  comparison `WanPolicy.velocity` makes.
The video decodes as text-to-video's (the first frame is generated, not pasted back).

`source_latents` holds, per prompt, the condition [t + C, F_lat, h, w] and, for Wan 2.1, the
CLIP tokens [257, 1280], flattened into one row [B, 1, N] (`pack_rows`): a `Condition`
field is one tensor, and the CLIP tokens too are encoded once per step, not at every velocity.
"""

from __future__ import annotations

import torch

from genalign.models.base import Condition, SourcesBesideText
from genalign.models.diffusers_common import pack_rows, place, unpack_rows, wan_vae_encode_pixels
from genalign.models.spec import FamilySpec
from genalign.models.wan.policy import WanPolicy

SPEC = FamilySpec(
    name="wan_i2v",
    policy="genalign.models.wan_i2v.policy:WanI2VPolicy",
    package="genalign.models.wan_i2v",
    pipeline_class="WanImageToVideoPipeline",
    media="video",
    negative_prompt=True,
    experts=True,
    source_images=1,
    source_required=True,
    tiny_builder="genalign.models.wan_i2v.tiny:build_tiny_wan21_i2v_pipeline",
    tiny_variants=(
        ("Wan-AI/Wan2.2-I2V-A14B-Diffusers", "genalign.models.wan_i2v.tiny:build_tiny_wan22_i2v_a14b_pipeline"),
    ),
)
"""Wan 2.1 I2V / Wan 2.2 I2V-A14B: Wan's geometry (16 pixels per latent patch, num_frames = 4k + 1),
model.negative_prompt, two experts for Wan 2.2 (model.experts), one source image per prompt (the
first frame)."""


def first_frame_mask(batch: int, temporal_factor: int, latent_shape: tuple[int, ...]) -> torch.Tensor:
    """[B, t, F_lat, h, w]: 1 on latent frame 0 (the given image), 0 after; the pipeline's mask
    over num_frames pixel frames (frame 0 repeated t times) folded into t channels a latent frame."""
    _, frames, height, width = latent_shape
    mask = torch.zeros(batch, temporal_factor, frames, height, width)
    mask[:, :, 0] = 1.0
    return mask


class WanI2VPolicy(SourcesBesideText, WanPolicy):
    """Wan image-to-video: the transformer reads the source image's condition beside the noisy
    latents (and Wan 2.1's CLIP image tokens)."""

    spec = SPEC
    family = SPEC.name
    display_name = "Wan I2V"
    diffusers_pipeline = SPEC.pipeline_class

    def __init__(self, pipeline, device: torch.device, dtype: torch.dtype, *args, **options):
        super().__init__(pipeline, device, dtype, *args, **options)
        if self.expand_timesteps:
            raise ValueError(
                "model.path is a WanImageToVideoPipeline with expand_timesteps (Wan 2.2 TI2V-5B's image-to-video "
                "form), which family wan_i2v does not implement; use Wan 2.1 I2V or Wan 2.2 I2V-A14B"
            )
        config = pipeline.transformer.config
        self.image_dim = config.get("image_dim")
        self.image_encoder = getattr(pipeline, "image_encoder", None)
        if (self.image_dim is None) != (self.image_encoder is None):
            raise ValueError(
                f"model.path: the transformer's image_dim is {self.image_dim} but the pipeline "
                f"{'has no' if self.image_encoder is None else 'has an'} image_encoder; WanImageToVideoPipeline "
                "feeds CLIP image tokens exactly when image_dim is set"
            )
        self.image_tokens = None
        if self.image_encoder is not None:  # frozen like the text encoder, resident (a few images a step)
            place(self.image_encoder, self.device, dtype).requires_grad_(False).eval()
            vision = self.image_encoder.config
            # CLIP's patch tokens and its class token: 16 x 16 + 1 = 257 for ViT-H/14 at 224
            self.image_tokens = ((vision.image_size // vision.patch_size) ** 2 + 1, int(self.image_dim))
        self.condition_channels = self.temporal_factor + int(self.vae.config.z_dim)
        if config.in_channels != int(self.vae.config.z_dim) + self.condition_channels:
            raise ValueError(
                f"model.path: the transformer reads {config.in_channels} channels, an image-to-video Wan reads "
                f"{int(self.vae.config.z_dim) + self.condition_channels} (latents, mask, first-frame latents)"
            )

    @torch.no_grad()
    def encode_sources(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 first frames [B, 1, 3, H, W] -> [B, 1, N] (`pack_rows`): the first-frame
        condition the pipeline's `prepare_latents` builds and, for Wan 2.1, its `encode_image`."""
        if images.shape[1] != 1:
            raise ValueError(f"{self.display_name} animates one source image a prompt, got {images.shape[1]}")
        first = images[:, 0].to(torch.float32) / 127.5 - 1.0  # [B, 3, H, W] in [-1, 1]
        rows = []
        for frame in first.split(1):  # one video at a time, as decode: one video's frames in memory
            padding = frame.new_zeros(1, 3, self.num_frames - 1, *frame.shape[2:])
            rows.append(wan_vae_encode_pixels(self.vae, torch.cat([frame[:, :, None], padding], dim=2)))
        latents = torch.cat(rows)  # [B, C, F_lat, h, w]
        mask = first_frame_mask(len(latents), self.temporal_factor, tuple(latents.shape[1:])).to(latents)
        tokens = self._image_tokens(images[:, 0])
        return pack_rows(torch.cat([mask, latents], dim=1), *([tokens] if tokens is not None else [])).cpu()

    def _image_tokens(self, images: torch.Tensor) -> torch.Tensor | None:
        """CLIP's penultimate hidden states [B, 257, 1280] of uint8 images [B, 3, H, W] by the
        pipeline's own `encode_image` (its CLIPImageProcessor on the PIL images it is given); None
        without an image encoder."""
        if self.image_encoder is None:
            return None
        from PIL import Image

        pictures = [Image.fromarray(image.permute(1, 2, 0).cpu().numpy()) for image in images]
        return self.pipeline.encode_image(pictures, self.device).float()

    def transformer_inputs(self, latents: torch.Tensor, cond: Condition) -> dict[str, torch.Tensor]:
        """The noisy latents with the condition after them on channels (`hidden_states` [B, 36,
        F_lat, h, w]) and, for Wan 2.1, the CLIP tokens (`encoder_hidden_states_image`)."""
        if cond.source_latents is None:
            raise ValueError(
                f'{self.display_name} needs a source image per prompt (a manifest row\'s "source_image"); '
                "these prompts carry none"
            )
        shape = (self.condition_channels, *latents.shape[2:])
        shapes = [shape, *([self.image_tokens] if self.image_tokens is not None else [])]
        condition, *embeds = unpack_rows(cond.source_latents, shapes, self.display_name)
        inputs = {"hidden_states": torch.cat([latents, condition.to(latents)], dim=1)}
        if embeds:  # Wan 2.1's CLIP tokens [B, 257, 1280]
            inputs["encoder_hidden_states_image"] = embeds[0]
        return inputs
