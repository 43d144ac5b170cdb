"""The tiny random NextStep-1 (`SPEC.tiny_builder`): the checkpoint's architecture shrunk in
width and depth, a tokenizer with NextStep-1's special tokens and a tiny 16-channel VAE, saved
in the layout `NextStepPolicy.from_pretrained` loads.

Where it fits: tests build it, save it and load it back through the real loader
(`python -m genalign.models.tiny_random nextstep DIR` once the family is registered).
"""

from __future__ import annotations

from pathlib import Path

import torch

from genalign.models.nextstep.checkpoint import write_checkpoint
from genalign.models.nextstep.modeling import NextStepArchitecture, NextStepModel
from genalign.models.tiny_random import bytes_to_unicode

NEXTSTEP_SPECIAL = [
    "[PAD]",
    "<|image_area|>",
    "<|begin_of_image|>",
    "<|end_of_image|>",
    "<|image_placeholder|>",
]
"""The authors' added tokens the sampler reads (`nextstep/models/tokenization_nextstep.py`):
the pad token and the image-area, begin / end of image and placeholder tokens."""

TINY_ARCHITECTURE = dict(
    # NextStep-1-Large's decoder (Qwen2.5-14B's shapes: hidden 5120, 48 layers, 40 heads over 8
    # KV heads, q/k/v bias) at hidden 64, 2 layers, 4 heads over 2; the image side as the
    # authors' defaults (16 latent channels, 2x2 patches) with the 1536 x 12 head at 32 x 2
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    rms_norm_eps=1e-6,
    rope_theta=1000000.0,
    max_position_embeddings=4096,
    attention_bias=True,
    o_attention_bias=False,
    tie_word_embeddings=False,
    latent_channels=16,
    latent_patch_size=2,
    fm_head_dim=32,
    fm_head_layers=2,
    use_gen_pos_embed=False,
)


def tiny_nextstep_tokenizer():
    """A byte-level BPE with no merges (one token per byte) and NextStep-1's special tokens,
    no BOS (as Qwen2.5's tokenizer), left padding with [PAD]."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate(NEXTSTEP_SPECIAL + bytes_to_unicode())}
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    bpe.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe, padding_side="left", pad_token="[PAD]", additional_special_tokens=NEXTSTEP_SPECIAL[1:]
    )


def tiny_vae():
    """A diffusers AutoencoderKL with 16 latent channels and 4 blocks (8x downsampling, the
    f8ch16 tokenizer's factor) at widths of 8."""
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        latent_channels=16,
        block_out_channels=(8, 8, 8, 8),
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        layers_per_block=1,
        norm_num_groups=4,
        scaling_factor=1.0,
        shift_factor=0.0,
    ).eval()


class NextStepBundle:
    """Model, tokenizer and VAE saved side by side in the checkpoint's layout."""

    def __init__(self, model: NextStepModel, config: dict, tokenizer, vae):
        self.model, self.config, self.tokenizer, self.vae = model, config, tokenizer, vae

    def with_model(self, model: NextStepModel) -> "NextStepBundle":
        """The same tokenizer and VAE beside another model (`models/real_shapes.py`: one rebuilt
        at other shapes); the config follows the model's architecture, the token ids the tokenizer's."""
        shapes = {k: v for k, v in model.arch.to_dict().items() if v is not None}
        return NextStepBundle(model, {**self.config, **shapes}, self.tokenizer, self.vae)

    def save_pretrained(self, path: str | Path) -> None:
        write_checkpoint(Path(path), self.config, self.model.state_dict(), self.tokenizer, self.vae)


def build_tiny_nextstep(seed: int = 0, architecture: dict | None = None) -> NextStepBundle:
    """Random tiny weights (fp32, CPU). The head's output layers get random weights too (the
    authors zero-initialise them, which would make every velocity 0). `architecture`: other
    shapes than `TINY_ARCHITECTURE` (the memory calibration's real-width blocks, cut in depth);
    the vocabulary and token ids are always the tiny tokenizer's."""
    tokenizer = tiny_nextstep_tokenizer()
    ids = tokenizer.convert_tokens_to_ids
    config = dict(
        architecture or TINY_ARCHITECTURE,
        model_type="nextstep",
        vocab_size=len(tokenizer),
        pad_token_id=ids("[PAD]"),
        boi=ids("<|begin_of_image|>"),
        eoi=ids("<|end_of_image|>"),
        image_placeholder_id=ids("<|image_placeholder|>"),
    )
    torch.manual_seed(seed)
    model = NextStepModel(NextStepArchitecture.from_dict(config)).eval()
    with torch.no_grad():
        for name, parameter in model.image_head.named_parameters():
            if "final_layer" in name or "adaLN" in name:
                parameter.normal_(0.0, 0.2)
    return NextStepBundle(model, config, tokenizer, tiny_vae())
