"""Every registered model family with random weights, as a user's family the trainer loads.

    overrides = random_family_overrides("sd3", "real")   # or "tiny"
    cfg = load_config(recipe, [*recipe_overrides, *overrides])

A benchmark cannot download weights, so it runs each family's real training code over a model
built in memory: `model.family` becomes the dotted path of a `FamilySpec` in this module
(docs/extending.md: a user's family, allowed by `model.allow_import`) that is the registered
family's spec with one change, its policy class: a subclass of the family's own whose
`from_config` builds the model instead of loading it and hands it to the family's
`from_loaded`. Everything else — prompt encoding, sampling, replay, LoRA, the trainer — is the
family's and the trainer's own code.

- "real": the model at the shapes of `model.path`'s published configs
  (`models/real_shapes.py`, the shipped architecture file), on `model.device` in `model.dtype`;
- "tiny": the family's tiny model (of `model.path`'s form where the family ships one,
  `FamilySpec.tiny_variants`) rebuilt from its own configs through the same code path (the CPU
  smoke test of a benchmark).

The names are `SPEC_<family>__<shapes>` and `Policy_<family>__<shapes>`, made on first use
(PEP 562 module `__getattr__`), so a family registered later is covered without an edit here.
A family whose spec names shipped weights (`builtin_path`, the toy demo) needs none of this:
its recipe runs as it is.
"""

from __future__ import annotations

import dataclasses
import functools

SHAPES = ("real", "tiny")


def random_family_overrides(family: str, shapes: str) -> list[str]:
    """The overrides that make a recipe of `family` load its random-weight model."""
    if shapes not in SHAPES:
        raise ValueError(f"shapes={shapes!r}: choose one of {SHAPES}")
    target = f"{__name__}:SPEC_{family}__{shapes}"
    return [f"model.family={target}", f"model.allow_import=[{target}]"]


def __getattr__(name: str):
    kind, _, rest = name.partition("_")
    family, _, shapes = rest.rpartition("__")
    if kind not in ("SPEC", "Policy") or shapes not in SHAPES or not family:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _spec(family, shapes) if kind == "SPEC" else _policy_class(family, shapes)


@functools.cache
def _spec(family: str, shapes: str):
    from genalign.models.spec import family_spec

    spec = dataclasses.replace(family_spec(family), policy=f"{__name__}:Policy_{family}__{shapes}")
    # at tiny shapes the model is the tiny builder's, not model.path's published one: a size rule
    # read from model.path's configs (HunyuanVideo 1.5 I2V's size buckets of its target_size)
    # would judge another model; the policy checks the loaded model's own rule when it loads
    return dataclasses.replace(spec, size_rule=None) if shapes == "tiny" else spec


@functools.cache
def _policy_class(family: str, shapes: str) -> type:
    from genalign.models.base import resolve_device, resolve_dtype
    from genalign.models.real_shapes import build_real_shapes, build_with_components, own_components
    from genalign.models.spec import family_spec

    spec = family_spec(family)
    base = spec.policy_class()
    if not hasattr(base, "from_loaded"):
        raise TypeError(
            f"model family {family!r}: its policy {base.__name__} has no from_loaded(model, cfg), so "
            "a benchmark cannot hand it a model built in memory"
        )

    def from_config(cls, cfg):
        device, dtype = resolve_device(cfg.device), resolve_dtype(cfg.dtype)
        if shapes == "real":
            loaded = build_real_shapes(family, cfg.path, device, dtype)
        else:
            tiny = spec.build_tiny(0, cfg.path)  # the form of model.path (Wan 2.2's), else the family's
            loaded = build_with_components(family, own_components(tiny), device, dtype, path=cfg.path)
        return cls.from_loaded(loaded, cfg)

    return type(
        f"Random{base.__name__}",
        (base,),
        {"from_config": classmethod(from_config), "__module__": __name__, "spec": _spec(family, shapes)},
    )
