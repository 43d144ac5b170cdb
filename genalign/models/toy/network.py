"""The toy family's networks: a learned prompt embedding and a tiny pixel-space SD3 transformer.

Where it fits: `ToyPolicy` (policy.py) loads both from a directory (the shipped
`genalign/assets/toy/` or one written by `genalign pretrain-demo`); the pretraining recipe
(pretrain.py) builds them fresh.

Why a real `diffusers.SD3Transformer2DModel` rather than a hand-written DiT: the demo then runs
the very code path real SD3 runs (joint attention, adaLN-zero, `from_pretrained`, LoRA targets
`attn.to_q` ... `attn.to_add_out`). In pixel space it has 3 input channels, patch 4 (a 32x32
image is 8x8 = 64 tokens, the cost of the earlier 16x16 model at patch 2), 4 joint blocks of
4 heads x 16 dims (~0.59 M parameters).

The "text encoder" is a lookup table: a prompt "a red circle" becomes the two token embeddings
[colour, shape] (`embeds` [B, 2, 32], the joint-attention context) and their concatenation
(`pooled` [B, 64], which SD3 adds to the timestep embedding that drives adaLN). The empty
prompt (CFG's unconditional branch) is the `<null>` token in both slots. It is trained with the
transformer during pretraining and frozen afterwards.

Directory layout:
    transformer/                 SD3Transformer2DModel.save_pretrained (fp16 safetensors)
    text_encoder.safetensors     {"embedding.weight": [V, 32]}
    text_encoder.json            {"vocab": [...], "dim": 32}
    toy_model.json               {"image_size": 32, "shift": 1.0, "prediction": "x0", ...pretraining record}
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from genalign.data.toy_shapes import COLOR_NAMES, IMAGE_SIZE, PATCH_SIZE, SHAPES, parse_prompt

NULL_TOKEN = "<null>"
VOCAB: tuple[str, ...] = (NULL_TOKEN, *COLOR_NAMES, *SHAPES)
TOKEN_DIM = 32
TRANSFORMER_CONFIG = dict(
    sample_size=IMAGE_SIZE,
    patch_size=PATCH_SIZE,
    in_channels=3,
    out_channels=3,
    num_layers=4,
    attention_head_dim=16,
    num_attention_heads=4,
    joint_attention_dim=TOKEN_DIM,
    caption_projection_dim=64,
    pooled_projection_dim=2 * TOKEN_DIM,
    pos_embed_max_size=IMAGE_SIZE // PATCH_SIZE,
)
"""Arguments of the shipped SD3Transformer2DModel (caption_projection_dim = 4 heads x 16)."""
SCHEDULE_SHIFT = 1.0
"""Pretraining draws sigma uniformly (plain rectified flow), so sampling uses no time shift."""
PREDICTION = "x0"
"""What the transformer outputs: the clean image x̂0, turned into the velocity the sampler and
the RL loss use by `velocity_from_x0`. Why not the velocity itself: with 4x4x3 = 48 pixels
per token and 64 hidden dims, a velocity (or noise) prediction must carry full-rank noise
through the bottleneck and comes out as a 4-pixel mosaic, while the clean image of a flat
shape is low-dimensional (Li & He 2025, "Back to Basics: Let Denoising Generative Models
Denoise", JiT: x-prediction with the v-loss). Directories written before this key existed
predict the velocity ("velocity")."""
X0_SIGMA_FLOOR = 0.05
"""σ is clamped to at least this when dividing by it (JiT's t_eps), so the last steps stay finite."""


def velocity_from_x0(latents: torch.Tensor, x0: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """Rectified flow x_σ = (1 − σ) x0 + σ ε has velocity v = ε − x0 = (x_σ − x0) / σ:
    latents [B, C, H, W], x̂0 [B, C, H, W], σ [B] (or a scalar) -> v̂ [B, C, H, W], σ floored at
    X0_SIGMA_FLOOR."""
    sigma = torch.as_tensor(sigma, dtype=latents.dtype, device=latents.device).expand(latents.shape[0])  # [B]
    return (latents - x0) / sigma.clamp(min=X0_SIGMA_FLOOR)[:, None, None, None]


TRANSFORMER_DIR = "transformer"
TEXT_ENCODER_FILE = "text_encoder.safetensors"
TEXT_ENCODER_CONFIG = "text_encoder.json"
MODEL_RECORD = "toy_model.json"


class ToyTextEncoder(nn.Module):
    """Prompt -> (embeds [B, 2, D], pooled [B, 2D]) by token lookup; see the module docstring."""

    def __init__(self, vocab: tuple[str, ...] = VOCAB, dim: int = TOKEN_DIM):
        super().__init__()
        self.vocab = tuple(vocab)
        self.dim = dim
        self.embedding = nn.Embedding(len(self.vocab), dim)
        nn.init.normal_(self.embedding.weight, std=1.0)

    def token_ids(self, prompts: list[str]) -> torch.Tensor:
        """long [B, 2]: (colour, shape) token ids; the empty prompt is (<null>, <null>).
        An unknown word raises ValueError naming it (`parse_prompt`)."""
        rows = []
        for prompt in prompts:
            parsed = parse_prompt(prompt)
            if parsed.shape is None:
                rows.append([self.vocab.index(NULL_TOKEN)] * 2)
            else:
                rows.append([self.vocab.index(parsed.color), self.vocab.index(parsed.shape)])
        return torch.tensor(rows, dtype=torch.long, device=self.embedding.weight.device)  # [B, 2]

    def forward(self, token_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        embeds = self.embedding(token_ids)  # [B, 2, D]
        return embeds, embeds.flatten(1)  # [B, 2, D], [B, 2D]

    def save(self, directory: Path) -> None:
        from safetensors.torch import save_file

        save_file(
            {"embedding.weight": self.embedding.weight.detach().cpu().contiguous()}, str(directory / TEXT_ENCODER_FILE)
        )
        (directory / TEXT_ENCODER_CONFIG).write_text(json.dumps({"vocab": list(self.vocab), "dim": self.dim}, indent=1))

    @classmethod
    def load(cls, directory: Path) -> "ToyTextEncoder":
        from safetensors.torch import load_file

        config = json.loads((directory / TEXT_ENCODER_CONFIG).read_text())
        if tuple(config["vocab"]) != VOCAB:
            raise ValueError(
                f"{directory / TEXT_ENCODER_CONFIG}: vocabulary {config['vocab']} differs from this "
                f"version's toy world {list(VOCAB)}; regenerate it with `genalign pretrain-demo`"
            )
        encoder = cls(tuple(config["vocab"]), int(config["dim"]))
        encoder.load_state_dict(load_file(str(directory / TEXT_ENCODER_FILE)), strict=True)
        return encoder


def build_transformer(seed: int):
    """A freshly initialised toy SD3Transformer2DModel (fp32) under `seed`."""
    from diffusers import SD3Transformer2DModel

    torch.manual_seed(seed)
    return SD3Transformer2DModel(**TRANSFORMER_CONFIG)


def save_toy_model(directory: str | Path, transformer, text_encoder: ToyTextEncoder, record: dict) -> Path:
    """Write a loadable toy model directory; the transformer is stored in fp16 (half the size;
    the loader casts back to the requested dtype)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    from safetensors.torch import load_file, save_file

    transformer.save_pretrained(directory / TRANSFORMER_DIR, safe_serialization=True)
    weights = directory / TRANSFORMER_DIR / "diffusion_pytorch_model.safetensors"
    half = {name: tensor.to(torch.float16) for name, tensor in load_file(str(weights)).items()}
    save_file(half, str(weights), metadata={"format": "pt"})
    text_encoder.save(directory)
    (directory / MODEL_RECORD).write_text(
        json.dumps({"image_size": IMAGE_SIZE, "shift": SCHEDULE_SHIFT, "prediction": PREDICTION, **record}, indent=1)
    )
    return directory


def load_toy_model(directory: str | Path, dtype: torch.dtype = torch.float32):
    """(transformer, text_encoder, record) from a directory written by `save_toy_model`."""
    from diffusers import SD3Transformer2DModel

    directory = Path(directory)
    if not (directory / TRANSFORMER_DIR).is_dir() or not (directory / TEXT_ENCODER_FILE).is_file():
        raise FileNotFoundError(
            f"model.path={str(directory)!r} is not a toy model directory (expected "
            f"{TRANSFORMER_DIR}/ and {TEXT_ENCODER_FILE}); use model.path=builtin or write one "
            "with `genalign pretrain-demo --what model --out DIR`"
        )
    transformer = SD3Transformer2DModel.from_pretrained(directory / TRANSFORMER_DIR, torch_dtype=dtype)
    record = json.loads((directory / MODEL_RECORD).read_text()) if (directory / MODEL_RECORD).is_file() else {}
    return transformer, ToyTextEncoder.load(directory), record
