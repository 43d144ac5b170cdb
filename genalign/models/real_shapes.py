"""A model family at a real model's shapes with random weights, built on the device from the
shipped architecture file: what GPU benchmarks run where the weights cannot be downloaded
(`benchmarks/gpu_suite.py`, `benchmarks/bench_gpu_step.py`).

How: the family's tiny model (`FamilySpec.build_tiny`) gives everything that holds no weights
(the in-memory tokenizers, the scheduler, Janus-Pro's processor and generation config, the
pipeline class); every weight-bearing component is then rebuilt from a config with fresh
random weights, directly on `device` in `dtype` (the VAE in float32), so a 20 B-parameter
transformer builds in seconds on a GPU. The configs are the published ones of the model
(`real_components`: the file in the family's `architectures/` folder that the memory plan
reads for the same hub id), or, for a smoke test on the CPU, the tiny model's own
(`own_components`): the same code path at tiny shapes. The tiny tokenizers pad and truncate to
the lengths the recipe asks for, so the text encoders and the transformer see the real
sequence lengths; their ids are a subset of every real vocabulary.
"""

from __future__ import annotations

import torch

from genalign.models.architecture import GENALIGN, WEIGHT_LIBRARIES, architecture_source, build_component
from genalign.models.spec import family_spec
from genalign.models.tiny_random import building

FLOAT32_COMPONENTS = ("vae",)
"""Components built in float32 whatever the compute dtype (the policies decode in float32)."""


def real_components(family: str, path: str) -> dict[str, dict]:
    """{component: {library, class, config}} of the model `path` names (a hub id with a shipped
    architecture file, or a local `save_pretrained` directory), as the memory plan reads it."""
    spec = family_spec(family)
    found = architecture_source(spec, path)
    if found is None:
        raise ValueError(
            f"model.path={path!r}: no architecture file in {spec.folder}/architectures/ describes it "
            f"for model.family={family} (and it is not a local save_pretrained directory)"
        )
    return found[0]


def own_components(loaded) -> dict[str, dict]:
    """{component: {library, class, config}} of an already built model's weight-bearing parts:
    a diffusers pipeline's components, or the `model` of a transformers bundle (Janus-Pro)."""
    parts = loaded.components if hasattr(loaded, "components") else {"model": loaded.model}
    out = {}
    for name, module in parts.items():
        if not isinstance(module, torch.nn.Module):
            continue  # tokenizers, schedulers, a guardrail stand-in
        library = type(module).__module__.split(".")[0]
        config = dict(module.config) if library == "diffusers" else module.config.to_dict()
        config = {k: v for k, v in config.items() if k not in ("dtype", "torch_dtype", "transformers_version")}
        # a model genalign implements is named by its import path (`build_component`)
        name_of = f"{type(module).__module__}:{type(module).__name__}" if library == GENALIGN else type(module).__name__
        out[name] = {"library": library, "class": name_of, "config": config}
    return out


def build_with_components(
    family: str,
    components: dict[str, dict],
    device: str | torch.device,
    dtype: torch.dtype,
    seed: int = 0,
    path: str | None = None,
):
    """The family's tiny model with each weight-bearing part replaced by one built from
    `components` (random weights from `seed`, on `device` in `dtype`, the VAE in float32). A
    diffusers pipeline is rebuilt with the new components; a composite transformers model
    (Janus-Pro's one class, which the architecture file splits into `parts`) replaces the
    bundle's `model` and keeps the tiny generation config (its token ids are the tokenizer's).
    `path`: the hub id whose form the tiny model takes (`FamilySpec.tiny_variants`: its pipeline
    config and scheduler, e.g. Wan 2.2 A14B's boundary_ratio, come with it)."""
    loaded = family_spec(family).build_tiny(seed, path)
    built = {}
    for index, (name, entry) in enumerate(components.items()):
        if entry["library"] not in WEIGHT_LIBRARIES:
            continue
        with building(device, torch.float32 if name in FLOAT32_COMPONENTS else dtype):
            torch.manual_seed(seed + index)
            built[name] = build_component(entry["library"], entry["class"], dict(entry["config"])).eval()
    if hasattr(loaded, "components"):  # a diffusers pipeline, with its own config (boundary_ratio, ...)
        settings = {
            k: v for k, v in loaded.config.items() if not k.startswith("_") and not isinstance(v, (list, tuple))
        }
        return type(loaded)(**{**loaded.components, **built}, **settings)
    if len(built) != 1:
        raise ValueError(f"model.family={family}: expected one composite model to replace, got {sorted(built)}")
    (model,) = built.values()
    if hasattr(loaded, "with_model"):  # a bundle that swaps its model itself (NextStep-1's)
        return loaded.with_model(model)
    model.generation_config = loaded.model.generation_config
    return type(loaded)(model, loaded.processor)


def build_real_shapes(family: str, path: str, device: str | torch.device, dtype: torch.dtype, seed: int = 0):
    """`family`'s model at the shapes of `path` (its published configs) with random weights."""
    return build_with_components(family, real_components(family, path), device, dtype, seed, path)
