"""Qwen-Image-Edit behind the `FlowPolicy` protocol: Qwen-Image that edits a source image.

Where it fits: as Qwen-Image (`models/qwen_image/policy.py`, whose transformer call, true CFG,
schedule, VAE decode and encode it keeps) plus the `SourceEncoder` side. Unlike FLUX.1 Kontext,
the text encoder reads the source too: Qwen2.5-VL sees the picture beside the instruction, so
the prompt and its sources are encoded together, once per step, by `encode_conditions`
(rollout/chunks.py); the result (`Condition.embeds` and `source_latents`) is what rollout, replay
and evaluation hand back to `velocity`. Loading is `QwenImageEditPipeline.from_pretrained`.

What QwenImageEditPipeline does, checked on the tiny model (tests/integration/test_qwen_image_edit.py):
- The prompt goes through the pipeline's own `encode_prompt(prompt, image)`: its edit template
  (the picture's vision tokens inside the user turn), Qwen2.5-VL's last hidden state, the
  64-token system turn dropped. One (prompt, sources) row per call, as the pipeline encodes
  one image per prompt; a step's rows are then zero-padded with a mask to their longest, as
  Qwen-Image pads a batch. The CFG negative (" ", the pipeline's and Flow-GRPO's) is encoded
  with the same picture.
- The source is VAE-encoded to its posterior mode, per channel `(z − mean) / std` (the
  pipeline's `_encode_vae_image`), packed into 2x2 tokens and appended after the target's in
  the image stream; the transformer's RoPE reads each image's (1, rows, cols) from `img_shapes`,
  and the prediction over the source tokens is dropped. Both CFG branches read the same source.
- The schedule's dynamic shift counts the target's tokens only (the pipeline's
  `image_seq_len = latents.shape[1]`), which Qwen-Image's `sigmas` already does.
- The size of the source, `model.source_resolution`: by default ("run") a deliberate difference,
  Flow-GRPO's (scripts/train_qwenimage_edit_plus.py at 9dcdc35b, which resizes each source to
  the run's resolution and encodes it at resolution²): the source is used at its own size, which
  the manifest check holds to the run's (data/source_images.py), where the pipeline first resizes
  it to about 1024² pixels of its aspect ratio; the parity test checks the pipeline with that size
  set to the source's own (as Flow-GRPO's patched pipeline). With "pipeline" the source is resized
  as the pipeline does (`pipeline_source_size`: its own `calculate_dimensions` and
  `image_processor.resize`), the VAE and Qwen2.5-VL both see that picture, and the parity test
  checks the unmodified pipeline.
"""

from __future__ import annotations

import dataclasses

import torch

from genalign.models.base import Condition
from genalign.models.diffusers_common import pack_2x2, pad_tokens
from genalign.models.qwen_image.policy import NEGATIVE_PROMPT, QwenImagePolicy
from genalign.models.source_sizing import PipelineSizedSources, uint8_to_pil
from genalign.models.spec import FamilySpec

SPEC = FamilySpec(
    name="qwen_image_edit",
    policy="genalign.models.qwen_image_edit.policy:QwenImageEditPolicy",
    package="genalign.models.qwen_image_edit",
    pipeline_class="QwenImageEditPipeline",
    guidance_embedding=True,
    source_images=1,
    tiny_builder="genalign.models.qwen_image_edit.tiny:build_tiny_qwen_image_edit_pipeline",
    pipeline_source_size="genalign.models.qwen_image_edit.policy:pipeline_source_size",
)
"""Qwen-Image-Edit: Qwen-Image's geometry (16 pixels per packed token), one source image per
prompt (QwenImageEditPipeline's template holds one picture)."""


VAE_AREA_PIXELS = 1024 * 1024
"""The area QwenImageEditPipeline resizes a source to (a literal in its `__call__`)."""


def pipeline_source_size(height: int, width: int) -> tuple[int, int]:
    """(height, width) QwenImageEditPipeline resizes a (height, width) source to: about
    `VAE_AREA_PIXELS` at its aspect ratio, by the pipeline's own `calculate_dimensions`."""
    from diffusers.pipelines.qwenimage.pipeline_qwenimage_edit import calculate_dimensions

    resized_width, resized_height, _ = calculate_dimensions(VAE_AREA_PIXELS, width / height)
    return int(resized_height), int(resized_width)


class QwenImageEditPolicy(PipelineSizedSources, QwenImagePolicy):
    """Qwen-Image-Edit: Qwen-Image's MMDiT reads the source image's tokens beside the target's,
    and Qwen2.5-VL reads the source beside the instruction."""

    spec = SPEC
    family = SPEC.name
    display_name = "Qwen-Image-Edit"
    diffusers_pipeline = SPEC.pipeline_class

    config_options = ("embedded_guidance", "source_resolution")

    def encode_prompts(self, prompts: list[str], with_negative: bool) -> Condition:
        raise ValueError(
            f"{self.display_name} edits a source image: every prompt needs one (a manifest row's "
            '"source_image" / "source_images", data.manifest); text alone is Qwen-Image (model.family=qwen_image)'
        )

    def condition_images(self, sources: list) -> object:
        """What the pipeline's `encode_prompt(image=...)` takes for one prompt's source PIL images:
        QwenImageEditPipeline's template holds one picture, at the size the VAE sees it."""
        (image,) = self.vae_images(sources)
        return image

    @torch.no_grad()
    def encode_conditions(self, prompts: list[str], images: torch.Tensor, with_negative: bool) -> Condition:
        """Qwen2.5-VL embeddings [B, L, D] of each prompt with its sources (and of the CFG negative
        `NEGATIVE_PROMPT` with the same sources), zero-padded with a mask to the longest L of all
        of them, and `source_latents` [B, S, C, h, w] (`encode_sources`)."""
        rows = []
        for prompt, sources in zip(prompts, images):
            pictures = self.condition_images(uint8_to_pil(sources))  # sources [S, 3, H, W]
            texts = [prompt, NEGATIVE_PROMPT] if with_negative else [prompt]
            rows.append([self._encode_row(text, pictures) for text in texts])  # [(embeds [1, l, D], mask [1, l])]
        length = max(embeds.shape[1] for row in rows for embeds, _ in row)
        if length > self.max_sequence_length:
            raise ValueError(
                f"a prompt with its source image(s) is {length} Qwen2.5-VL tokens, above "
                f"model.max_sequence_length={self.max_sequence_length} (the memory plan's text budget): raise it"
            )
        branches = [
            [torch.cat([pad_tokens(row[branch][part], length) for row in rows]) for part in (0, 1)]
            for branch in range(len(rows[0]))
        ]  # per branch: embeds [B, L, D], mask [B, L]
        latents = self.encode_sources(images).to(branches[0][0].device)  # [B, S, C, h, w]
        cond = Condition(embeds=branches[0][0], mask=branches[0][1], source_latents=latents)
        if not with_negative:
            return cond
        return dataclasses.replace(cond, negative_embeds=branches[1][0], negative_mask=branches[1][1])

    def _encode_row(self, text: str, pictures) -> tuple[torch.Tensor, torch.Tensor]:
        """The pipeline's `encode_prompt` of one prompt with its pictures: embeds [1, l, D], mask
        [1, l] int64 (the pipeline returns None for an all-ones mask)."""
        embeds, mask = self.pipeline.encode_prompt(prompt=[text], image=pictures, device=self.device)
        if mask is None:
            mask = torch.ones(embeds.shape[:2], dtype=torch.long, device=embeds.device)
        return embeds, mask.long()

    @torch.no_grad()
    def encode_sources(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 [B, S, 3, H, W] -> float32 latents [B, S, C, H'/8, W'/8], (H', W') the size
        model.source_resolution gives (`vae_pixels`): the VAE posterior's mode normalised per
        channel (`encode_images`, what the pipeline's `_encode_vae_image` computes)."""
        batch, count = images.shape[:2]
        latents = self.encode_images(self.vae_pixels(images.flatten(0, 1)))  # [B·S, C, h, w]
        return latents.reshape(batch, count, *latents.shape[1:]).cpu()

    def context_tokens(self, cond: Condition) -> tuple[torch.Tensor, list[tuple[int, int, int]]] | None:
        """(the sources' packed tokens [B, S·h'w', 4C] in order, their shapes [(1, h', w')] · S),
        h' = h/2: the pipeline's `image_latents` and the tail of its `img_shapes`."""
        sources = cond.source_latents  # [B, S, C, h, w]
        if sources is None:
            raise ValueError(f"{self.display_name} needs the prompts' source images (Condition.source_latents)")
        _, count, _, height, width = sources.shape
        tokens = [pack_2x2(sources[:, index].to(self.device)) for index in range(count)]  # [B, h'w', 4C] each
        return torch.cat(tokens, dim=1), [(1, height // 2, width // 2)] * count
