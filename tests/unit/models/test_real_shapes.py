"""models/real_shapes.py: every family with a shipped architecture file assembles at its real
shapes (on the meta device: no memory), each part counted as the memory plan counts it, and the
tiny model rebuilt from its own configs through the same path is the tiny model's shape."""

import pytest
import torch

from genalign.models.architecture import TRANSFORMER, load_architecture
from genalign.models.real_shapes import build_real_shapes, build_with_components, own_components, real_components
from genalign.models.registry import MODEL_FAMILIES
from genalign.models.spec import family_spec

SHIPPED = sorted(
    (name, file.stem.replace("--", "/"))
    for name in MODEL_FAMILIES.names()
    for spec in [family_spec(name)]
    if spec.tiny_builder
    for file in spec.architecture_files()
)
"""(family, hub id) of every architecture file in the folder of a family built at random: a file
or family added later is tested too. The toy demo's file describes the shipped model itself (its
real weights are loaded, never rebuilt at random; tests/unit/preflight/test_memory_plan.py checks
the file against them), so its family declares no tiny builder."""


def _numel(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _trained(loaded) -> torch.nn.Module:
    """The plan's `transformer`: a pipeline's transformer, NextStep-1's whole model (decoder and
    flow head: the file's one component), or Janus' language model."""
    if hasattr(loaded, "transformer"):
        return loaded.transformer
    return loaded.model if hasattr(loaded, "with_model") else loaded.model.model.language_model


@pytest.mark.parametrize("family,path", SHIPPED, ids=[hub for _, hub in SHIPPED])
def test_real_shapes_match_the_architecture_file(family, path):
    loaded = build_real_shapes(family, path, "meta", torch.bfloat16)
    tiny = family_spec(family).build_tiny(0)
    assert type(loaded) is type(tiny)
    arch = load_architecture(family_spec(family), path)
    assert _numel(_trained(loaded)) == arch.component(TRANSFORMER).parameters
    assert next(_trained(loaded).parameters()).dtype == torch.bfloat16
    if hasattr(loaded, "components"):  # every pipeline part has the file's size; the VAE is float32
        for part in arch.components:
            assert _numel(getattr(loaded, part.name)) == part.parameters, part.name
        assert next(loaded.vae.parameters()).dtype == torch.float32
        assert loaded.tokenizer is not None and type(loaded.scheduler) is type(tiny.scheduler)
    elif hasattr(loaded, "with_model"):  # NextStep-1: its model beside the tiny tokenizer's ids and VAE
        assert loaded.config["boi"] == tiny.config["boi"] and type(loaded.vae) is type(tiny.vae)
    else:  # Janus-Pro: the whole composite model, with the tokenizer's generation ids
        assert _numel(loaded.model) == sum(part.parameters for part in arch.components)
        assert loaded.model.generation_config.bos_token_id == tiny.model.generation_config.bos_token_id
        assert loaded.processor is not None


@pytest.mark.parametrize("family", ["sd3", "janus", "nextstep"])
def test_the_tiny_model_rebuilt_from_its_own_configs_has_its_shapes(family):
    tiny = family_spec(family).build_tiny(0)
    rebuilt = build_with_components(family, own_components(tiny), "cpu", torch.float32, seed=1)
    for name in own_components(tiny):
        before, after = getattr(tiny, name), getattr(rebuilt, name)
        assert type(after) is type(before)
        assert {k: v.shape for k, v in after.state_dict().items()} == {
            k: v.shape for k, v in before.state_dict().items()
        }


def test_a_path_without_an_architecture_file_is_a_clear_error():
    with pytest.raises(ValueError, match="no architecture file"):
        real_components("sd3", "someone/unknown-model")


def test_sd3_5_large_file_counts_its_published_size():
    """SD3.5 Large: an 8.1 B-parameter MMDiT (38 blocks of width 2432) over SD3.5 Medium's encoders and VAE."""
    large = load_architecture(family_spec("sd3"), "stabilityai/stable-diffusion-3.5-large")
    medium = load_architecture(family_spec("sd3"), "stabilityai/stable-diffusion-3.5-medium")
    assert large.component(TRANSFORMER).parameters == pytest.approx(8.06e9, rel=0.01)
    assert (large.hidden_size, large.num_layers) == (2432, 38)
    assert [c for c in large.components if c.name != TRANSFORMER] == [
        c for c in medium.components if c.name != TRANSFORMER
    ]
