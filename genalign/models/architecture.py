"""Model sizes without loading weights: each component built on the meta device from its config.

Where it fits: the memory plan (`preflight/memory_plan.py`) needs parameter counts before any
model loads. They come from the model's own configs: `model.path` when it is a local
`save_pretrained` directory (`model_index.json` names each component's library and class,
`<component>/config.json` its architecture), else the architecture file the family ships for
the hub id in its folder, `models/<family>/architectures/` (the published config.json of each
component, one small JSON per preset; the family's `FamilySpec` finds them). Either way the
real diffusers / transformers class is instantiated on the `meta` device, so a count is the
model's own `numel`, not a formula we keep in sync by hand.

A composite model (Janus-Pro's `JanusForConditionalGeneration`) is built once and split by
the file's `parts` (plan component -> submodule path): its language model is the plan's
`transformer`, the rest keeps the file's component name.

An architecture file also carries the family's token `geometry` (VAE factors, patch, whether
text tokens run through the joint-attention blocks), which turns an image size into the
transformer's sequence length; a local directory takes the geometry of its family's first
shipped file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from genalign.models.spec import FamilySpec

TRANSFORMER = "transformer"
GENALIGN = "genalign"
"""The library name of a component genalign builds itself (`build_component`)."""
WEIGHT_LIBRARIES = ("diffusers", "transformers", GENALIGN)
"""Libraries whose components hold weights (tokenizers and schedulers do not)."""
DENOISER = re.compile(r"^transformer(_\d+)?$")
"""Component names of the denoiser's models: `transformer`, and the further experts diffusers
names `transformer_2` (Wan 2.2 A14B's low-noise expert)."""


@dataclass(frozen=True)
class Geometry:
    """How an image or video size becomes transformer tokens."""

    spatial_factor: int
    """VAE downsampling per side (8 for every shipped family)."""
    temporal_factor: int
    """VAE frame downsampling: latent frames = (frames - 1) // temporal_factor + 1 (1 for images)."""
    patch: tuple[int, int, int]
    """Transformer patch (frames, height, width) over the latent."""
    text_in_sequence: bool
    """Text tokens run through every block beside the image tokens (joint attention: SD3,
    FLUX, Qwen-Image); False = the text enters by cross-attention only (Wan, Cosmos)."""
    extra_text_tokens: int
    """Text tokens beyond model.max_sequence_length (SD3's 77 CLIP tokens)."""
    text_width_key: str | None
    """The transformer config key giving the width of one stored prompt-embedding token
    (joint_attention_dim; Wan text_dim; Cosmos the concatenated Qwen2.5-VL layers); None when
    the stored condition is token ids (Janus: bytes per prompt, not counted)."""
    kv_cache: bool = False
    """Token-autoregressive sampling: the rollout keeps a key-value cache over prompt + image
    tokens (Janus-Pro); False = a denoiser's forward over the whole sequence each step."""
    fixed_text_tokens: int | None = None
    """The prompt's length whatever model.max_sequence_length says (the toy's two lookup
    tokens, colour and shape); None: model.max_sequence_length + extra_text_tokens."""
    source_images: int = 0
    """Source images whose tokens run beside the target's, each as many as the target's at the
    run's size (FLUX.1 Kontext: 1, its sequence is [target, source]); 0 for text-conditioned."""

    def text_tokens(self, max_sequence_length: int) -> int:
        """Text tokens of one prompt."""
        if self.fixed_text_tokens is not None:
            return self.fixed_text_tokens
        return max_sequence_length + self.extra_text_tokens

    def image_tokens(self, height: int, width: int, frames: int) -> int:
        """Transformer image tokens of one sample."""
        latent_frames = (frames - 1) // self.temporal_factor + 1
        pt, ph, pw = self.patch
        return (latent_frames // pt) * (height // self.spatial_factor // ph) * (width // self.spatial_factor // pw)


@dataclass(frozen=True)
class ComponentSize:
    name: str
    """The pipeline attribute (transformer, text_encoder, vae, ...)."""
    parameters: int
    buffer_elements: int
    """Floating buffers (position tables): held at the component's dtype."""


@dataclass(frozen=True)
class Architecture:
    """What the memory plan reads about a model."""

    family: str
    source: str
    """Where the configs came from (a local directory or the shipped file)."""
    components: tuple[ComponentSize, ...]
    geometry: Geometry
    hidden_size: int
    """The transformer's width (heads x head dim)."""
    num_layers: int
    """The transformer's blocks (FLUX: double + single stream)."""
    text_width: int
    """Width of one stored prompt-embedding token (`Geometry.text_width_key`)."""
    latent_channels: int
    """The VAE's latent channels (`latent_channels`, or `z_dim` for the Wan-style VAEs)."""
    linear_shapes: tuple[tuple[str, int, int], ...]
    """(module name, in_features, out_features) of every nn.Linear in the transformer: LoRA's
    targets are chosen among them."""
    kv_heads: int = 0
    """Key-value heads of the transformer's attention (a token family's KV cache; 0 otherwise)."""
    head_dim: int = 0
    """Width of one attention head (a token family's KV cache; 0 otherwise)."""
    denoisers: tuple[str, ...] = (TRANSFORMER,)
    """The denoiser's models (`transformer`, and `transformer_2` for two experts); every one has
    the transformer's architecture (`load_architecture` checks), so `linear_shapes` and the
    width describe each."""

    def component(self, name: str) -> ComponentSize:
        return next(c for c in self.components if c.name == name)


def shipped_file(spec: FamilySpec, path: str) -> Path | None:
    """The architecture file `spec`'s family ships for hub id `path` (owner/name ->
    `architectures/owner--name.json` in the family's folder), or None."""
    name = path.replace("/", "--") + ".json"
    return next((file for file in spec.architecture_files() if file.name == name), None)


def architecture_source(spec: FamilySpec, path: str, builtin: bool = False) -> tuple[dict, dict, str] | None:
    """(components {name: {library, class, config}}, geometry, source) for a model of `spec`'s
    family, or None when nothing describes it. Looked for in turn: the family's first shipped
    file when `path` names the weights shipped inside genalign (`builtin`: the toy's), a local
    directory, the file the family ships for a hub id, the hub id's configs in the Hugging Face
    cache (no network)."""
    family_file = next(iter(spec.architecture_files()), None)
    family_body = json.loads(family_file.read_text()) if family_file is not None else None
    if builtin:
        return (
            (family_body["components"], family_body["geometry"], f"{family_file.name} ({family_body['source']})")
            if family_body
            else None
        )
    shipped = shipped_file(spec, path)
    if not Path(path).exists() and shipped is not None:
        body = json.loads(shipped.read_text())
        return body["components"], body["geometry"], f"{shipped.name} ({body['source']})"
    directory = Path(path) if Path(path).is_dir() else _cached_snapshot(path)
    if directory is None or family_body is None:
        return None
    components = _directory_components(directory, family_body["components"])
    if not any(name == TRANSFORMER or TRANSFORMER in entry.get("parts", {}) for name, entry in components.items()):
        return None
    return components, family_body["geometry"], str(directory)


def _directory_components(local: Path, family_components: dict) -> dict:
    """The components a directory's configs describe: every `model_index.json` entry with a
    `<name>/config.json`; without an index (a transformers model, the toy, NextStep-1), the family
    file's components whose config is in the directory (a composite's at `config.json`, another
    at its entry's `config_file`, else `<name>/config.json`)."""
    if (local / "model_index.json").is_file():
        index = json.loads((local / "model_index.json").read_text())
        return {
            name: {"library": entry[0], "class": entry[1], "config": json.loads(config.read_text())}
            for name, entry in index.items()
            if not name.startswith("_")
            and isinstance(entry, list)
            and (config := local / name / "config.json").is_file()
        }
    found = {}
    for name, spec in family_components.items():
        # a composite's config (or one the family file places with `config_file`) is at the root
        config = local / spec.get("config_file", "config.json" if "parts" in spec else f"{name}/config.json")
        if config.is_file():
            found[name] = {**spec, "config": json.loads(config.read_text())}
    return found


def _cached_snapshot(path: str) -> Path | None:
    """The Hugging Face cache's snapshot of hub id `path`, when its index or config is there."""
    if path.count("/") != 1:
        return None
    from huggingface_hub import try_to_load_from_cache

    for name in ("model_index.json", "config.json"):
        cached = try_to_load_from_cache(path, name)
        if isinstance(cached, str):
            return Path(cached).parent
    return None


def build_component(library: str, class_name: str, config: dict):
    """The component's real diffusers / transformers class instantiated from its config, with
    freshly initialised weights on the current default device and dtype (`torch.device(...)`
    and `torch.set_default_dtype` around the call choose them). Library "genalign": a model no
    library ships, implemented by a family of genalign (NextStep-1), named "genalign.module:Class"
    and built by the class's `from_config(config)`."""
    config = {k: v for k, v in config.items() if not k.startswith("_")}
    if library == GENALIGN:
        module_name, _, attr = class_name.partition(":")
        if not module_name.startswith("genalign.") or not attr:
            raise ValueError(f"library genalign: class {class_name!r} is not 'genalign.<module>:<Class>'")
        import importlib

        return getattr(importlib.import_module(module_name), attr).from_config(config)
    if library == "diffusers":
        import diffusers

        return getattr(diffusers, class_name).from_config(config)
    import transformers

    model_type = config.pop("model_type")
    return getattr(transformers, class_name)(transformers.AutoConfig.for_model(model_type, **config))


def build_on_meta(library: str, class_name: str, config: dict):
    """The component's real class instantiated on the meta device (no memory, no weights)."""
    import torch

    with torch.device("meta"):
        return build_component(library, class_name, config)


def transformer_shape(module) -> tuple[int, int, int, int]:
    """(hidden size, blocks, key-value heads, head dim) of the trained transformer from its
    config: a diffusers transformer (heads x attention_head_dim; FLUX's double + single blocks),
    a single-stream one configured as Lumina's (dim, n_heads, n_layers; Z-Image: its two
    refiners, n_refiner_layers each over the image's and the text's tokens, counted as blocks
    over the whole sequence, an upper bound) or a transformers decoder (hidden_size,
    num_hidden_layers, num_key_value_heads)."""
    config = module.config
    if hasattr(config, "n_heads") and hasattr(config, "dim"):
        layers = int(config.n_layers) + 2 * int(getattr(config, "n_refiner_layers", 0) or 0)
        return int(config.dim), layers, int(config.n_kv_heads), int(config.dim) // int(config.n_heads)
    if hasattr(config, "attention_head_dim"):
        hidden = int(config.num_attention_heads * config.attention_head_dim)
        layers = int(config.num_layers) + int(getattr(config, "num_single_layers", 0) or 0)
        return hidden, layers, int(config.num_attention_heads), int(config.attention_head_dim)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
    return int(config.hidden_size), int(config.num_hidden_layers), int(config.num_key_value_heads), head_dim


def _parts(module, name: str, parts: dict[str, str]) -> list[tuple[str, object | None]]:
    """A composite model split into the memory plan's components: each named part is the
    submodule at its dotted path; `name` keeps the rest (heads, aligners, embeddings), None
    marking it to be counted as the whole minus the parts."""
    from operator import attrgetter

    return [(part, attrgetter(path)(module)) for part, path in parts.items()] + [(name, None)]


def _size(name: str, module, whole=None, parts=()) -> "ComponentSize":
    def count(m):
        return (sum(p.numel() for p in m.parameters()), sum(b.numel() for b in m.buffers() if b.is_floating_point()))

    if whole is None:
        return ComponentSize(name, *count(module))
    params, buffers = count(whole)
    for part in parts:
        params, buffers = params - part.parameters, buffers - part.buffer_elements
    return ComponentSize(name, params, buffers)


@lru_cache(maxsize=16)
def load_architecture(spec: FamilySpec, path: str, builtin: bool = False) -> Architecture | None:
    """The sizes of `spec`'s family's model at `path` (None: no config describes it; `builtin`:
    the path names weights shipped inside genalign); cached, so a plan built twice builds the
    meta modules once."""
    import torch

    found = architecture_source(spec, path, builtin)
    if found is None:
        return None
    components, geometry, source = found
    vae = components.get("vae", {}).get("config", {})
    # a token family has no VAE latent: its file says latent_channels 0 (trajectories keep token ids)
    latent_channels = vae.get("latent_channels", vae.get("z_dim", geometry.get("latent_channels")))
    if latent_channels is None:
        raise ValueError(f"{source}: the vae config gives neither latent_channels nor z_dim")
    geometry = Geometry(
        # a Wan-style VAE's config states its factors (Wan 2.2's 16): a local directory's wins over the family file's
        int(vae.get("scale_factor_spatial", geometry["spatial_factor"])),
        int(vae.get("scale_factor_temporal", geometry["temporal_factor"])),
        tuple(geometry["patch"]),
        geometry["text_in_sequence"],
        geometry["extra_text_tokens"],
        geometry["text_width_key"],
        bool(geometry.get("kv_cache", False)),
        geometry.get("fixed_text_tokens"),
        int(geometry.get("source_images", 0)),
    )
    sizes, linears, shape, text_width = [], (), (0, 0, 0, 0), 0
    denoisers = tuple(name for name in components if DENOISER.match(name))
    for name in denoisers:
        if (components[name]["class"], components[name]["config"]) != (
            components[TRANSFORMER]["class"],
            components[TRANSFORMER]["config"],
        ):
            raise ValueError(f"{source}: {name} is not the transformer's architecture; the plan counts experts alike")
    for name, entry in components.items():
        if entry["library"] not in WEIGHT_LIBRARIES:
            continue  # tokenizers, schedulers: no weights
        built = build_on_meta(entry["library"], entry["class"], dict(entry["config"]))
        split = _parts(built, name, entry["parts"]) if "parts" in entry else [(name, built)]
        own = []
        for part, module in split:
            own.append(_size(part, module) if module is not None else _size(part, None, built, own))
            if part == TRANSFORMER:
                shape = transformer_shape(module)
                if geometry.text_width_key is not None:
                    text_width = int(getattr(module.config, geometry.text_width_key))
                linears = tuple(
                    (n, m.in_features, m.out_features)
                    for n, m in module.named_modules()
                    if isinstance(m, torch.nn.Linear)
                )
        sizes += own
    hidden, layers, kv_heads, head_dim = shape
    return Architecture(
        spec.name,
        source,
        tuple(sizes),
        geometry,
        hidden,
        layers,
        text_width,
        int(latent_channels),
        linears,
        kv_heads,
        head_dim,
        denoisers or (TRANSFORMER,),
    )


def decoder_gradient_bytes(spec: FamilySpec, path: str, builtin: bool, rows: int, height: int, width: int) -> float:
    """Float32 bytes autograd keeps decoding `rows` latents of a `height` x `width` image with
    grad (reward feedback: the decoder frozen, the gradient to the latents): the VAE's real
    class built on the meta device and run through `saved_tensor_bytes`; 0 for a family
    without a VAE (the toy: its latents are the pixels)."""
    found = architecture_source(spec, path, builtin)
    if found is None or "vae" not in found[0]:
        return 0.0
    entry, factor = found[0]["vae"], int(found[1]["spatial_factor"])
    return _decoder_gradient_bytes(json.dumps(entry, sort_keys=True), rows, height // factor, width // factor)


@lru_cache(maxsize=16)
def _decoder_gradient_bytes(entry_json: str, rows: int, latent_height: int, latent_width: int) -> float:
    import torch

    from genalign.models.saved_tensors import saved_tensor_bytes  # lazy: imports torch (CLI start-up)

    entry = json.loads(entry_json)
    vae = build_on_meta(entry["library"], entry["class"], dict(entry["config"]))
    channels = int(entry["config"].get("latent_channels", entry["config"].get("z_dim", 4)))
    latents = torch.empty(rows, channels, latent_height, latent_width, device="meta")
    return saved_tensor_bytes(vae, lambda z: vae.decode(z, return_dict=False)[0], latents)


def lora_parameters(linear_shapes: tuple[tuple[str, int, int], ...], targets: list[str], rank: int) -> int:
    """Parameters of a rank-`rank` LoRA on every Linear whose name is a target or ends with
    `.target` (peft's suffix match): r (in + out) each."""
    return sum(
        rank * (fan_in + fan_out)
        for name, fan_in, fan_out in linear_shapes
        if any(name == t or name.endswith("." + t) for t in targets)
    )
