"""Wan 2.1 I2V (480P / 720P) and FLF2V, Wan 2.2 I2V-A14B and Wan 2.2 TI2V-5B's image-to-video
behind the `FlowPolicy` protocol: Wan that animates a source image (the first frame; FLF2V: the
first and the last) under a text prompt.

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

Wan 2.1 FLF2V (the pipeline's `last_image`) is Wan 2.1 I2V with two source images a prompt: the
first and the last frame at both ends of the zero video, the mask 1 on both (the last pixel frame
is the last latent frame's last mask channel), and both frames' CLIP tokens, which its transformer
(`pos_embed_seq_len` = 2 x 257) pairs side by side with a learned position: it reads them as
consecutive rows [B x 2, 257, 1280], the order the pipeline's `encode_image([first, last])` gives.
Which count a checkpoint takes is `source_count` of its transformer's config.

Wan 2.2 TI2V-5B's image-to-video (its one repository loaded as WanImageToVideoPipeline, whose
`expand_timesteps` the checkpoint sets) puts the image on the frame axis instead:
- the source image alone, encoded as a one-frame video and normalised, is latent frame 0 of what
  the transformer reads (no mask channels: it reads the VAE's 48), no image encoder;
- the timestep is per latent token (`WanPolicy.token_timesteps`): 0 on frame 0's, t on the rest;
- the pipeline draws frame 0 of its latents as noise too and steps it with the velocity the
  transformer predicts on the image's tokens, but never reads it (the transformer reads the image
  there) and replaces it with the image's latents before decoding. Flow-Factory's Wan I2V adapter
  (X-GenGroup/Flow-Factory a0b2bc5, src/flow_factory/models/wan/wan2_i2v.py) does the same in its
  SDE steps, so frame 0 counts in its per-step log-prob, a mean over every latent element.
  `model.given_frames` picks: "stepped" (the default, theirs: `stepped_given_frames` = 1, the
  samples hold all the latent frames) or "excluded" (the policy samples only the generated frames:
  `latent_shape` has 1 latent frame less, so log-probs, losses and offline latents are theirs
  alone). Either way `decode_conditioned` puts the image's frame first
  (`FamilySpec.decode_reads_condition`: rollout and evaluation decode through it), so no pixel
  differs.

`source_latents` holds, per prompt, the condition [t + C, F_lat, h, w] (TI2V-5B: [C, 1, h, w]) and, for Wan 2.1, the
CLIP tokens [257, 1280], flattened into one row [B, 1, N] (`pack_rows`): a `Condition`
field is one tensor, and the CLIP tokens too are encoded once per step, not at every velocity.
"""

from __future__ import annotations

from typing import get_args

import torch

from genalign.models.base import Condition, SourcesBesideText
from genalign.models.config import GivenFrames
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
    source_images=2,
    source_count="genalign.models.wan_i2v.policy:source_count",
    source_required=True,
    decode_reads_condition=True,
    loads_pipelines=("WanPipeline",),
    tiny_builder="genalign.models.wan_i2v.tiny:build_tiny_wan21_i2v_pipeline",
    tiny_variants=(
        ("Wan-AI/Wan2.2-I2V-A14B-Diffusers", "genalign.models.wan_i2v.tiny:build_tiny_wan22_i2v_a14b_pipeline"),
        ("Wan-AI/Wan2.2-TI2V-5B-Diffusers", "genalign.models.wan_i2v.tiny:build_tiny_wan22_ti2v_i2v_pipeline"),
        ("Wan-AI/Wan2.1-FLF2V-14B-720P-Diffusers", "genalign.models.wan_i2v.tiny:build_tiny_wan21_flf2v_pipeline"),
    ),
)
"""Wan 2.1 I2V and FLF2V / Wan 2.2 I2V-A14B / Wan 2.2 TI2V-5B: Wan's geometry (16 pixels per latent
patch, 32 for TI2V-5B's VAE, checked at load; num_frames = 4k + 1), model.negative_prompt, two
experts for Wan 2.2 A14B (model.experts), one source image per prompt (the first frame; Wan 2.1
FLF2V: two, the first and the last, `source_count`). TI2V-5B's one repository names WanPipeline in
its model_index.json (text- and image-to-video share it), which WanImageToVideoPipeline loads too."""


def source_count(transformer_config) -> int:
    """Source images a prompt carries for a transformer of this config (`FamilySpec.source_count`):
    2 for Wan 2.1 FLF2V, whose transformer embeds the first and the last frame's CLIP tokens side by
    side with a learned position (pos_embed_seq_len = 2 x 257), else 1 (the first frame)."""
    return 2 if transformer_config.get("pos_embed_seq_len") else 1


def given_frames_mask(
    batch: int, temporal_factor: int, latent_shape: tuple[int, ...], last: bool = False
) -> torch.Tensor:
    """[B, t, F_lat, h, w]: the pipeline's mask over num_frames pixel frames (1 on a given frame,
    0 elsewhere; frame 0 repeated t times) folded into t channels a latent frame: 1 on latent frame
    0 (the first frame) and, with `last` (FLF2V's last frame, the last pixel frame), on the last
    latent frame's last channel."""
    _, frames, height, width = latent_shape
    mask = torch.zeros(batch, temporal_factor, frames, height, width)
    mask[:, :, 0] = 1.0
    if last:
        mask[:, -1, -1] = 1.0
    return mask


class WanI2VPolicy(SourcesBesideText, WanPolicy):
    """Wan image-to-video: the transformer reads the source image's condition beside the noisy
    latents (and Wan 2.1's CLIP image tokens)."""

    spec = SPEC
    family = SPEC.name
    display_name = "Wan I2V"
    diffusers_pipeline = SPEC.pipeline_class
    config_options = (*WanPolicy.config_options, "given_frames")

    def __init__(
        self,
        pipeline,
        device: torch.device,
        dtype: torch.dtype,
        *args,
        given_frames: GivenFrames = "stepped",
        **options,
    ):
        if given_frames not in get_args(GivenFrames):
            raise ValueError(f"model.given_frames={given_frames!r}: choose one of {get_args(GivenFrames)}")
        super().__init__(pipeline, device, dtype, *args, **options)
        config = pipeline.transformer.config
        self.image_dim = config.get("image_dim")
        self.image_encoder = getattr(pipeline, "image_encoder", None)
        if (self.image_dim is None) != (self.image_encoder is None):
            raise ValueError(
                f"model.path: the transformer's image_dim is {self.image_dim} but the pipeline "
                f"{'has no' if self.image_encoder is None else 'has an'} image_encoder; WanImageToVideoPipeline "
                "feeds CLIP image tokens exactly when image_dim is set"
            )
        self.source_count = source_count(config)
        self.clip_tokens = 0
        self.image_tokens = None
        if self.image_encoder is not None:  # frozen like the text encoder, resident (a few images a step)
            place(self.image_encoder, self.device, dtype).requires_grad_(False).eval()
            vision = self.image_encoder.config
            # CLIP's patch tokens and its class token: 16 x 16 + 1 = 257 for ViT-H/14 at 224
            self.clip_tokens = (vision.image_size // vision.patch_size) ** 2 + 1
            self.image_tokens = (self.source_count * self.clip_tokens, int(self.image_dim))
        latent_channels = int(self.vae.config.z_dim)
        if given_frames == "excluded" and not self.expand_timesteps:
            raise ValueError(
                "model.given_frames=excluded: model.path's transformer reads the image on its channels "
                "(no expand_timesteps), so no latent frame is given to leave out; remove it"
            )
        if self.expand_timesteps:  # TI2V-5B: the image's latent frame is the first frame the transformer reads
            self.given_latent_frames = 1
            self.stepped_given_frames = self.given_latent_frames if given_frames == "stepped" else 0
            self.condition_channels = latent_channels
            expected, parts = latent_channels, "the latents, the first of them the image's"
        else:
            self.condition_channels = self.temporal_factor + latent_channels
            expected, parts = latent_channels + self.condition_channels, "latents, mask, first-frame latents"
        if config.in_channels != expected:
            raise ValueError(
                f"model.path: the transformer reads {config.in_channels} channels, an image-to-video Wan "
                f"{'with' if self.expand_timesteps else 'without'} expand_timesteps reads {expected} ({parts})"
            )

    def latent_shape(self, height: int, width: int) -> tuple[int, int, int, int]:
        """What the policy samples: the video's latents (`WanVAEVideo.latent_shape`) less the
        given frames it does not step (TI2V-5B's first, the encoded image, with
        model.given_frames=excluded)."""
        channels, frames, latent_height, latent_width = super().latent_shape(height, width)
        if frames <= self.given_latent_frames:
            raise ValueError(
                f"model.num_frames={self.num_frames}: {self.display_name} with expand_timesteps is given the "
                f"first latent frame and generates the others; use {self.temporal_factor + 1} frames or more"
            )
        return channels, frames - self.unsampled_latent_frames, latent_height, latent_width

    @torch.no_grad()
    def encode_sources(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 source images [B, S, 3, H, W] (the first frame; FLF2V: the first and the last) ->
        [B, 1, N] (`pack_rows`): the condition the pipeline's `prepare_latents` builds and, for
        Wan 2.1, its `encode_image`. The given frames at their places in num_frames frames (zeros
        between), VAE-encoded, with the mask; with expand_timesteps (TI2V-5B) the image alone,
        encoded as a one-frame video: its latent frame [C, 1, h, w], no mask channels."""
        if images.shape[1] != self.source_count:
            which = (
                'the first and the last frame: a manifest row\'s "source_images": [first, last]'
                if self.source_count == 2
                else 'the first frame: a manifest row\'s "source_image"'
            )
            raise ValueError(
                f"{self.display_name} takes {self.source_count} source image(s) a prompt ({which}); "
                f"these prompts carry {images.shape[1]}"
            )
        given = images.to(torch.float32) / 127.5 - 1.0  # [B, S, 3, H, W] in [-1, 1]
        between = 0 if self.expand_timesteps else self.num_frames - self.source_count
        rows = []
        for frames in given.split(1):  # one video at a time, as decode: one video's frames in memory
            first, *last = frames[0].unsqueeze(2).unbind(0)  # [3, 1, H, W] each
            video = torch.cat([first, first.new_zeros(3, between, *first.shape[2:]), *last], dim=1)
            rows.append(wan_vae_encode_pixels(self.vae, video[None]))
        latents = torch.cat(rows)  # [B, C, F_lat, h, w] (TI2V-5B: [B, C, 1, h, w])
        if not self.expand_timesteps:
            shape = tuple(latents.shape[1:])
            mask = given_frames_mask(len(latents), self.temporal_factor, shape, last=self.source_count == 2)
            latents = torch.cat([mask.to(latents), latents], dim=1)
        tokens = self._image_tokens(images)
        return pack_rows(latents, *([tokens] if tokens is not None else [])).cpu()

    def _image_tokens(self, images: torch.Tensor) -> torch.Tensor | None:
        """CLIP's penultimate hidden states [B, S x 257, 1280] of uint8 images [B, S, 3, H, W] by the
        pipeline's own `encode_image` (its CLIPImageProcessor on the PIL images it is given; FLF2V's
        first and last frame in turn, as the pipeline passes them); None without an image encoder."""
        if self.image_encoder is None:
            return None
        from PIL import Image

        pictures = [Image.fromarray(image.permute(1, 2, 0).cpu().numpy()) for image in images.flatten(0, 1)]
        tokens = self.pipeline.encode_image(pictures, self.device).float()  # [B x S, 257, 1280]
        return tokens.reshape(len(images), -1, tokens.shape[-1])  # [B, S x 257, 1280]

    def transformer_inputs(self, latents: torch.Tensor, cond: Condition) -> dict[str, torch.Tensor]:
        """The noisy latents with the condition after them on channels (`hidden_states` [B, 36,
        F_lat, h, w]) and, for Wan 2.1, the CLIP tokens (`encoder_hidden_states_image`); with
        expand_timesteps the image's latent frame before the generated ones ([B, C, F_lat, h, w],
        the stepped frame 0 of the samples never read: the pipeline's `(1 − mask) · condition +
        mask · latents`, which for its 0/1 mask is this concatenation value for value)."""
        condition, embeds = self._condition(cond, tuple(latents.shape[2:]))
        if self.expand_timesteps:
            generated = latents[:, :, self.stepped_given_frames :]
            inputs = {"hidden_states": torch.cat([condition.to(latents), generated], dim=2)}
        else:
            inputs = {"hidden_states": torch.cat([latents, condition.to(latents)], dim=1)}
        if embeds is not None:  # [B x S, 257, 1280]: FLF2V's transformer pairs consecutive rows
            inputs["encoder_hidden_states_image"] = embeds.reshape(-1, self.clip_tokens, embeds.shape[-1])
        return inputs

    def _condition(
        self, cond: Condition, frames_height_width: tuple[int, ...]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(the condition [B, condition_channels, F_lat or 1, h, w], the CLIP tokens or None) of
        `cond` for sampled latents of frames x height x width; one line when it carries none."""
        if cond.source_latents is None:
            raise ValueError(
                f'{self.display_name} needs a source image per prompt (a manifest row\'s "source_image"); '
                "these prompts carry none"
            )
        frames, height, width = frames_height_width
        shape = (self.condition_channels, self.given_latent_frames or frames, height, width)
        shapes = [shape, *([self.image_tokens] if self.image_tokens is not None else [])]
        condition, *embeds = unpack_rows(cond.source_latents, shapes, self.display_name)
        return condition, (embeds[0] if embeds else None)

    def decode_conditioned(self, latents: torch.Tensor, cond: Condition) -> torch.Tensor:
        """Sampled latents [B, C, F, h, w] -> uint8 video [B, F', 3, H, W]: the given frames
        (TI2V-5B's encoded image) put back before the generated ones, over the stepped ones, as the
        pipeline does before it decodes; `decode` itself where none are given."""
        if not self.given_latent_frames:
            return self.decode(latents)
        condition, _ = self._condition(cond, tuple(latents.shape[2:]))
        return self.decode(torch.cat([condition.to(latents), latents[:, :, self.stepped_given_frames :]], dim=2))

    def encode_images(self, videos: torch.Tensor) -> torch.Tensor:
        """uint8 video [B, F, 3, H, W] -> what the policy samples: the video's latents less the
        given frames it does not step (TI2V-5B's first, which the video's first frame gives, with
        model.given_frames=excluded)."""
        return super().encode_images(videos)[:, :, self.unsampled_latent_frames :]
