"""FLUX.1 Kontext (dev) behind the `FlowPolicy` protocol: FLUX.1 that edits a source image.

Where it fits: as FLUX.1 (`models/flux/policy.py`, whose prompt encoding, CFG, schedule and
decode it keeps) plus the `SourceEncoder` side: each prompt's source image is encoded once per
step (rollout/chunks.py) into `Condition.source_latents`, and `velocity` reads it at every step
of rollout and replay. Loading is `FluxKontextPipeline.from_pretrained`.

What FluxKontextPipeline does, checked on the tiny model (tests/integration/test_flux_kontext.py):
- The source image is VAE-encoded to its posterior mode, `(z − shift) · scaling` (the pipeline's
  `_encode_vae_image`, `sample_mode="argmax"`), at the size `model.source_resolution` gives
  (below).
- Its latents are packed into 2x2 tokens like the target's and appended after them in the
  image stream; their position ids are (1, row, col) where the target's are (0, row, col) — the
  first axis tells the two images apart. The transformer's output over the source tokens is
  dropped: the velocity is the target's tokens only.
- Both CFG branches read the same source (true CFG with rollout.guidance_scale > 1, as the
  pipeline's `true_cfg_scale`); the embedded guidance is model.embedded_guidance.
- The schedule's dynamic shift counts the target's tokens only (the pipeline's
  `image_seq_len = latents.shape[1]`), which FLUX.1's `sigmas` already does.
A prompt with several source images (not FluxKontextPipeline's: it takes one) would get the
ids (s + 1, row, col) for image s; the spec allows one, as the pipeline.

Sizes (diffusers 0.42's `FluxKontextPipeline.__call__`):
- The result: the pipeline rescales the `height` x `width` it is given (1024 x 1024 when not
  given, whatever the source's shape) to about `max_area` pixels (1024² by default) at that
  aspect ratio, sides floored to `multiple_of` = `vae_scale_factor` x 2 = 16. genalign's result is
  always rollout.height x rollout.width: the pipeline called with `height`, `width` and
  `max_area=height·width` (what Flow-GRPO passes, resolution²).
- The source, `model.source_resolution`. "run" (the default) encodes it at its own size, the
  run's (the manifest check holds it there): Flow-GRPO's, whose scripts/train_flux_kontext.py
  (yifan123/flow_grpo 74db6919, the newest Kontext script) resizes every source to
  resolution x resolution and whose patched pipeline (flow_grpo/diffusers_patch/
  flux_kontext_pipeline_with_logprob.py, as forks store it: zhtmike/flow_grpo 814021a2,
  RENZ9527/grpo 98949dfb; upstream's own copy is not in the stored copies) resizes it to the
  result's size, never reading `_auto_resize`. "pipeline" resizes it as the unmodified
  pipeline does (`_auto_resize=True`, `pipeline_source_size`): to the preferred Kontext
  resolution (`PREFERRED_KONTEXT_RESOLUTIONS`, about 1 MP, 672 x 1568 to 1568 x 672) whose
  aspect ratio is nearest the source's, sides floored to 16, through the pipeline's own
  `image_processor.resize` (Lanczos); a 512² source is encoded at 1024², 4096 source tokens
  beside a 512² result's 1024, whatever rollout.height x rollout.width is.
"""

from __future__ import annotations

import torch

from genalign.models.base import Condition, SourcesBesideText
from genalign.models.diffusers_common import pack_2x2, vae_encode
from genalign.models.flux.policy import FluxPolicy, latent_image_ids
from genalign.models.source_sizing import PipelineSizedSources
from genalign.models.spec import FamilySpec

SPEC = FamilySpec(
    name="flux_kontext",
    policy="genalign.models.flux_kontext.policy:FluxKontextPolicy",
    package="genalign.models.flux_kontext",
    pipeline_class="FluxKontextPipeline",
    guidance_embedding=True,
    source_images=1,
    tiny_builder="genalign.models.flux_kontext.tiny:build_tiny_flux_kontext_pipeline",
    pipeline_source_size="genalign.models.flux_kontext.policy:pipeline_source_size",
)
"""FLUX.1 Kontext: FLUX.1's geometry (16 pixels per packed token) and guidance embedding, one
source image per prompt."""

MULTIPLE_OF = 16
"""FluxKontextPipeline's `multiple_of`: its `vae_scale_factor` (8, FLUX.1's VAE) x the 2x2 packing;
also its image processor's `vae_scale_factor`, to which `get_default_height_width` floors."""


def pipeline_source_size(height: int, width: int) -> tuple[int, int]:
    """(height, width) FluxKontextPipeline resizes a (height, width) source to, as its `__call__`
    computes it with `_auto_resize=True` (the default; the pipeline has no function of its own
    for it): the size floored to `MULTIPLE_OF` (`get_default_height_width`), then the entry of
    `PREFERRED_KONTEXT_RESOLUTIONS` ((width, height) pairs) nearest its aspect ratio, ties to the
    smaller width, floored to `MULTIPLE_OF`."""
    from diffusers.pipelines.flux.pipeline_flux_kontext import PREFERRED_KONTEXT_RESOLUTIONS

    ratio = (width // MULTIPLE_OF * MULTIPLE_OF) / (height // MULTIPLE_OF * MULTIPLE_OF)
    _, preferred_width, preferred_height = min((abs(ratio - w / h), w, h) for w, h in PREFERRED_KONTEXT_RESOLUTIONS)
    return preferred_height // MULTIPLE_OF * MULTIPLE_OF, preferred_width // MULTIPLE_OF * MULTIPLE_OF


class FluxKontextPolicy(PipelineSizedSources, SourcesBesideText, FluxPolicy):
    """FLUX.1 Kontext: FLUX.1's transformer reads the source image's tokens beside the target's."""

    spec = SPEC
    family = SPEC.name
    display_name = "FLUX.1 Kontext"
    diffusers_pipeline = SPEC.pipeline_class
    config_options = ("embedded_guidance", "source_resolution")

    @torch.no_grad()
    def encode_sources(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 [B, S, 3, H, W] -> float32 latents [B, S, C, H'/f, W'/f], (H', W') the size
        model.source_resolution gives (`vae_pixels`): the VAE posterior's mode, shifted and scaled
        (`vae_encode`, what the pipeline's `_encode_vae_image` computes)."""
        batch, count = images.shape[:2]
        latents = vae_encode(self.vae, self.vae_pixels(images.flatten(0, 1)))  # [B·S, C, h, w]
        return latents.reshape(batch, count, *latents.shape[1:]).cpu()

    def context_tokens(self, cond: Condition) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(the source images' packed tokens [B, S·hw/4, 4C], their ids [S·hw/4, 3]): image s at
        ids (s + 1, row, col); None for a prompt without a source (text-to-image)."""
        sources = cond.source_latents  # [B, S, C, h, w] or None
        if sources is None:
            return None
        _, count, _, height, width = sources.shape
        tokens, ids = [], []
        for index in range(count):
            tokens.append(pack_2x2(sources[:, index].to(self.device)))  # [B, hw/4, 4C]
            image_ids = latent_image_ids(height // 2, width // 2, self.device)  # [hw/4, 3]
            image_ids[:, 0] = index + 1
            ids.append(image_ids)
        return torch.cat(tokens, dim=1), torch.cat(ids)
