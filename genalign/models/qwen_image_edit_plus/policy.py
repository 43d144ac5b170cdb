"""Qwen-Image-Edit-Plus (Qwen-Image-Edit-2509 and -2511) behind the `FlowPolicy` protocol.

Where it fits: Qwen-Image-Edit (`models/qwen_image_edit/policy.py`, whose encoding, source
tokens, CFG, schedule and decode it keeps) with QwenImageEditPlusPipeline's multi-image prompt:
a prompt carries up to `SPEC.source_images` pictures. Loading is
`QwenImageEditPlusPipeline.from_pretrained`, the class both checkpoints name.

What QwenImageEditPlusPipeline does differently from QwenImageEditPipeline, checked on the tiny
model (tests/integration/test_qwen_image_edit.py):
- The instruction is prefixed by "Picture k: <vision tokens>" for each source k (the pipeline's
  `encode_prompt` with a list of images), and Qwen2.5-VL sees each picture resized to about
  384² pixels of its aspect ratio, sides multiples of 32 (its `CONDITION_IMAGE_SIZE`), with the
  pipeline's own `image_processor.resize`.
- Each source's latents are packed and appended in order; `img_shapes` lists them after the
  target's. Qwen-Image-Edit-2511's transformer config sets `zero_cond_t`: the transformer itself
  then modulates the source tokens at timestep 0, which it reads from the same `img_shapes`.
- The VAE sees each source at its own size (Qwen-Image-Edit's deliberate difference, Flow-GRPO's),
  or with model.source_resolution=pipeline resized as the pipeline does (`pipeline_source_size`:
  about `VAE_IMAGE_SIZE` pixels at its aspect ratio); Qwen2.5-VL's 384² picture is resized from
  the source as given either way, as the pipeline resizes both from the caller's image.
"""

from __future__ import annotations

from genalign.models.qwen_image_edit.policy import QwenImageEditPolicy
from genalign.models.spec import FamilySpec

SPEC = FamilySpec(
    name="qwen_image_edit_plus",
    policy="genalign.models.qwen_image_edit_plus.policy:QwenImageEditPlusPolicy",
    package="genalign.models.qwen_image_edit_plus",
    pipeline_class="QwenImageEditPlusPipeline",
    guidance_embedding=True,
    source_images=3,
    tiny_builder="genalign.models.qwen_image_edit_plus.tiny:build_tiny_qwen_image_edit_plus_pipeline",
    tiny_variants=(
        ("Qwen/Qwen-Image-Edit-2511", "genalign.models.qwen_image_edit_plus.tiny:build_tiny_2511_pipeline"),
    ),
    pipeline_source_size="genalign.models.qwen_image_edit_plus.policy:pipeline_source_size",
)
"""Qwen-Image-Edit-2509 / -2511: Qwen-Image's geometry, up to three source images per prompt (the
model card's recommended 1 to 3; the pipeline takes a list)."""


def pipeline_source_size(height: int, width: int) -> tuple[int, int]:
    """(height, width) QwenImageEditPlusPipeline resizes a (height, width) source to for its VAE:
    about its `VAE_IMAGE_SIZE` pixels at the aspect ratio, by its own `calculate_dimensions`."""
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit_plus as plus

    resized_width, resized_height = plus.calculate_dimensions(plus.VAE_IMAGE_SIZE, width / height)
    return int(resized_height), int(resized_width)


class QwenImageEditPlusPolicy(QwenImageEditPolicy):
    """Qwen-Image-Edit-2509 / -2511: several source pictures per prompt."""

    spec = SPEC
    family = SPEC.name
    display_name = "Qwen-Image-Edit-Plus"
    diffusers_pipeline = SPEC.pipeline_class

    def condition_images(self, sources: list) -> object:
        """Each source resized as QwenImageEditPlusPipeline resizes what Qwen2.5-VL sees: about
        `CONDITION_IMAGE_SIZE` pixels at its aspect ratio (`calculate_dimensions`), a list."""
        from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit_plus as plus

        resized = []
        for image in sources:
            width, height = plus.calculate_dimensions(plus.CONDITION_IMAGE_SIZE, image.width / image.height)
            resized.append(self.pipeline.image_processor.resize(image, height, width))
        return resized
