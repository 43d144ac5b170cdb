"""The tiny random Cosmos-Predict2.5 pipeline (`SPEC.tiny_builder`).

Where it fits: the default suite saves it and loads it back through the real
`CosmosPolicy.from_pretrained` (`python -m genalign.models.tiny_random cosmos DIR`); its
Qwen2.5-VL text encoder, Qwen2 tokenizer and Wan VAE config are the ones the tiny families
share (`models/tiny_random.py`).
"""

from __future__ import annotations

import torch

from genalign.models.cosmos.policy import GuardrailNotLoaded
from genalign.models.tiny_random import (
    QWEN_TEXT_HIDDEN,
    QWEN_TEXT_LAYERS,
    TINY_WAN_VAE,
    building,
    shape_spec,
    tiny_qwen2_5_vl,
    tiny_qwen2_tokenizer,
)

COSMOS_SYSTEM_PROMPT = "You are a helpful assistant who will provide prompts to an image generator."
"""The system turn Cosmos2_5_PredictBasePipeline puts before every prompt."""
QWEN2_5_VL_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}<|im_start|>system\n"
    "You are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'text' %}{{ content['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""Qwen2.5-VL-Instruct's chat template for text messages (its image/video branches dropped:
Cosmos' pipeline sends only text), which Cosmos2_5_PredictBasePipeline applies to each prompt."""

COSMOS_SHAPES = {
    # diffusers' Cosmos2.5 pipeline test (2 blocks of 2 heads x 16 dims, mlp_ratio 2, adaLN-LoRA 4)
    # with Cosmos-Predict2.5's choices: 16 latent channels + the condition-mask channel, RoPE
    # scale (1, 3, 3), no learnable positional embedding, the projection of the concatenated
    # Qwen2.5-VL hidden states (2 layers x 16 = 32 in, 32 out). concat_padding_mask=False: the
    # real model's True resizes its padding mask with torchvision, which this environment lacks.
    "tiny": dict(
        transformer=dict(
            in_channels=16 + 1,
            out_channels=16,
            num_attention_heads=2,
            attention_head_dim=16,
            num_layers=2,
            mlp_ratio=2.0,
            text_embed_dim=32,
            adaln_lora_dim=4,
            max_size=(4, 32, 32),
            patch_size=(1, 2, 2),
            rope_scale=(1.0, 3.0, 3.0),
            concat_padding_mask=False,
            extra_pos_embed_type=None,
            use_crossattn_projection=True,
            crossattn_proj_in_channels=QWEN_TEXT_LAYERS * QWEN_TEXT_HIDDEN,
            encoder_hidden_states_channels=32,
        ),
        vae=dict(TINY_WAN_VAE),
        # the scheduler diffusers' convert_cosmos_to_diffusers.py ships with Cosmos-Predict2.5
        scheduler=dict(
            use_karras_sigmas=True,
            use_flow_sigmas=True,
            prediction_type="flow_prediction",
            sigma_max=200.0,
            sigma_min=0.01,
        ),
    ),
}
"""Architectures `build_cosmos_pipeline` knows."""


def build_cosmos_pipeline(
    shapes: str = "tiny", seed: int = 0, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
):
    """A Cosmos2_5_PredictBasePipeline of the named `COSMOS_SHAPES` with random weights (the VAE
    always float32): the tiny Qwen2.5-VL text encoder over a Qwen2 BPE trained on the
    pipeline's system turn, with Qwen2.5-VL's chat template; the Wan VAE; the Karras-flow UniPC
    scheduler Cosmos ships. Its guardrail is `GuardrailNotLoaded` (saved as none, as the hub
    checkpoints are)."""
    from diffusers import (
        AutoencoderKLWan,
        Cosmos2_5_PredictBasePipeline,
        CosmosTransformer3DModel,
        UniPCMultistepScheduler,
    )

    spec = shape_spec(COSMOS_SHAPES, shapes, "Cosmos")
    tokenizer = tiny_qwen2_tokenizer(f"system\n{COSMOS_SYSTEM_PROMPT}\nuser\nassistant\n")
    tokenizer.chat_template = QWEN2_5_VL_CHAT_TEMPLATE
    with building(device, dtype):
        torch.manual_seed(seed)
        transformer = CosmosTransformer3DModel(**spec["transformer"])
        torch.manual_seed(seed + 1)
        text_encoder = tiny_qwen2_5_vl(len(tokenizer))
    with building(device, torch.float32):
        torch.manual_seed(seed + 2)
        vae = AutoencoderKLWan(**spec["vae"])
    return Cosmos2_5_PredictBasePipeline(
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
        vae=vae,
        scheduler=UniPCMultistepScheduler(**spec["scheduler"]),
        safety_checker=GuardrailNotLoaded(),
    )


def build_tiny_cosmos_pipeline(seed: int = 0):
    """The tiny Cosmos2_5_PredictBasePipeline of `COSMOS_SHAPES` (fp32, CPU)."""
    return build_cosmos_pipeline("tiny", seed)
