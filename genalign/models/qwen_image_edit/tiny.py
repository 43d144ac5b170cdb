"""The tiny random Qwen-Image-Edit pipelines (`SPEC.tiny_builder`, and Qwen-Image-Edit-Plus's).

Where it fits: the default suite saves them and loads them back through the real policies
(`python -m genalign.models.tiny_random qwen_image_edit DIR`). The transformer is the published
config of the checkpoint (`architectures/`: Qwen-2511's `zero_cond_t` included) shrunk in width
and depth as Qwen-Image's tiny one; the VAE and scheduler are Qwen-Image's tiny ones (the edit
checkpoints ship Qwen-Image's); the image processor is the published Qwen2VLImageProcessor
config; the Qwen2.5-VL and its tokenizer are Qwen-Image's tiny ones with the vision tokens the
edit template puts in every prompt.

The processor is `ImageQwen2VLProcessor`: transformers' Qwen2VLProcessor holds a video processor
too, which needs torchvision (not installed with genalign's CPU torch: its wheels need CUDA's
torch), so the tiny pipelines carry the processor's image half alone — Qwen2VLProcessor's own
code, all the edit pipelines call (`processor(text=..., images=...)`). The real checkpoints name
Qwen2VLProcessor, which their GPU environments (with torchvision) load as published.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import Qwen2VLProcessor
from transformers.processing_utils import ProcessorMixin

from genalign.models.qwen_image.tiny import TINY_TRANSFORMER, build_tiny_qwen_image_pipeline
from genalign.models.tiny_random import tiny_qwen2_5_vl, tiny_qwen2_tokenizer

EDIT_TEMPLATE = (
    "<|im_start|>system\nDescribe the key features of the input image (color, shape, size, texture, objects, "
    "background), then explain how the user's text instruction should alter or modify the image. Generate a new "
    "image that meets the user's requirements while maintaining consistency with the original input where "
    "appropriate.<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
)
"""The system turn both edit pipelines' `prompt_template_encode` share (the tokenizer's corpus)."""
VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
"""In the order `tiny_qwen2_5_vl` numbers them past the text vocabulary."""


class ImageQwen2VLProcessor(Qwen2VLProcessor):
    """Qwen2VLProcessor without its video processor (see the module's docstring): its image and
    text processing unchanged; diffusers saves and loads it by this module's path."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        self.image_token = "<|image_pad|>"
        self.video_token = "<|video_pad|>"
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)


def tiny_edit_components(seed: int, architecture: Path) -> dict:
    """The components of a tiny Qwen-Image-Edit(-Plus) pipeline from the architecture file
    `architecture` (fp32, CPU, random weights from `seed`)."""
    from diffusers import QwenImageTransformer2DModel
    from transformers import Qwen2VLImageProcessor

    body = json.loads(architecture.read_text())
    qwen = build_tiny_qwen_image_pipeline(seed)  # its VAE and scheduler
    tokenizer = tiny_qwen2_tokenizer(EDIT_TEMPLATE)
    text_vocab = len(tokenizer)
    tokenizer.add_tokens(VISION_TOKENS, special_tokens=True)  # ids text_vocab .. text_vocab + 3
    torch.manual_seed(seed + 1)
    text_encoder = tiny_qwen2_5_vl(text_vocab, vision_tokens_embedded=True)
    torch.manual_seed(seed)
    transformer = QwenImageTransformer2DModel(**{**body["components"]["transformer"]["config"], **TINY_TRANSFORMER})
    image_processor = Qwen2VLImageProcessor(**body["processor"]["config"])
    return dict(
        transformer=transformer,
        scheduler=qwen.scheduler,
        vae=qwen.vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        processor=ImageQwen2VLProcessor(image_processor=image_processor, tokenizer=tokenizer),
    )


def build_tiny_qwen_image_edit_pipeline(seed: int = 0):
    """A QwenImageEditPipeline with random tiny weights from Qwen/Qwen-Image-Edit's configs."""
    from diffusers import QwenImageEditPipeline

    return QwenImageEditPipeline(**tiny_edit_components(seed, _file("Qwen--Qwen-Image-Edit.json")))


def _file(name: str) -> Path:
    return Path(__file__).parent / "architectures" / name
