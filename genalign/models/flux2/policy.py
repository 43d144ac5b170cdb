"""FLUX.2 [dev] (32 B) behind the `FlowPolicy` protocol: FLUX.2 [klein]'s policy with another
text encoder and the guidance embedding.

Where it fits: FLUX.2 [dev] and [klein] share the transformer class, the VAE with its batch-norm
latent normalisation, the 2x2 patchify (stored unpatchified), the 4-axis position ids and the
empirical shift μ; all of that lives once in `models/flux2_klein/policy.py`, which this class
inherits. Loading is `Flux2Pipeline.from_pretrained`.

What differs, each checked against Flux2Pipeline on the tiny model (tests/integration/test_flux2.py):
- Prompts go through the pipeline's own `encode_prompt`: Mistral Small 3.x (Mistral3ForConditional-
  Generation) under its chat template with FLUX.2's system message, padded to
  `max_sequence_length`, the hidden states of layers 10, 20 and 30 side by side ([B, L, 3·5120]).
  That call has klein's signature, so the inherited `encode_prompts` serves both.
- The transformer is guidance-distilled (`guidance_embeds`): model.embedded_guidance (Flux2Pipeline's
  `guidance_scale`, 4 by default) goes into the guidance embedding at every step, through the
  packed families' `embedded_guidance` path.
- Flux2Pipeline has no true CFG (no negative prompt), so rollout.guidance_scale > 1 is refused
  before any prompt is encoded.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from genalign.models.base import Condition
from genalign.models.flux2_klein.policy import Flux2KleinPolicy
from genalign.models.spec import FamilySpec

SPEC = FamilySpec(
    name="flux2",
    policy="genalign.models.flux2.policy:Flux2Policy",
    package="genalign.models.flux2",
    pipeline_class="Flux2Pipeline",
    guidance_embedding=True,
    split_cfg=False,
    differentiable_decode=True,
    tiny_builder="genalign.models.flux2.tiny:build_tiny_flux2_pipeline",
)
"""FLUX.2 [dev]: FLUX.2's geometry (16 pixels per token), the distilled-guidance embedding, no CFG."""
NO_CFG = (
    "{setting}: FLUX.2 [dev] is guidance-distilled and Flux2Pipeline has no true CFG; set rollout.guidance_scale=1 "
    "(and eval.guidance_scale) and the guidance strength with model.embedded_guidance (the pipeline's "
    "guidance_scale, 4 by default)"
)


def check_processor_backend(path: str | Path) -> None:
    """Refuse, before any weight loads, a checkpoint whose `tokenizer` is a PixtralProcessor
    (the published FLUX.2 [dev]'s: a Hub id is taken to be it) when torchvision is missing:
    transformers loads that class only with torchvision, and diffusers would load the 32 B
    transformer first and fail after."""
    from diffusers.utils import is_torchvision_available

    index = Path(path).expanduser() / "model_index.json"
    tokenizer_class = json.loads(index.read_text()).get("tokenizer", [None, None])[1] if index.is_file() else None
    if (tokenizer_class == "PixtralProcessor" or not index.is_file()) and not is_torchvision_available():
        raise ImportError(
            f"model.path={path}: FLUX.2 [dev]'s tokenizer is a PixtralProcessor, which transformers loads "
            "only with torchvision: install torchvision (pip install 'genalign[flux2]')"
        )


def text_tokenizer(component):
    """The text tokenizer of the pipeline's `tokenizer` component: a processor's `.tokenizer`,
    or the component itself when it is a tokenizer (None stays None)."""
    return getattr(component, "tokenizer", component)


class Flux2Policy(Flux2KleinPolicy):
    """FLUX.2 [dev]: the Flux2 MMDiT with its guidance embedding; Mistral3 encodes; the FLUX.2 VAE."""

    spec = SPEC
    family = SPEC.name
    display_name = "FLUX.2 [dev]"
    diffusers_pipeline = SPEC.pipeline_class
    tokenizer_names = ()
    """The published `tokenizer` is a PixtralProcessor (no length of its own; the tiny pipeline's
    is its text half, a tokenizer): `tokenizers` is the text tokenizer of either, checked in
    `__init__`."""

    def __init__(self, pipeline, device: torch.device, dtype: torch.dtype, *args, **kwargs):
        tokenizer = text_tokenizer(getattr(pipeline, "tokenizer", None))
        if tokenizer is None or len(tokenizer) == 0:
            raise ValueError(
                "tokenizer of the FLUX.2 [dev] pipeline is missing or empty (an offline load of a repo that "
                "is not cached?); check model.path"
            )
        super().__init__(pipeline, device, dtype, *args, **kwargs)

    @classmethod
    def from_config(cls, cfg):
        check_processor_backend(cfg.path)
        return super().from_config(cfg)

    @classmethod
    def from_pretrained(cls, path, **kwargs):
        check_processor_backend(path)
        return super().from_pretrained(path, **kwargs)

    @property
    def tokenizers(self) -> list:
        return [text_tokenizer(self.pipeline.tokenizer)]

    @torch.no_grad()
    def encode_prompts(self, prompts: list[str], with_negative: bool) -> Condition:
        """The pipeline's `encode_prompt`: embeds [B, max_sequence_length, 3·D] (Mistral3's layers
        10, 20, 30); no negative: Flux2Pipeline has no true CFG."""
        if with_negative:
            raise ValueError(NO_CFG.format(setting="a guidance_scale > 1 (rollout or eval)"))
        return Condition(embeds=self._encode(prompts))

    def check_cfg(self, guidance_scale: float) -> None:
        if guidance_scale > 1:
            raise ValueError(NO_CFG.format(setting=f"rollout.guidance_scale={guidance_scale}"))
