"""What a scorer keeps on its device, counted before anything loads.

Where it fits: the memory plan (`preflight/memory_plan.py`) counts reward models where their
runtime puts them (the trainer's GPU for `reward.runtime=local`). Each scorer's options declare
the models the scorer moves to its device (`device_models()`: the option that names each one,
where it comes from, its dtype); this module counts their parameters with the real classes
built on the meta device, from
- a local directory's `config.json` (what `from_pretrained` would read),
- the file shipped for a hub id in `rewards/architectures/` (the published architecture, its
  source named in the file), or a hub id's `config.json` already in the Hugging Face cache,
- a safetensors file's header (weights without a config: the toy classifiers), read without
  loading a tensor.
A model none of them describes is a `RewardModelUnknown` naming the option.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ARCHITECTURES = Path(__file__).parent / "architectures"
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


class RewardModelUnknown(ValueError):
    """No config describes a reward model, so its size cannot be counted."""


@dataclass(frozen=True)
class DeviceModel:
    """One model a scorer holds on its device."""

    key: str
    """The option that names it (`reward.kwargs.<reward>.<key>`), for messages."""
    source: str
    """A hub id, a local `save_pretrained` directory, or a `.safetensors` file."""
    dtype: str
    """The dtype the scorer keeps it in (a component may fix its own: a float32 head)."""
    class_name: str = "AutoModel"
    """The transformers class the scorer loads, for a local directory's config."""


@dataclass(frozen=True)
class ModelSize:
    what: str
    """The model (and component) counted, as where its count came from."""
    elements: int
    """Parameters and floating buffers."""
    dtype: str

    @property
    def bytes(self) -> float:
        return float(self.elements * DTYPE_BYTES[self.dtype])


def shipped_reward_file(source: str) -> Path:
    """The architecture file shipped for hub id `source` (owner/name -> owner--name.json)."""
    return ARCHITECTURES / (source.replace("/", "--") + ".json")


def model_sizes(reward: str, model: DeviceModel) -> list[ModelSize]:
    """The sizes of `model`'s components; `RewardModelUnknown` when nothing describes it."""
    path = Path(model.source).expanduser()
    if model.source.endswith(".safetensors"):
        if not path.is_file():
            raise RewardModelUnknown(f"reward.kwargs.{reward}.{model.key}={model.source!r}: no such file to count")
        return [ModelSize(path.name, safetensors_elements(str(path)), model.dtype)]
    config = _config_file(path, model.source)
    if config is not None:
        spec = {"library": "transformers", "class": model.class_name, "config": json.loads(config.read_text())}
        return [ModelSize(str(config.parent), _elements(json.dumps(spec)), model.dtype)]
    shipped = shipped_reward_file(model.source)
    if not shipped.is_file():
        raise RewardModelUnknown(
            f"reward.kwargs.{reward}.{model.key}={model.source!r}: no config describes this model (not a local "
            f"directory with config.json, not in the Hugging Face cache, no file in genalign/rewards/architectures/)"
        )
    components = json.loads(shipped.read_text())["components"]
    return [
        ModelSize(
            model.source if len(components) == 1 else f"{model.source} {name}",
            _elements(json.dumps(spec)),
            spec.get("dtype", model.dtype),
        )
        for name, spec in components.items()
    ]


def image_gradient_bytes(reward: str, model: DeviceModel, rows: int) -> float | None:
    """Float32 bytes autograd keeps for backward when `rows` images go through `model`'s image
    tower with grad (reward feedback back-propagates the score into the pixels): each
    component with an image forward (`get_image_features`, a CLIP-style model) is built on the
    meta device and run on its own input size with saved-tensor hooks counting what it keeps
    (weights excluded: they are counted once as the model). None: no component of it has an
    image forward the plan knows (the caller names it as not counted)."""
    path = Path(model.source).expanduser()
    if model.source.endswith(".safetensors"):
        return None
    config = _config_file(path, model.source)
    if config is not None:
        specs = [{"library": "transformers", "class": model.class_name, "config": json.loads(config.read_text())}]
    elif shipped_reward_file(model.source).is_file():
        specs = list(json.loads(shipped_reward_file(model.source).read_text())["components"].values())
    else:
        return None
    sizes = [_image_gradient_bytes(json.dumps(spec), rows) for spec in specs]
    known = [size for size in sizes if size is not None]
    return sum(known) if known else None


@lru_cache(maxsize=32)
def _image_gradient_bytes(spec_json: str, rows: int) -> float | None:
    import torch

    from genalign.models.saved_tensors import saved_tensor_bytes  # lazy: imports torch (CLI start-up)

    spec = json.loads(spec_json)
    with torch.device("meta"):
        module = _build(spec["library"], spec["class"], dict(spec["config"]), spec.get("init", {}))
    vision = getattr(getattr(module, "config", None), "vision_config", None)
    if not hasattr(module, "get_image_features") or vision is None:
        return None
    size = int(vision.image_size)
    pixels = torch.empty(rows, int(getattr(vision, "num_channels", 3)), size, size, device="meta")
    return saved_tensor_bytes(module, lambda x: module.get_image_features(pixel_values=x), pixels)


def _config_file(path: Path, source: str) -> Path | None:
    """A local directory's config.json, else a hub id's in the Hugging Face cache (no network)."""
    if (path / "config.json").is_file():
        return path / "config.json"
    if path.exists() or source.count("/") != 1:
        return None
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(source, "config.json")
    return Path(cached) if isinstance(cached, str) else None


@lru_cache(maxsize=32)
def _elements(spec_json: str) -> int:
    """Parameters and floating buffers of one component built on the meta device (cached by
    its spec, so a plan built twice builds each model once)."""
    import torch

    spec = json.loads(spec_json)
    with torch.device("meta"):
        module = _build(spec["library"], spec["class"], dict(spec["config"]), spec.get("init", {}))
    return sum(p.numel() for p in module.parameters()) + sum(
        b.numel() for b in module.buffers() if b.is_floating_point()
    )


def _build(library: str, class_name: str, config: dict, init: dict):
    if library == "genalign":  # a head genalign defines itself (the LAION aesthetic MLP)
        module_name, attr = class_name.split(":")
        return getattr(importlib.import_module(module_name), attr)(**config)
    import transformers

    config = {k: v for k, v in config.items() if not k.startswith("_")}
    built = transformers.AutoConfig.for_model(config.pop("model_type"), **config)
    if class_name.startswith("Auto"):
        return getattr(transformers, class_name).from_config(built)
    return getattr(transformers, class_name)(built, **init)


def safetensors_elements(path: str) -> int:
    """Elements of every tensor in a safetensors file, from its JSON header alone."""
    import struct

    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    total = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        count = 1
        for size in entry["shape"]:
            count *= size
        total += count
    return total
