"""NextStep-1 (stepfun-ai/NextStep-1): a Qwen2.5 decoder whose image positions read and write
continuous tokens, the checkpoint's own layout, in genalign's code.

Where it fits: `NextStepModel` is what the family's policy trains (LoRA on the decoder's
attention, or all of it) and what `sampling.py` drives. No library ships a class for it
(diffusers 0.42 / transformers 5.23); the decoder blocks are transformers' `Qwen2DecoderLayer`
(the checkpoint's layers are Qwen2.5's: q/k/v with bias, o without), the rest is ours.

The parameter names are the published checkpoint's, which the authors' `NextStep` module
defines (stepfun-ai/NextStep-1 6e49bae, `nextstep/models/modeling_nextstep.py`; its
`save_pretrained` writes the safetensors): `embed_tokens`, `layers.{i}.…`, `norm`, `lm_head`,
`image_in_projector`, `image_out_projector`, `image_head.net.…` and the `gen_pos_embed` buffer
(persistent, so it is in the checkpoint). `load_state_dict(strict=True)` of a checkpoint
therefore needs no renaming (tests/integration/test_nextstep_model.py loads weights the
authors' code saved).

Image tokens: the VAE latent [C, h, w] cut into p x p patches, one token of C·p² values per
patch, row-major (`patchify`), as the authors' `patchify` orders them.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any

import numpy as np
import torch
from torch import nn

from genalign.models.nextstep.head import FlowHead

GEN_POS_GRID = 32
"""Side of the sin-cos grid of `gen_pos_embed` (the authors' fixed 32 x 32)."""


@dataclass(frozen=True)
class NextStepArchitecture:
    """The keys of a NextStep-1 `config.json` this implementation reads (the authors'
    `NextStepConfig`, a `LlamaConfig` with the image keys beside it)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1000000.0
    max_position_embeddings: int = 32768
    attention_bias: bool = True
    o_attention_bias: bool = False
    tie_word_embeddings: bool = False
    pad_token_id: int | None = None
    latent_channels: int = 16
    latent_patch_size: int = 2
    fm_head_dim: int = 1536
    fm_head_layers: int = 12
    boi: int | None = None
    eoi: int | None = None
    image_placeholder_id: int | None = None
    use_gen_pos_embed: bool = False

    @classmethod
    def from_dict(cls, config: dict[str, Any], source: str = "config.json") -> "NextStepArchitecture":
        """From a checkpoint's config.json: missing required keys and a decoder that is not
        Qwen2.5's form (q/k/v bias, no o bias, untied head) are one-line errors naming them."""
        names = {f.name for f in fields(cls)}
        required = [f.name for f in fields(cls) if f.default is MISSING]
        missing = [name for name in required if name not in config]
        if missing:
            raise ValueError(f"{source}: NextStep-1 config lacks {missing}")
        values = {k: v for k, v in config.items() if k in names}
        values["o_attention_bias"] = config.get("o_attention_bias", config.get("attention_bias", True))
        if "rope_parameters" in config and "rope_theta" not in config:
            values["rope_theta"] = config["rope_parameters"]["rope_theta"]
        arch = cls(**values)
        if not arch.attention_bias or arch.o_attention_bias or arch.tie_word_embeddings:
            raise ValueError(
                f"{source}: attention_bias={arch.attention_bias}, o_attention_bias={arch.o_attention_bias}, "
                f"tie_word_embeddings={arch.tie_word_embeddings}: genalign's NextStep-1 decoder is Qwen2.5's "
                "(q/k/v with bias, o_proj without, an untied lm_head), as NextStep-1-Large"
            )
        return arch

    def to_dict(self) -> dict[str, Any]:
        """The config.json keys (what `from_dict` reads back)."""
        return {"model_type": "nextstep", **asdict(self)}

    @property
    def token_dim(self) -> int:
        """Values per image token: C·p²."""
        return self.latent_channels * self.latent_patch_size**2

    def qwen2_config(self):
        """The `Qwen2Config` of the decoder blocks (sdpa attention, no sliding window)."""
        from transformers import Qwen2Config

        config = Qwen2Config(
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            vocab_size=self.vocab_size,
            rms_norm_eps=self.rms_norm_eps,
            max_position_embeddings=self.max_position_embeddings,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
            use_sliding_window=False,
        )
        config._attn_implementation = "sdpa"
        return config


def sincos_grid_embedding(dim: int, grid: int) -> torch.Tensor:
    """MAE's 2-D sin-cos position table [grid², dim] float32, row-major positions: the first
    dim/2 channels encode the column, the last dim/2 the row (MAE's meshgrid puts w first), each
    [sin(pos·ω), cos(pos·ω)], ω_j = 10000^(−2j/(dim/2))."""

    def axis(d: int, positions: np.ndarray) -> np.ndarray:
        omega = 1.0 / 10000 ** (np.arange(d // 2, dtype=np.float64) / (d / 2.0))  # [d/2]
        angles = np.outer(positions.reshape(-1), omega)  # [M, d/2]
        return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)  # [M, d]

    cols, rows = np.meshgrid(np.arange(grid, dtype=np.float32), np.arange(grid, dtype=np.float32))
    table = np.concatenate([axis(dim // 2, cols), axis(dim // 2, rows)], axis=1)  # [grid², dim]
    return torch.from_numpy(table).float()


def additive_causal_mask(padding: torch.Tensor, query_len: int, dtype: torch.dtype) -> torch.Tensor:
    """[B, 1, Q, K] additive mask (0 attend, dtype's min masked) for the last `query_len` of K
    positions: causal, and no key that `padding` [B, K] marks 0. A finite minimum, not −inf,
    as the authors' mask: a left-pad query row that sees nothing stays finite."""
    keys = padding.shape[1]
    query_pos = torch.arange(keys - query_len, keys, device=padding.device)  # [Q]
    allowed = torch.arange(keys, device=padding.device)[None, :] <= query_pos[:, None]  # [Q, K]
    allowed = allowed[None, None] & padding[:, None, None, :].bool()  # [B, 1, Q, K]
    mask = torch.zeros(allowed.shape, dtype=dtype, device=padding.device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)


class NextStepModel(nn.Module):
    """The checkpoint's modules under their names; `decode_hidden` is the decoder forward."""

    def __init__(self, arch: NextStepArchitecture):
        super().__init__()
        from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer, Qwen2RMSNorm, Qwen2RotaryEmbedding

        self.arch = arch
        config = arch.qwen2_config()
        self.embed_tokens = nn.Embedding(arch.vocab_size, arch.hidden_size, arch.pad_token_id)
        self.layers = nn.ModuleList(Qwen2DecoderLayer(config, i) for i in range(arch.num_hidden_layers))
        self.norm = Qwen2RMSNorm(arch.hidden_size, eps=arch.rms_norm_eps)
        self.rotary_emb = Qwen2RotaryEmbedding(config=config)
        self.lm_head = nn.Linear(arch.hidden_size, arch.vocab_size, bias=False)
        self.register_buffer("gen_pos_embed", sincos_grid_embedding(arch.hidden_size, GEN_POS_GRID)[None])
        self.image_in_projector = nn.Linear(arch.token_dim, arch.hidden_size)
        self.image_out_projector = nn.Linear(arch.hidden_size, arch.hidden_size)
        self.image_head = FlowHead(arch.token_dim, arch.hidden_size, arch.fm_head_dim, arch.fm_head_layers)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "NextStepModel":
        """Freshly initialised from a config.json's keys (what the memory plan builds on the meta
        device from the family's architecture file: `models/architecture.py`)."""
        return cls(NextStepArchitecture.from_dict(config))

    @property
    def config(self) -> NextStepArchitecture:
        """The architecture (hidden_size, num_hidden_layers, num_key_value_heads, ...), read as a
        transformers decoder's config is by the memory plan's `transformer_shape`."""
        return self.arch

    def decode_hidden(
        self, inputs_embeds: torch.Tensor, padding: torch.Tensor, past_key_values=None
    ) -> tuple[torch.Tensor, Any]:
        """Decoder over `inputs_embeds` [B, Q, H] after the cached positions; `padding` [B, K]
        covers cache and new positions (1 real, 0 pad). Positions are absolute indices in the
        padded sequence (pads counted), as the authors' `forward_model` numbers them. Returns
        the final-norm hidden states [B, Q, H] and the cache (None when none was given)."""
        queries = inputs_embeds.shape[1]
        start = padding.shape[1] - queries
        positions = torch.arange(start, start + queries, device=inputs_embeds.device)[None]  # [1, Q]
        mask = additive_causal_mask(padding, queries, inputs_embeds.dtype)  # [B, 1, Q, K]
        position_embeddings = self.rotary_emb(inputs_embeds, positions)
        hidden = inputs_embeds
        for layer in self.layers:
            hidden = layer(
                hidden,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=past_key_values,
                use_cache=past_key_values is not None,
                position_embeddings=position_embeddings,
            )
        return self.norm(hidden), past_key_values

    def head_condition(self, hidden: torch.Tensor, image_index: torch.Tensor | int) -> torch.Tensor:
        """The head's condition from the decoder state that predicts image token `image_index`
        (an int, or [N] for a row of tokens): `image_out_projector`, after adding that token's
        `gen_pos_embed` row when the checkpoint uses it (the authors add it to the state)."""
        if self.arch.use_gen_pos_embed:
            hidden = hidden + self.gen_pos_embed[0, image_index].to(hidden.dtype)
        return self.image_out_projector(hidden)

    def patchify(self, latents: torch.Tensor) -> torch.Tensor:
        """[B, C, h, w] -> [B, (h/p)(w/p), C·p²] (row-major patches, channels then pixel offsets)."""
        batch, channels, height, width = latents.shape
        p = self.arch.latent_patch_size
        x = latents.reshape(batch, channels, height // p, p, width // p, p)
        return x.permute(0, 2, 4, 1, 3, 5).reshape(batch, (height // p) * (width // p), channels * p * p)

    def unpatchify(self, tokens: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
        """[B, rows·cols, C·p²] -> [B, C, rows·p, cols·p], the inverse of `patchify`."""
        batch = tokens.shape[0]
        p, channels = self.arch.latent_patch_size, self.arch.latent_channels
        x = tokens.reshape(batch, rows, cols, channels, p, p)
        return x.permute(0, 3, 1, 4, 2, 5).reshape(batch, channels, rows * p, cols * p)
