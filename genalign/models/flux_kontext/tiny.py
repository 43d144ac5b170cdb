"""The tiny random FLUX.1 Kontext pipeline (`SPEC.tiny_builder`).

Where it fits: the default suite saves it and loads it back through the real
`FluxKontextPolicy.from_pretrained` (`python -m genalign.models.tiny_random flux_kontext DIR`).
FLUX.1 Kontext-dev ships FLUX.1-dev's components (the same transformer class and config, CLIP-L,
T5, the VAE, the scheduler: architectures/), so its tiny model is FLUX.1's tiny components in
a `FluxKontextPipeline`.
"""

from __future__ import annotations

from genalign.models.flux.tiny import build_tiny_flux_pipeline


def build_tiny_flux_kontext_pipeline(seed: int = 0):
    """A FluxKontextPipeline with random tiny weights (fp32, CPU): the tiny FLUX.1-dev components
    (`build_tiny_flux_pipeline`, with the guidance embedding Kontext-dev has)."""
    from diffusers import FluxKontextPipeline

    flux = build_tiny_flux_pipeline(seed, guidance_embeds=True)
    return FluxKontextPipeline(**flux.components)
