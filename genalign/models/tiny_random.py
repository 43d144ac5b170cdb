"""Tiny random models for tests, benchmarks and offline smoke runs: SD3, FLUX, Qwen-Image, Wan
and Cosmos-Predict2.5 pipelines and a Janus-Pro, built from configs with random weights (each
family's spec names its builder here as `tiny_builder`). Not the shipped demo: that is the
trained `toy` family (models/toy/).

Where it fits: nothing can be downloaded here, so the real loading path
(`SD3Policy.from_pretrained`, `StableDiffusion3Pipeline.load_lora_weights`) is exercised on a
pipeline built the way diffusers' own tests build one (1-2 layers, head dim 8), saved with
`save_pretrained` and loaded back. Tokenizers are constructed in memory (byte-level CLIP BPE
with no merges, a character-level T5 unigram, a byte-level Qwen2 BPE trained on the
Qwen-Image prompt template or Cosmos' system turn), so no hub access is needed at any point.

    python -m genalign.models.tiny_random {sd3,flux,qwen_image,wan,cosmos,janus} OUT_DIR
"""

from __future__ import annotations

import argparse
import string
import sys
from contextlib import contextmanager
from pathlib import Path

import torch

CLIP_HIDDEN = 16
"""Per-CLIP-tower hidden size: the two towers concatenate to 2·16 = 32 = T5_HIDDEN, so
`encode_prompt` pads nothing and crops nothing (real SD3 pads 768 + 1280 up to 4096)."""
CLIP_PROJECTION = 32
"""Pooled size per tower: pooled_projection_dim = 2·32 = 64."""
T5_HIDDEN = 32
T5_CHARS = string.ascii_letters + string.digits + string.punctuation + " "


def _bytes_to_unicode() -> list[str]:
    """GPT-2/CLIP's reversible byte -> printable-unicode table (the BPE alphabet)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def shape_spec(table: dict, shapes: str, what: str) -> dict:
    """The named architecture of a `*_SHAPES` table, or a clear error naming the choices."""
    if shapes not in table:
        raise ValueError(f"unknown {what} shapes {shapes!r}: choose one of {sorted(table)}")
    return table[shapes]


@contextmanager
def building(device: str | torch.device, dtype: torch.dtype):
    """Modules constructed inside are allocated on `device` in `dtype` directly (no float32 copy
    first: real-size shapes build in seconds on a GPU, or on "meta" for parameter counts)."""
    previous_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            yield
    finally:
        torch.set_default_dtype(previous_dtype)


def tiny_clip_tokenizer():
    """Byte-level CLIP BPE over the 256-symbol alphabet with no merges (one token per byte):
    ids 0/1 are <|startoftext|>/<|endoftext|>, 514 tokens in all, max length 77 as in SD3."""
    from transformers import CLIPTokenizer

    alphabet = _bytes_to_unicode()
    tokens = ["<|startoftext|>", "<|endoftext|>"] + alphabet + [c + "</w>" for c in alphabet]
    vocab = {token: index for index, token in enumerate(tokens)}
    tokenizer = CLIPTokenizer(vocab=vocab, merges=[], model_max_length=77)
    return tokenizer


def tiny_t5_tokenizer():
    """A character-level Unigram T5 tokenizer (<pad>=0, </s>=1, <unk>=2), built by the
    `tokenizers` library inside the fast tokenizer; no sentencepiece model file needed."""
    from transformers import T5TokenizerFast

    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -1.0)]
    pieces += [(char, -2.0) for char in T5_CHARS if char != " "] + [("▁" + c, -1.5) for c in string.ascii_letters]
    return T5TokenizerFast(vocab=pieces, extra_ids=0, model_max_length=256)


SD3_SHAPES = {
    "tiny": dict(
        transformer=dict(sample_size=32, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=8,
                         num_attention_heads=4, joint_attention_dim=T5_HIDDEN, caption_projection_dim=32,
                         pooled_projection_dim=2 * CLIP_PROJECTION, out_channels=4, pos_embed_max_size=64),
        clip_l=dict(hidden_size=CLIP_HIDDEN, intermediate_size=37, num_attention_heads=2, num_hidden_layers=2,
                    hidden_act="gelu", projection_dim=CLIP_PROJECTION),
        clip_g=dict(hidden_size=CLIP_HIDDEN, intermediate_size=37, num_attention_heads=2, num_hidden_layers=2,
                    hidden_act="gelu", projection_dim=CLIP_PROJECTION),
        t5=dict(d_model=T5_HIDDEN, d_kv=8, d_ff=37, num_layers=2, num_heads=4, relative_attention_num_buckets=8),
        vae=dict(sample_size=32, block_out_channels=(4, 8, 8, 8), layers_per_block=1, latent_channels=4,
                 norm_num_groups=1, shift_factor=0.0609, scaling_factor=1.5035),
    ),
}
"""Architectures `build_sd3_pipeline` knows. A real model's shapes come from its shipped
architecture file instead (`models/real_shapes.py`, what the GPU benchmarks build)."""


def build_tiny_sd3_pipeline(seed: int = 0):
    """A complete StableDiffusion3Pipeline with random tiny weights (fp32, CPU), as diffusers'
    `get_dummy_components` builds one: 2 joint blocks of 4 heads x 8 dims, latent channels 4,
    VAE factor 8 (a 64x64 image is an 8x8 latent), FlowMatchEulerDiscreteScheduler(shift=3).
    The same seed gives the same weights."""
    return build_sd3_pipeline("tiny", seed)


def build_sd3_pipeline(shapes: str = "tiny", seed: int = 0, device: str | torch.device = "cpu",
                       dtype: torch.dtype = torch.float32):
    """A StableDiffusion3Pipeline of the named `SD3_SHAPES` with random weights, built directly
    on `device` in `dtype` (the VAE always float32). The in-memory tokenizers pad and truncate
    to the real lengths (77 CLIP + max_sequence_length T5 tokens)."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    spec = shape_spec(SD3_SHAPES, shapes, "SD3")
    clip_tokenizer = tiny_clip_tokenizer()
    t5_tokenizer = tiny_t5_tokenizer()
    with building(device, dtype):
        torch.manual_seed(seed)
        transformer = SD3Transformer2DModel(**spec["transformer"])
        towers = []
        for offset, tower in ((1, "clip_l"), (2, "clip_g")):
            torch.manual_seed(seed + offset)
            towers.append(CLIPTextModelWithProjection(CLIPTextConfig(
                bos_token_id=0, eos_token_id=1, pad_token_id=1, layer_norm_eps=1e-5,
                vocab_size=len(clip_tokenizer), **spec[tower])))
        torch.manual_seed(seed + 3)
        text_encoder_3 = T5EncoderModel(T5Config(
            vocab_size=len(t5_tokenizer), decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, **spec["t5"]))
    with building(device, torch.float32):
        torch.manual_seed(seed + 4)
        vae = AutoencoderKL(
            in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
            up_block_types=("UpDecoderBlock2D",) * 4, use_quant_conv=False, use_post_quant_conv=False,
            **spec["vae"])
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    return StableDiffusion3Pipeline(
        transformer=transformer, scheduler=scheduler, vae=vae, text_encoder=towers[0], tokenizer=clip_tokenizer,
        text_encoder_2=towers[1], tokenizer_2=tiny_clip_tokenizer(), text_encoder_3=text_encoder_3,
        tokenizer_3=t5_tokenizer)


QWEN_TEMPLATE = ("<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, "
                 "text, spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}"
                 "<|im_end|>\n<|im_start|>assistant\n")
"""QwenImagePipeline's `prompt_template_encode`; its first 34 tokens (the system turn) are dropped."""
QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def tiny_qwen2_tokenizer(corpus: str = QWEN_TEMPLATE):
    """A byte-level Qwen2 BPE (Qwen2's pre-tokenizer regex) whose merges are trained in memory
    on the words of `corpus`: by default the Qwen-Image prompt template, so the template's
    system turn is exactly the 34 tokens the pipeline drops (as with the real tokenizer); other
    text falls back to bytes. 362 tokens for the default corpus; <|endoftext|> pads."""
    import json

    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=1000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    words = corpus.replace("{}", "")
    for token in QWEN_SPECIAL:
        words = words.replace(token, "")
    bpe.train_from_iterator([words], trainer)
    model = json.loads(bpe.to_str())["model"]
    vocab = dict(model["vocab"])
    for token in QWEN_SPECIAL:
        vocab[token] = len(vocab)
    merges = [tuple(merge) for merge in model["merges"]]
    return Qwen2Tokenizer(vocab=vocab, merges=merges, additional_special_tokens=QWEN_SPECIAL[1:])


def build_tiny_flux_pipeline(seed: int = 0, guidance_embeds: bool = True):
    """A FluxPipeline with random tiny weights (fp32, CPU), as diffusers' FLUX tests build one:
    1 double-stream + 1 single-stream block of 2 heads x 16 dims, RoPE axes (4, 4, 8), latent
    channels 4 (packed 16), VAE factor 8 (a 64x64 image is an 8x8 latent, 16 tokens), CLIP-L
    pooled 16, T5 32; FLUX.1-dev's scheduler config (dynamic shift) and, with
    `guidance_embeds`, dev's guidance embedding (False: schnell's form)."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    clip_tokenizer, t5_tokenizer = tiny_clip_tokenizer(), tiny_t5_tokenizer()
    torch.manual_seed(seed)
    transformer = FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
                                         attention_head_dim=16, num_attention_heads=2, joint_attention_dim=T5_HIDDEN,
                                         pooled_projection_dim=CLIP_HIDDEN, guidance_embeds=guidance_embeds,
                                         axes_dims_rope=(4, 4, 8))
    torch.manual_seed(seed + 1)
    text_encoder = CLIPTextModel(CLIPTextConfig(
        bos_token_id=0, eos_token_id=1, pad_token_id=1, layer_norm_eps=1e-5, vocab_size=len(clip_tokenizer),
        **SD3_SHAPES["tiny"]["clip_l"]))
    torch.manual_seed(seed + 2)
    text_encoder_2 = T5EncoderModel(T5Config(vocab_size=len(t5_tokenizer), decoder_start_token_id=0, pad_token_id=0,
                                             eos_token_id=1, **SD3_SHAPES["tiny"]["t5"]))
    torch.manual_seed(seed + 3)
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
                        up_block_types=("UpDecoderBlock2D",) * 4, use_quant_conv=False, use_post_quant_conv=False,
                        **dict(SD3_SHAPES["tiny"]["vae"], shift_factor=0.1159, scaling_factor=0.3611))
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
                                                base_image_seq_len=256, max_image_seq_len=4096)
    return FluxPipeline(transformer=transformer, scheduler=scheduler, vae=vae, text_encoder=text_encoder,
                        tokenizer=clip_tokenizer, text_encoder_2=text_encoder_2, tokenizer_2=t5_tokenizer)


QWEN_TEXT_HIDDEN = 16
QWEN_TEXT_LAYERS = 2


def tiny_qwen2_5_vl(vocab: int):
    """A Qwen2_5_VLForConditionalGeneration of 2 layers of hidden 16 (text) and a 2-block vision
    tower, random weights from the current seed: the text encoder of the tiny Qwen-Image and
    Cosmos-Predict2.5 pipelines. The vision special tokens sit just past the tokenizer's `vocab`."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    config = Qwen2_5_VLConfig(
        text_config=dict(hidden_size=QWEN_TEXT_HIDDEN, intermediate_size=16, num_hidden_layers=QWEN_TEXT_LAYERS,
                         num_attention_heads=2, num_key_value_heads=2, vocab_size=vocab, rope_theta=1000000.0,
                         rope_scaling={"mrope_section": [1, 1, 2], "rope_type": "default", "type": "default"}),
        vision_config=dict(depth=2, hidden_size=16, intermediate_size=16, num_heads=2,
                           out_hidden_size=QWEN_TEXT_HIDDEN),
        hidden_size=QWEN_TEXT_HIDDEN, vocab_size=vocab, vision_start_token_id=vocab, vision_end_token_id=vocab + 1,
        image_token_id=vocab + 2, video_token_id=vocab + 3)
    return Qwen2_5_VLForConditionalGeneration(config)


def build_tiny_qwen_image_pipeline(seed: int = 0):
    """A QwenImagePipeline with random tiny weights (fp32, CPU), as diffusers' Qwen-Image tests
    build one: 2 blocks of 2 heads x 16 dims, RoPE axes (8, 4, 4), a 2-layer Qwen2.5-VL of
    hidden 16, AutoencoderKLQwenImage with z_dim 4 and VAE factor 8 (non-trivial
    latents_mean/std, so the decode normalisation is exercised), Qwen-Image's scheduler
    config (dynamic shift, max_image_seq_len 8192, shift_terminal 0.02)."""
    from diffusers import AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImagePipeline
    from diffusers import QwenImageTransformer2DModel

    tokenizer = tiny_qwen2_tokenizer()
    torch.manual_seed(seed)
    transformer = QwenImageTransformer2DModel(patch_size=2, in_channels=16, out_channels=4, num_layers=2,
                                              attention_head_dim=16, num_attention_heads=2,
                                              joint_attention_dim=QWEN_TEXT_HIDDEN, guidance_embeds=False,
                                              axes_dims_rope=(8, 4, 4))
    torch.manual_seed(seed + 1)
    text_encoder = tiny_qwen2_5_vl(len(tokenizer))
    torch.manual_seed(seed + 2)
    vae = AutoencoderKLQwenImage(base_dim=24, z_dim=4, dim_mult=[1, 2, 4, 4], num_res_blocks=1,
                                 temperal_downsample=[False, True, True],
                                 latents_mean=[-0.7571, -0.7089, -0.9113, 0.1075],
                                 latents_std=[2.8184, 1.4541, 2.3275, 2.6558])
    scheduler = FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=0.9,
                                                base_image_seq_len=256, max_image_seq_len=8192, shift_terminal=0.02,
                                                time_shift_type="exponential")
    return QwenImagePipeline(transformer=transformer, scheduler=scheduler, vae=vae, text_encoder=text_encoder,
                             tokenizer=tokenizer)


WAN_SHAPES = {
    # 2 blocks of 2 heads x 12 dims (diffusers' WanPipeline test), a 16-channel VAE with
    # spatial factor 8 and temporal factor 2 (so 3 frames make 2 latent frames; real Wan: 4)
    "tiny": dict(
        transformer=dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=16,
                         out_channels=16, text_dim=T5_HIDDEN, freq_dim=256, ffn_dim=32, num_layers=2,
                         cross_attn_norm=True, qk_norm="rms_norm_across_heads", rope_max_seq_len=32),
        umt5=dict(d_model=T5_HIDDEN, d_kv=8, d_ff=37, num_layers=2, num_heads=4, relative_attention_num_buckets=8),
        vae=dict(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                 temperal_downsample=[False, True, False], scale_factor_temporal=2, scale_factor_spatial=8),
        flow_shift=3.0,
    ),
    # the published configs of Wan-AI/Wan2.1-T2V-1.3B-Diffusers (30 blocks of 12 x 128 heads,
    # UMT5-XXL's encoder, the Wan VAE): the shapes a GPU memory check runs, random weights
    "wan2.1-t2v-1.3b": dict(
        transformer=dict(patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16,
                         out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=30,
                         cross_attn_norm=True, qk_norm="rms_norm_across_heads", rope_max_seq_len=1024),
        umt5=dict(d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64, relative_attention_num_buckets=32,
                  feed_forward_proj="gated-gelu"),
        vae=dict(base_dim=96, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
                 temperal_downsample=[False, True, True], scale_factor_temporal=4, scale_factor_spatial=8),
        flow_shift=3.0,
    ),
}
"""Architectures `build_wan_pipeline` knows: the tiny test pipeline and Wan 2.1 T2V 1.3B's."""


def build_wan_pipeline(shapes: str = "tiny", seed: int = 0, device: str | torch.device = "cpu",
                       dtype: torch.dtype = torch.float32):
    """A WanPipeline of the named `WAN_SHAPES` with random weights (the VAE always float32),
    a UMT5 encoder over the in-memory character-level T5 tokenizer (UMT5's tokenizer class is
    T5's), and the UniPC flow scheduler Wan ships (use_flow_sigmas, flow_shift=3)."""
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    spec = shape_spec(WAN_SHAPES, shapes, "Wan")
    tokenizer = tiny_t5_tokenizer()
    with building(device, dtype):
        torch.manual_seed(seed)
        transformer = WanTransformer3DModel(**spec["transformer"])
        torch.manual_seed(seed + 1)
        text_encoder = UMT5EncoderModel(UMT5Config(
            vocab_size=len(tokenizer), decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, **spec["umt5"]))
    with building(device, torch.float32):
        torch.manual_seed(seed + 2)
        vae = AutoencoderKLWan(**spec["vae"])
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
                                        flow_shift=spec["flow_shift"])
    return WanPipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, scheduler=scheduler,
                       transformer=transformer)


def build_tiny_wan_pipeline(seed: int = 0):
    """The tiny WanPipeline of `WAN_SHAPES` (fp32, CPU); the same seed gives the same weights."""
    return build_wan_pipeline("tiny", seed)


COSMOS_SYSTEM_PROMPT = "You are a helpful assistant who will provide prompts to an image generator."
"""The system turn Cosmos2_5_PredictBasePipeline puts before every prompt."""
QWEN2_5_VL_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}<|im_start|>system\n"
    "You are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'text' %}{{ content['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
"""Qwen2.5-VL-Instruct's chat template for text messages (its image/video branches dropped:
Cosmos' pipeline sends only text), which Cosmos2_5_PredictBasePipeline applies to each prompt."""

COSMOS_SHAPES = {
    # diffusers' Cosmos2.5 pipeline test (2 blocks of 2 heads x 16 dims, mlp_ratio 2, adaLN-LoRA 4)
    # with Cosmos-Predict2.5's choices: 16 latent channels + the condition-mask channel, RoPE
    # scale (1, 3, 3), no learnable positional embedding, the projection of the concatenated
    # Qwen2.5-VL hidden states (2 layers x 16 = 32 in, 32 out). concat_padding_mask=False: the
    # real model's True resizes its padding mask with torchvision, which this environment lacks.
    "tiny": dict(
        transformer=dict(in_channels=16 + 1, out_channels=16, num_attention_heads=2, attention_head_dim=16,
                         num_layers=2, mlp_ratio=2.0, text_embed_dim=32, adaln_lora_dim=4, max_size=(4, 32, 32),
                         patch_size=(1, 2, 2), rope_scale=(1.0, 3.0, 3.0), concat_padding_mask=False,
                         extra_pos_embed_type=None, use_crossattn_projection=True,
                         crossattn_proj_in_channels=QWEN_TEXT_LAYERS * QWEN_TEXT_HIDDEN,
                         encoder_hidden_states_channels=32),
        vae=WAN_SHAPES["tiny"]["vae"],
        # the scheduler diffusers' convert_cosmos_to_diffusers.py ships with Cosmos-Predict2.5
        scheduler=dict(use_karras_sigmas=True, use_flow_sigmas=True, prediction_type="flow_prediction",
                       sigma_max=200.0, sigma_min=0.01),
    ),
}
"""Architectures `build_cosmos_pipeline` knows."""


def build_cosmos_pipeline(shapes: str = "tiny", seed: int = 0, device: str | torch.device = "cpu",
                          dtype: torch.dtype = torch.float32):
    """A Cosmos2_5_PredictBasePipeline of the named `COSMOS_SHAPES` with random weights (the VAE
    always float32): the tiny Qwen2.5-VL text encoder over a Qwen2 BPE trained on the
    pipeline's system turn, with Qwen2.5-VL's chat template; the Wan VAE; the Karras-flow UniPC
    scheduler Cosmos ships. Its guardrail is `GuardrailNotLoaded` (saved as none, as the hub
    checkpoints are)."""
    from diffusers import AutoencoderKLWan, Cosmos2_5_PredictBasePipeline, CosmosTransformer3DModel
    from diffusers import UniPCMultistepScheduler

    from genalign.models.cosmos.policy import GuardrailNotLoaded

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
    return Cosmos2_5_PredictBasePipeline(text_encoder=text_encoder, tokenizer=tokenizer, transformer=transformer,
                                         vae=vae, scheduler=UniPCMultistepScheduler(**spec["scheduler"]),
                                         safety_checker=GuardrailNotLoaded())


def build_tiny_cosmos_pipeline(seed: int = 0):
    """The tiny Cosmos2_5_PredictBasePipeline of `COSMOS_SHAPES` (fp32, CPU)."""
    return build_cosmos_pipeline("tiny", seed)


JANUS_SPECIAL = {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>",
                 "pad_token": "<｜▁pad▁｜>"}
JANUS_IMAGE_SPECIAL = {"image_token": "<image_placeholder>", "boi_token": "<begin_of_image>",
                       "eoi_token": "<end_of_image>"}
"""Janus-Pro's special tokens (its tokenizer's names); the processor reads the image ones."""


def tiny_janus_tokenizer():
    """A byte-level BPE with no merges (one token per byte) that prepends BOS, with Janus-Pro's
    special tokens (BOS/EOS/pad and the image placeholder / begin / end of image), 262 tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = list(JANUS_SPECIAL.values()) + list(JANUS_IMAGE_SPECIAL.values())
    vocab = {token: index for index, token in enumerate(specials + _bytes_to_unicode())}
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    bpe.decoder = decoders.ByteLevel()
    bos = JANUS_SPECIAL["bos_token"]
    bpe.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, vocab[bos])])
    return PreTrainedTokenizerFast(tokenizer_object=bpe, padding_side="left", extra_special_tokens=JANUS_IMAGE_SPECIAL,
                                   **JANUS_SPECIAL)


JANUS_SHAPES = {
    # a 2-layer Llama of hidden 32 (4 heads, 2 KV heads), a 1-layer SigLIP tower, and a VQ model
    # of 64 codes whose decoder upsamples 4x4 tokens by 8: 16 image tokens per 32x32 image
    "tiny": dict(
        text=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=512),
        vision=dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, image_size=32, patch_size=8,
                    mlp_ratio=2.0, depth=2),
        vq=dict(embed_dim=8, num_embeddings=64, latent_channels=32, base_channels=32, channel_multiplier=[1, 1, 1, 1],
                num_res_blocks=1, num_hidden_layers=2),
    ),
}
"""Architectures `build_tiny_janus` knows."""


class JanusBundle:
    """A `JanusForConditionalGeneration` and its `JanusProcessor`, saved side by side as the hub
    repos are (`save_pretrained` writes both into one directory)."""

    def __init__(self, model, processor):
        self.model, self.processor = model, processor

    def save_pretrained(self, path: str | Path) -> None:
        self.model.save_pretrained(path)
        self.processor.save_pretrained(path)


def build_tiny_janus(seed: int = 0, shapes: str = "tiny") -> JanusBundle:
    """A JanusForConditionalGeneration with random tiny weights (fp32, CPU) and its processor
    (in-memory tokenizer, JanusImageProcessor at the tiny image size). The generation config
    carries what `generate(generation_mode="image")` reads: BOS, pad (the unconditional
    prompt's filler), the begin-of-image id and CFG 5 (Janus-Pro's default)."""
    from transformers import (GenerationConfig, JanusConfig, JanusForConditionalGeneration, JanusImageProcessorPil,
                              JanusProcessor)

    spec = shape_spec(JANUS_SHAPES, shapes, "Janus")
    tokenizer = tiny_janus_tokenizer()
    text_hidden = spec["text"]["hidden_size"]
    vision = spec["vision"]
    num_image_tokens = (vision["image_size"] // vision["patch_size"]) ** 2
    config = JanusConfig(
        text_config=dict(model_type="llama", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, **spec["text"]),
        vision_config=dict(projection_dim=text_hidden, num_image_tokens=num_image_tokens, **vision),
        vq_config=dict(projection_dim=text_hidden, image_token_embed_dim=text_hidden, **spec["vq"]),
        image_token_id=tokenizer.convert_tokens_to_ids(JANUS_IMAGE_SPECIAL["image_token"]))
    torch.manual_seed(seed)
    model = JanusForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        generation_kwargs={"boi_token_id": tokenizer.convert_tokens_to_ids(JANUS_IMAGE_SPECIAL["boi_token"])},
        guidance_scale=5.0)
    image_processor = JanusImageProcessorPil(size={"height": vision["image_size"], "width": vision["image_size"]})
    processor = JanusProcessor(image_processor=image_processor, tokenizer=tokenizer, num_image_tokens=num_image_tokens)
    return JanusBundle(model, processor)


def tiny_families() -> list[str]:
    """The registered families whose spec names a tiny builder (`FamilySpec.tiny_builder`)."""
    from genalign.models.registry import MODEL_FAMILIES
    from genalign.models.spec import family_spec

    return [name for name in MODEL_FAMILIES.names() if family_spec(name).tiny_builder]


def save_tiny(family: str, path: str | Path, seed: int = 0) -> Path:
    """Build the tiny model of `family` (its spec's `tiny_builder`) and `save_pretrained` it into
    `path` (safetensors)."""
    from genalign.models.spec import family_spec

    if family not in tiny_families():
        raise ValueError(f"no tiny builder for family {family!r}: choose one of {tiny_families()}")
    path = Path(path)
    family_spec(family).build_tiny(seed).save_pretrained(path)
    return path


def save_tiny_sd3(path: str | Path, seed: int = 0) -> Path:
    """Build and `save_pretrained` a tiny SD3 pipeline into `path` (safetensors); returns it."""
    return save_tiny("sd3", path, seed)

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m genalign.models.tiny_random", description="Write a tiny random pipeline.")
    parser.add_argument("family", choices=tiny_families())
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(save_tiny(args.family, args.out_dir, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
