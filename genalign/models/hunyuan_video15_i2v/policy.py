"""HunyuanVideo 1.5 image-to-video behind the `FlowPolicy` protocol: HunyuanVideo 1.5 that
animates a source image (the first frame) under a text prompt.

Where it fits: the text-to-video policy (`models/hunyuan_video15/policy.py`: both text streams,
CFG with the negative prompt, the static shift, decoding) plus the `SourceEncoder` side: each
prompt's first frame is encoded once per step (rollout/chunks.py) into
`Condition.source_latents`, which `velocity` reads at every step of rollout and replay.
Loading is `HunyuanVideo15ImageToVideoPipeline.from_pretrained` (a hub id such as
hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_i2v, or a local `save_pretrained` directory).

What `HunyuanVideo15ImageToVideoPipeline.__call__` adds to text-to-video (checked on the tiny
model, tests/integration/test_hunyuan_video15_i2v.py):
- The video's size is the image's: the size bucket of the transformer's `target_size` (640 at
  480p: 480x848, 640x640, ...) nearest the image's aspect ratio, the image resized and cropped to
  it. Here the first frame already has the rollout's size, which must be that bucket
  (`latent_shape` refuses another, naming the size the pipeline would make).
- The first frame, VAE-encoded to its posterior mode times `scaling_factor` ([C, 1, h, w]),
  is the condition latents of latent frame 0, zeros after; the condition mask is 1 on latent
  frame 0, 0 after: the 32 + 1 channels text-to-video feeds as zeros.
- The first frame through SigLIP (`image_encoder`, FLUX.1 Redux's so400m-patch14-384, its image
  processor resizing to 384²): the last hidden state, 729 tokens x 1152, the transformer's image
  stream (non-zero, so the transformer attends to it, where text-to-video's zeros are masked).
- Both CFG branches read the same image condition; the negative branch changes the text only.
The video decodes as text-to-video's (the first frame is generated, not pasted back).

`source_latents` holds, per prompt, the first frame's latents [C, 1, h, w] and its SigLIP tokens
[729, 1152] flattened into one row [B, 1, N] (`pack_rows`): a `Condition` field is one tensor, and
the SigLIP tokens too are encoded once per step, not at every velocity.
"""

from __future__ import annotations

import torch

from genalign.models.architecture import architecture_source
from genalign.models.base import Condition, SourcesBesideText
from genalign.models.diffusers_common import pack_rows, place, unpack_rows
from genalign.models.hunyuan_video15.policy import HunyuanVideo15Policy
from genalign.models.spec import FamilySpec

SPEC = FamilySpec(
    name="hunyuan_video15_i2v",
    policy="genalign.models.hunyuan_video15_i2v.policy:HunyuanVideo15I2VPolicy",
    package="genalign.models.hunyuan_video15_i2v",
    pipeline_class="HunyuanVideo15ImageToVideoPipeline",
    media="video",
    size_multiple=16,
    negative_prompt=True,
    source_images=1,
    source_required=True,
    tiny_builder="genalign.models.hunyuan_video15_i2v.tiny:build_tiny_hunyuan_video15_i2v_pipeline",
    size_rule="genalign.models.hunyuan_video15_i2v.policy:bucket_problem",
)
"""HunyuanVideo 1.5 I2V: text-to-video's geometry (16 pixels per latent, num_frames = 4k + 1) at
the pipeline's size buckets, model.negative_prompt, one source image per prompt (the first frame)."""


def pipeline_bucket(height: int, width: int, target_size: int, spatial_factor: int) -> tuple[int, int]:
    """The (height, width) `HunyuanVideo15ImageToVideoPipeline` makes of a first frame of this
    size: its image processor's bucket of `target_size` nearest the frame's aspect ratio."""
    from diffusers.pipelines.hunyuan_video1_5.image_processor import HunyuanVideo15ImageProcessor

    processor = HunyuanVideo15ImageProcessor(vae_scale_factor=spatial_factor)
    bucket = processor.calculate_default_height_width(height, width, target_size)
    return int(bucket[0]), int(bucket[1])


def bucket_message(height: int, width: int, bucket: tuple[int, int], target_size: int) -> str | None:
    """The one-line problem of a run at height x width when the pipeline would make `bucket`."""
    if bucket == (height, width):
        return None
    return (
        f"rollout.height x rollout.width = {height}x{width}: HunyuanVideo15ImageToVideoPipeline makes a first "
        f"frame of that aspect ratio {bucket[0]}x{bucket[1]} (the size bucket of its transformer's target_size "
        f"{target_size} nearest that ratio); run at that size, with first frames of it"
    )


def bucket_problem(path: str, height: int, width: int) -> str | None:
    """`SPEC.size_rule`: the bucket check of `latent_shape` from model.path's configs (its shipped
    architecture file or a local directory), before the model loads; None where they cannot be
    read here (a hub id without a shipped file: checked when the model loads)."""
    found = architecture_source(SPEC, path)
    if found is None:
        return None
    components = found[0]
    target = int(components["transformer"]["config"]["target_size"])
    factor = int(components["vae"]["config"]["spatial_compression_ratio"])
    return bucket_message(height, width, pipeline_bucket(height, width, target, factor), target)


class HunyuanVideo15I2VPolicy(SourcesBesideText, HunyuanVideo15Policy):
    """HunyuanVideo 1.5 I2V: the transformer reads the first frame's latents beside the noisy
    latents and its SigLIP tokens as its image stream."""

    spec = SPEC
    family = SPEC.name
    display_name = "HunyuanVideo 1.5 I2V"
    diffusers_pipeline = SPEC.pipeline_class

    def __init__(self, pipeline, device: torch.device, dtype: torch.dtype, *args, **options):
        super().__init__(pipeline, device, dtype, *args, **options)
        config = self.transformer.config
        if config.get("use_meanflow"):
            raise ValueError(
                "model.path is a step-distilled HunyuanVideo 1.5 I2V (its transformer has use_meanflow=True: "
                "every step also reads the next timestep), which family hunyuan_video15_i2v does not implement; "
                "use hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_i2v or a CFG-distilled form"
            )
        self.image_encoder = getattr(pipeline, "image_encoder", None)
        if self.image_encoder is None or getattr(pipeline, "feature_extractor", None) is None:
            raise ValueError(
                "model.path: the pipeline has no image_encoder / feature_extractor (SigLIP); "
                "HunyuanVideo15ImageToVideoPipeline feeds the first frame's SigLIP tokens to the transformer"
            )
        place(self.image_encoder, self.device, dtype).requires_grad_(False).eval()  # resident: a few images a step
        self.target_size = int(config.target_size)

    def latent_shape(self, height: int, width: int) -> tuple[int, int, int, int]:
        """Text-to-video's latent shape, for a size the pipeline generates: the bucket of
        `target_size` nearest its own aspect ratio (else ValueError naming that bucket)."""
        bucket = pipeline_bucket(height, width, self.target_size, self.spatial_factor)
        problem = bucket_message(height, width, bucket, self.target_size)
        if problem:
            raise ValueError(problem)
        return super().latent_shape(height, width)

    @torch.no_grad()
    def encode_sources(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 first frames [B, 1, 3, H, W] -> [B, 1, N] (`pack_rows`): the first frame's latents
        [B, C, 1, h, w] (the pipeline's `_get_image_latents`: `encode_images` of a one-frame video)
        and its SigLIP tokens [B, 729, D] (the pipeline's own `encode_image`)."""
        if images.shape[1] != 1:
            raise ValueError(f"{self.display_name} animates one source image a prompt, got {images.shape[1]}")
        from PIL import Image

        latents = self.encode_images(images)  # [B, C, 1, h, w]
        tokens = [  # the pipeline's SigLIP processor reads PIL images; one a call, as the pipeline encodes
            self.pipeline.encode_image(
                Image.fromarray(frame.permute(1, 2, 0).cpu().numpy()), 1, self.device, self.dtype
            )
            for frame in images[:, 0]
        ]
        return pack_rows(latents, torch.cat(tokens).float()).cpu()

    def condition_inputs(self, latents: torch.Tensor, cond: Condition) -> tuple[torch.Tensor, torch.Tensor]:
        """(condition latents + mask [B, C + 1, F_lat, h, w], SigLIP tokens [B, 729, D]): the
        first frame's latents on latent frame 0 and zeros after, the mask 1 on frame 0, as
        `HunyuanVideo15ImageToVideoPipeline.prepare_cond_latents_and_mask`."""
        if cond.source_latents is None:
            raise ValueError(
                f'{self.display_name} needs a source image per prompt (a manifest row\'s "source_image"); '
                "these prompts carry none"
            )
        batch, channels, frames, height, width = latents.shape
        first, tokens = unpack_rows(
            cond.source_latents,
            [(channels, 1, height, width), (self.image_tokens, self.image_width)],
            self.display_name,
        )
        condition = torch.zeros(batch, channels + 1, frames, height, width, device=self.device, dtype=self.dtype)
        condition[:, :channels, :1] = first.to(self.device, self.dtype)
        condition[:, channels, 0] = 1.0
        return condition, tokens.to(self.device, self.dtype)
