"""Activation-memory calibration for the memory plan, measured on CPU.

    python benchmarks/calibrate_memory.py [--families janus ...]   (re-measure only these)
                                          [--out DIR]   (DIR/<family>.json, not the shipped files)

Each family's result is its `calibration.json`, in its folder (`genalign/models/<family>/`),
where the memory plan reads it through the family's spec.

For every diffusion family it builds the tiny pipeline (`models/<family>/tiny.py`) with its
transformer replaced by the real model's (the family's first shipped architecture file: the same
block options, width, heads, MLP and norms) cut to 2 blocks, loads it through the real `build_policy` (LoRA,
float32 masters, bfloat16 compute) and runs the policy's own `velocity` - the call rollout
and replay make - at two image sizes, so the bytes split into a per-token slope and a fixed
part; the slope divided by (blocks x width) is stored as bytes per token, per block, per
hidden unit at bfloat16, the number the plan scales by the real sequence length and depth
(`preflight/memory_plan.py`):

- replay: bytes autograd saves for backward (saved-tensor hooks, weights excluded), eager,
  with CUDA autocast's float32 list applied inside the autocast region (`CudaAutocastPolicy`:
  CPU autocast would keep LayerNorm, softmax and the like in bfloat16, the GPU does not);
- replay_compiled: the same with the repeated blocks compiled (`COMPILE_BACKEND`: inductor's
  partitioner decides what the compiled graph saves and what it recomputes);
- replay_checkpointed: live bytes after the forward with gradient checkpointing (eager);
- rollout_peak: the peak of live bytes during a no-grad forward (eager), per token per unit.

Per-token terms outside the blocks (patch embedding, final norm and projection) are divided
by 2 blocks rather than the real depth, so the coefficients err a little high; the plan's
check against the GPU measurement (docs/memory_plan.md) says by how much.

The toy demo at its real size, whole: its image size is fixed, so its slope runs over rows.

Janus-Pro (the token family) the same way on its replay call `token_log_probs`: the tiny
Janus with its language model replaced by Janus-Pro-7B's LLaMA block at its real width, cut
to 2 blocks, at two image-token counts. Its language model has no gradient checkpointing, so
`replay_checkpointed` is the block input alone (2 bytes per unit, derived, not measured).

NextStep-1 (the continuous-token family) the same way, with its flow head apart: the head walks
every image token through `HeadSampling.num_steps` steps, far more bytes per token than a
decoder block keeps, so the decoder is measured at 1 and 2 of NextStep-1-Large's blocks (the
real width and head); a block's bytes are the difference, and what stays per image token is
`replay_outside_blocks`, which the plan adds once per image token instead of per block.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import weakref
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402

from genalign.models.architecture import shipped_file, transformer_shape  # noqa: E402
from genalign.models.janus.tiny import JANUS_SHAPES, build_tiny_janus  # noqa: E402
from genalign.models.nextstep.tiny import build_tiny_nextstep  # noqa: E402
from genalign.models.spec import CALIBRATION, OUTSIDE_BLOCKS, OUTSIDE_BLOCKS_STEPS, family_spec  # noqa: E402
from genalign.models.tiny_random import save_tiny  # noqa: E402
from genalign.preflight.load import load_config  # noqa: E402
from genalign.training.setup import build_policy  # noqa: E402

FAMILIES = {
    "sd3": 64,
    "flux": 64,
    "flux_kontext": 64,
    "qwen_image": 64,
    "wan": 64,
    "cosmos": 64,
    "flux2_klein": 64,
    "flux2": 64,
    "wan_i2v": 64,
    "hunyuan_video15": 64,
    "z_image": 64,
    "qwen_image_edit": 64,
    "qwen_image_edit_plus": 64,
}
"""family -> the smaller calibration image side (the larger is twice it). FLUX.1 Kontext was
measured on its prompts without a source image; an editing family that needs one
(Qwen-Image-Edit) reads a fixed 64x64 source at both sides (`calibration_condition`): either
way a source's tokens run through the same blocks as the target's, so the bytes per token are
the same, and the plan counts both token sets. An image-to-video family's first frame (and its last
for a checkpoint that takes two: Wan 2.1 FLF2V, wan_i2v's first architecture file) is at the target's
side (its condition rides on the latents' channels, so it adds no tokens)."""
CALIBRATION_SOURCE_SIDE = 64


def calibration_condition(policy, side: int):
    """The condition every diffusion measurement runs at image side `side`: a text prompt, and
    for an image-conditioned family (`spec.source_images`) one source: an editing family's grey
    picture of a fixed side, whose tokens (and the vision tokens its text encoder reads) fall in
    the fixed term, so the slope stays per target token; an image-to-video family's first frame
    (and last, where the checkpoint takes it: `FamilySpec.source_count`) at the target's side."""
    prompts = ["a calibration prompt"]
    if not policy.spec.source_images:
        return policy.encode_prompts(prompts, with_negative=False)
    if policy.spec.media == "video":  # as many frames as the checkpoint takes (FLF2V: the first and the last)
        count = policy.spec.sources_per_prompt(policy.transformer.config) or 1
        source = torch.randint(
            0, 256, (1, count, 3, side, side), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
        )
    else:
        fixed = CALIBRATION_SOURCE_SIDE
        source = torch.full((1, 1, 3, fixed, fixed), 128, dtype=torch.uint8)
    return policy.encode_conditions(prompts, source, False)


class LiveBytes(TorchDispatchMode):
    """Bytes of the tensor storages created under the mode that are still alive, and their peak."""

    def __init__(self):
        super().__init__()
        self.live, self.peak = 0, 0
        self.refs: dict[int, int] = {}  # storage pointer -> live tensors on it

    def _track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key == 0:
            return
        if key not in self.refs:
            self.refs[key] = 0
            self.live += storage.nbytes()
            self.peak = max(self.peak, self.live)
            weakref.finalize(tensor, self._release, key, storage.nbytes())
        else:
            weakref.finalize(tensor, self._release, key, 0)
        self.refs[key] += 1

    def _release(self, key: int, nbytes: int) -> None:
        self.refs[key] -= 1
        if self.refs[key] == 0:
            del self.refs[key]
            # the storage's bytes were counted once, by whichever tensor created it
        self.live -= nbytes if nbytes else 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in tree_flatten(out)[0]:
            if isinstance(value, torch.Tensor) and not value.is_meta:
                self._track(value)
        return out


TINY_BOUND_KEYS = (
    "in_channels",
    "out_channels",
    "joint_attention_dim",
    "pooled_projection_dim",
    "text_dim",
    "crossattn_proj_in_channels",
    "encoder_hidden_states_channels",
    "text_embed_dim",
    "text_embed_2_dim",
    "image_embed_dim",
    "cap_feat_dim",
    "concat_padding_mask",
    "patch_size",
    "image_dim",
)
"""Transformer config keys that bind it to the tiny pipeline's text encoders and VAE: taken
from the tiny transformer; every other key (block options, head size, MLP ratio, norms) is
the real model's."""


REDUCED_HEADS = {"flux2": 12}
"""Families measured at fewer attention heads than their real transformer has (the real head
size, so the width is heads x head size), each to its own count: FLUX.2 [dev]'s 48 heads (width
6144, about 2 B parameters in 1 + 1 blocks) take most of an hour on a shared 2-core CPU. Every
term is bytes per token per block per hidden unit, and with the head size fixed each block's
saved activations (projections, MLP, norms, one L x L score matrix per head of 128 units) scale
with the width, so a narrower measurement gives the same coefficients; FLUX.2 [klein]'s, measured
on the same block classes at its real width 3072, is the check (docs/memory_plan.md)."""
EVERY_CHECKPOINT = ("qwen_image_edit_plus",)
"""Families measured on each of their checkpoints' transformers (`transformer_files`), each term
the largest: Qwen-Image-Edit-2511's `zero_cond_t` keeps its modulation per token, 2509's per
sample. The others are measured on their first architecture file."""


def transformer_files(family: str) -> list[Path]:
    """The architecture files a family's calibration measures: for `EVERY_CHECKPOINT` each file
    whose transformer config differs (the first of each), else the first file alone."""
    files = family_spec(family).architecture_files()
    if family not in EVERY_CHECKPOINT:
        return list(files[:1])
    found: dict[str, Path] = {}
    for path in files:
        config = json.loads(path.read_text())["components"]["transformer"]
        found.setdefault(json.dumps(config, sort_keys=True), path)
    return list(found.values())


def calibration_transformer(family: str, tiny_config: dict, real_width: bool = False, file: Path | None = None):
    """The real model's transformer (shipped architecture file `file`, by default the family's
    first) cut to 2 blocks (FLUX: 1 + 1) of 2 heads of the real head size (`real_width`: all its
    heads, or the family's `REDUCED_HEADS`), its inputs bound to the tiny pipeline's shapes."""
    import diffusers

    file = file or family_spec(family).architecture_files()[0]
    spec = json.loads(file.read_text())["components"]["transformer"]
    config = {k: v for k, v in spec["config"].items()}
    config.update({k: tiny_config[k] for k in TINY_BOUND_KEYS if k in tiny_config and k in config})
    if "n_heads" in config:  # a Lumina-style single-stream DiT (Z-Image): 2 main blocks, no refiners
        if not real_width:
            head = config["dim"] // config["n_heads"]
            config.update(n_heads=2, n_kv_heads=2, dim=2 * head)
        config.update(n_layers=2, n_refiner_layers=0)
        return getattr(diffusers, spec["class"]).from_config(config)
    if not real_width:
        config["num_attention_heads"] = 2
    elif family in REDUCED_HEADS:
        config["num_attention_heads"] = REDUCED_HEADS[family]
    config["num_layers"] = 1 if "num_single_layers" in config else 2
    if "num_single_layers" in config:
        config["num_single_layers"] = 1
    if "dual_attention_layers" in config:  # SD3.5-M: dual attention in 13 of 24 blocks; here 1 of 2
        config["dual_attention_layers"] = [0]
    if "caption_projection_dim" in config:
        config["caption_projection_dim"] = config["num_attention_heads"] * config["attention_head_dim"]
    return getattr(diffusers, spec["class"]).from_config(config)


def _policy(family: str, root: Path, checkpointing: bool, real_width: bool = False, file: Path | None = None):
    path = save_tiny(family, root / family)
    transformer_dir = path / "transformer"
    tiny_config = json.loads((transformer_dir / "config.json").read_text())
    torch.manual_seed(0)
    calibration_transformer(family, tiny_config, real_width, file).save_pretrained(transformer_dir)
    extra = {
        "wan": ["model.num_frames=5"],
        "wan_i2v": ["model.num_frames=5"],
        "cosmos": ["model.num_frames=5"],
        "hunyuan_video15": ["model.num_frames=5"],
        "flux": ["model.embedded_guidance=3.5"],
        "flux_kontext": ["model.embedded_guidance=2.5"],
        "flux2": ["model.embedded_guidance=4.0"],
        "qwen_image_edit_plus": ["model.max_sequence_length=512"],  # its source's 384² picture in the prompt
    }
    frames = extra.get(family, [])
    cfg = load_config(
        None,
        [
            f"model.family={family}",
            f"model.path={path}",
            "model.dtype=bfloat16",
            "model.device=cpu",
            "model.max_sequence_length=32",
            "model.negative_prompt=",
            f"model.gradient_checkpointing={str(checkpointing).lower()}",
            *frames,
        ],
    )
    torch.manual_seed(0)
    return build_policy(cfg)


def _blocks(transformer) -> tuple[int, int]:
    """(width, blocks) of the calibration transformer, as the memory plan reads them."""
    hidden, layers, _, _ = transformer_shape(transformer)
    return hidden, layers


def _tokens(family: str, latent_shape: tuple[int, ...]) -> int:
    """Transformer image tokens of a latent (C, [F,] h, w) under the family's patch (its first
    architecture file's geometry: (1, 2, 2) for most, HunyuanVideo 1.5's (1, 1, 1))."""
    geometry = json.loads(family_spec(family).architecture_files()[0].read_text())["geometry"]
    dims = latent_shape[1:]
    tokens = 1
    for size, patch in zip(dims, geometry["patch"][-len(dims) :]):
        tokens *= size // patch
    return tokens


def measure(policy, side: int, grad: bool) -> tuple[int, int, int]:
    """(image tokens, bytes kept after the forward, peak bytes during it) of one sample's velocity."""
    cond = calibration_condition(policy, side)
    shape = policy.latent_shape(side, side)
    latents = torch.randn(1, *shape)
    sigma = torch.full((1,), 0.5)
    tracker = LiveBytes()
    with torch.set_grad_enabled(grad), tracker:
        out = policy.velocity(latents, sigma, cond, guidance_scale=1.0)
        kept = tracker.live
    del out
    return _tokens(policy.family, shape), kept, tracker.peak


CUDA_AUTOCAST_FLOAT32 = frozenset(
    {
        F.layer_norm,
        F.group_norm,
        F.softmax,
        F.log_softmax,
        F.softplus,
        F.normalize,
        torch.layer_norm,
        torch.group_norm,
        torch.softmax,
        torch.log_softmax,
        torch.exp,
        torch.pow,
        torch.rsqrt,
        torch.sum,
        torch.cumsum,
        torch.Tensor.softmax,
        torch.Tensor.log_softmax,
        torch.Tensor.exp,
        torch.Tensor.pow,
        torch.Tensor.__pow__,
        torch.Tensor.rsqrt,
        torch.Tensor.sum,
        torch.Tensor.cumsum,
    }
)
"""The ops of CUDA autocast's float32 list a denoiser's forward reaches (torch's autocast op
reference: norms, softmax, pow, rsqrt, exp, sum, ...). CPU autocast leaves them at bfloat16."""


class CudaAutocastPolicy(TorchFunctionMode):
    """Inside CPU bfloat16 autocast, CUDA autocast's float32 list: those ops get float32 inputs
    and give float32 outputs, as on the GPU. Above autograd, so the float32 copies and outputs are
    what backward saves there (a LayerNorm's float32 output, its modulation in float32, the
    cast back to bfloat16 for the next matmul)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in CUDA_AUTOCAST_FLOAT32 or not torch.is_autocast_enabled("cpu"):
            return func(*args, **kwargs)  # as CUDA's: only inside an autocast region (the denoiser's call)

        def up(value):
            low = isinstance(value, torch.Tensor) and value.dtype in (torch.bfloat16, torch.float16)
            return value.float() if low else value

        with torch.autocast("cpu", enabled=False):
            return func(*(up(a) for a in args), **{k: up(v) for k, v in kwargs.items()})


COMPILE_BACKEND = "aot_eager_decomp_partition"
"""torch.compile backend of the compiled measurement: AOTAutograd with inductor's
decompositions and its min-cut partitioner (which decides what the compiled graph saves for
backward and what it recomputes), without inductor's code generation."""


def _saved(module: torch.nn.Module, run) -> tuple[int]:
    """Bytes of the tensors autograd saves for backward over `run`, `module`'s weights
    excluded, counted by saved-tensor hooks (compiled graphs save theirs through them too)."""
    weights = {t.untyped_storage().data_ptr() for t in [*module.parameters(), *module.buffers()]}
    storages: dict[int, int] = {}

    def pack(tensor):
        key = tensor.untyped_storage().data_ptr()
        if key and key not in weights:
            storages[key] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out = run()
    del out
    return (sum(storages.values()),)


def saved_bytes(policy, side: int, eager_cuda: bool) -> tuple[int, int]:
    """(image tokens, bytes saved for backward) of one sample's `velocity`; `eager_cuda`: under
    CUDA's autocast float32 list."""
    cond = calibration_condition(policy, side)
    shape = policy.latent_shape(side, side)
    latents, sigma = torch.randn(1, *shape), torch.full((1,), 0.5)
    with CudaAutocastPolicy() if eager_cuda else contextlib.nullcontext():
        return (
            _tokens(policy.family, shape),
            *_saved(policy.transformer, lambda: policy.velocity(latents, sigma, cond, guidance_scale=1.0)),
        )


def _slope(points: list[tuple[int, int]], layers: int, hidden: int) -> float:
    """Bytes per token per block per unit from two (tokens, bytes) measurements."""
    (n1, b1), (n2, b2) = points
    return (b2 - b1) / (n2 - n1) / (layers * hidden)


def calibrate(family: str, root: Path, small: int) -> dict:
    """The family's coefficients at the real width (all heads, 2 blocks), eager ones under
    CUDA's autocast float32 list: replay (kept for backward), replay_compiled (regional
    compile with `COMPILE_BACKEND`), replay_checkpointed (gradient checkpointing, eager),
    rollout_peak (the no-grad forward's peak working set, eager). A family measured on several
    checkpoints' transformers (`transformer_files`) keeps each term's largest, so the plan
    covers every checkpoint it names."""
    files = transformer_files(family)
    measured = [_calibrate_file(family, root / str(index), small, file) for index, file in enumerate(files)]
    result: dict = {key: max(found[key] for found, _ in measured) for key in measured[0][0]}
    hidden, layers = measured[0][1]
    which = f" (each term the larger over {', '.join(file.stem for file in files)})" if len(files) > 1 else ""
    width = f"the real width {hidden}"
    if family in REDUCED_HEADS:
        real = json.loads(files[0].read_text())["components"]["transformer"]["config"]["num_attention_heads"]
        width = f"width {hidden} ({REDUCED_HEADS[family]} of the real {real} heads, the head size kept)"
    result["measured_on"] = (
        f"{family}: {layers} blocks of {width}{which}, bfloat16 autocast with CUDA's "
        f"float32 list (eager), {COMPILE_BACKEND} (compiled), CPU"
    )
    return result


def _calibrate_file(family: str, root: Path, small: int, file: Path) -> tuple[dict, tuple[int, int]]:
    """`calibrate`'s terms for the transformer of architecture file `file`, and its (width, blocks)."""
    result = {}
    policy = _policy(family, root / "plain", checkpointing=False, real_width=True, file=file)
    hidden, layers = _blocks(policy.transformer)
    policy.transformer.eval()
    with CudaAutocastPolicy():
        (m1, _, peak1), (m2, _, peak2) = (measure(policy, s, grad=False) for s in (small, 2 * small))
    result["rollout_peak"] = (peak2 - peak1) / (m2 - m1) / hidden
    policy.transformer.train()
    result["replay"] = _slope([saved_bytes(policy, s, eager_cuda=True) for s in (small, 2 * small)], layers, hidden)
    for block in [m for m in policy.transformer.modules() if type(m).__name__ in policy.repeated_blocks]:
        block.compile(backend=COMPILE_BACKEND, dynamic=False)
    result["replay_compiled"] = _slope(
        [saved_bytes(policy, s, eager_cuda=False) for s in (small, 2 * small)], layers, hidden
    )
    # checkpointing keeps each block's input outside autograd's saved tensors: count live bytes
    policy = _policy(family, root / "checkpointed", checkpointing=True, real_width=True, file=file)
    policy.transformer.train()
    with CudaAutocastPolicy():
        (n1, kept1, _), (n2, kept2, _) = (measure(policy, s, grad=True) for s in (small, 2 * small))
    result["replay_checkpointed"] = (kept2 - kept1) / (n2 - n1) / (layers * hidden)
    return result, (hidden, layers)


JANUS_TOKENS = 256
"""The smaller image-token count of the Janus calibration (the larger is twice it)."""


def calibration_janus_shapes() -> str:
    """Register the tiny Janus whose language model is Janus-Pro-7B's block (shipped file) at
    its real width, head size and MLP width, cut to 2 layers; returns its shapes key."""
    spec = json.loads(shipped_file(family_spec("janus"), "deepseek-community/Janus-Pro-7B").read_text())
    text = spec["components"]["heads_and_aligners"]["config"]["text_config"]
    JANUS_SHAPES["calibration"] = dict(
        JANUS_SHAPES["tiny"],
        text=dict(
            hidden_size=text["hidden_size"],
            intermediate_size=text["intermediate_size"],
            num_hidden_layers=2,
            num_attention_heads=text["num_attention_heads"],
            num_key_value_heads=text["num_key_value_heads"],
            max_position_embeddings=4 * JANUS_TOKENS,
        ),
    )
    return "calibration"


def _janus_points(policy, cond, small: int, measure_one) -> list:
    """`measure_one(run)` at `small` and 2 x `small` image tokens; run() is one replay call."""
    points = []
    for count in (small, 2 * small):
        tokens = torch.randint(0, int(policy.model.model.vqmodel.config.num_embeddings), (1, count))
        points.append(
            (count, *measure_one(lambda: policy.token_log_probs(cond, tokens, guidance_scale=1.0, temperature=1.0)))
        )
    return points


def _live(run, grad: bool) -> tuple[int, int]:
    """(bytes kept after `run`, peak bytes during it), counted by `LiveBytes`."""
    tracker = LiveBytes()
    with torch.set_grad_enabled(grad), tracker:
        out = run()
        kept = tracker.live
    del out
    return kept, tracker.peak


def calibrate_janus(root: Path, small: int = JANUS_TOKENS) -> dict:
    """Janus the way `calibrate` measures a denoiser, on the replay call `token_log_probs`:
    Janus-Pro-7B's LLaMA block at its real width, 2 layers, LoRA through `build_policy`."""
    build_tiny_janus(0, calibration_janus_shapes()).save_pretrained(root / "janus")
    cfg = load_config(
        None,
        [
            "model.family=janus",
            "algorithm.name=ar_grpo",
            f"model.path={root / 'janus'}",
            "model.dtype=bfloat16",
            "model.device=cpu",
            "model.train_mode=lora",
        ],
    )
    torch.manual_seed(0)
    policy = build_policy(cfg)
    config = policy.transformer.config
    hidden, layers = int(config.hidden_size), int(config.num_hidden_layers)
    cond = policy.encode_prompts(["a calibration prompt"], with_negative=False)
    result = {}
    policy.transformer.eval()
    with CudaAutocastPolicy():
        (n1, _, peak1), (n2, _, peak2) = _janus_points(policy, cond, small, lambda run: _live(run, grad=False))
    result["rollout_peak"] = (peak2 - peak1) / (n2 - n1) / hidden
    policy.transformer.train()
    with CudaAutocastPolicy():
        result["replay"] = _slope(
            _janus_points(policy, cond, small, lambda run: _saved(policy.model, run)), layers, hidden
        )
    for block in [m for m in policy.transformer.modules() if type(m).__name__ in policy.repeated_blocks]:
        block.compile(backend=COMPILE_BACKEND, dynamic=False)
    result["replay_compiled"] = _slope(
        _janus_points(policy, cond, small, lambda run: _saved(policy.model, run)), layers, hidden
    )
    result["replay_checkpointed"] = 2.0  # the bfloat16 block input; Janus has no checkpointing to measure
    result["measured_on"] = (
        f"janus: {layers} LLaMA blocks of the real width {hidden}, bfloat16 autocast with "
        f"CUDA's float32 list (eager), {COMPILE_BACKEND} (compiled), CPU "
        "(replay_checkpointed derived, not measured)"
    )
    return result


NEXTSTEP_SIDES = ((64, 64), (64, 128))
"""(height, width) of the NextStep-1 calibration: 16 and 32 image tokens (16 pixels a token)."""


def _nextstep_policy(root: Path, layers: int):
    """NextStep-1-Large's decoder block at its real width and its real flow head (shipped
    architecture file), the decoder cut to `layers`, loaded through `build_policy` (LoRA)."""
    large = json.loads(shipped_file(family_spec("nextstep"), "stepfun-ai/NextStep-1-Large").read_text())
    config = {k: v for k, v in large["components"]["transformer"]["config"].items() if v is not None}
    config.update(num_hidden_layers=layers, max_position_embeddings=1024)
    build_tiny_nextstep(0, config).save_pretrained(root / f"nextstep_{layers}")
    cfg = load_config(
        None,
        [
            "model.family=nextstep",
            "algorithm.name=ar_grpo",
            f"model.path={root / f'nextstep_{layers}'}",
            "model.dtype=bfloat16",
            "model.device=cpu",
            "model.train_mode=lora",
        ],
    )
    torch.manual_seed(0)
    policy = build_policy(cfg)
    (root / f"nextstep_{layers}" / "model.safetensors").unlink()  # 2-5 GB: the policy holds the weights
    return policy


def _nextstep_points(policy, measure_one) -> list:
    """`measure_one(run)` at the two `NEXTSTEP_SIDES`; run() is one replay call `token_log_probs`
    over random head walks (one sample, no CFG)."""
    points = []
    for height, width in NEXTSTEP_SIDES:
        policy.check_image_size(height, width)
        cond = policy.encode_prompts(["a calibration prompt"], with_negative=False)
        steps, dim = policy.sampling.num_steps, policy.model.arch.token_dim
        walks = torch.randn(1, policy.num_image_tokens, steps + 1, dim)
        run = lambda: policy.token_log_probs(cond, walks, guidance_scale=1.0, temperature=1.0)  # noqa: E731
        points.append((policy.num_image_tokens, *measure_one(run)))
    return points


def _per_token(points: list) -> float:
    """Bytes per image token from two (tokens, bytes) measurements."""
    (n1, b1), (n2, b2) = points
    return (b2 - b1) / (n2 - n1)


def calibrate_nextstep(root: Path) -> dict:
    """NextStep-1 on its replay call `token_log_probs`, as Janus, with the flow head apart: its
    walk of `HeadSampling.num_steps` steps per image token dwarfs a decoder block's bytes, so
    the replay is measured with the decoder at 1 and 2 blocks of NextStep-1-Large's width (eager,
    then with the blocks compiled); the difference is a block's (`replay`, `replay_compiled`, per
    unit of width), the eager rest per image token `replay_outside_blocks` (the head's walk and
    the image projectors; the head is never compiled)."""
    eager, compiled = {}, {}
    for layers in (1, 2):
        policy = _nextstep_policy(root, layers)
        policy.transformer.train()
        with CudaAutocastPolicy():
            eager[layers] = _per_token(_nextstep_points(policy, lambda run: _saved(policy.model, run)))
        if layers == 2:
            policy.transformer.eval()
            with CudaAutocastPolicy():
                (n1, _, peak1), (n2, _, peak2) = _nextstep_points(policy, lambda run: _live(run, grad=False))
            policy.transformer.train()
        for block in [m for m in policy.transformer.modules() if type(m).__name__ in policy.repeated_blocks]:
            block.compile(backend=COMPILE_BACKEND, dynamic=False)
        compiled[layers] = _per_token(_nextstep_points(policy, lambda run: _saved(policy.model, run)))
    hidden, arch = policy.model.arch.hidden_size, policy.model.arch
    return {
        "rollout_peak": (peak2 - peak1) / (n2 - n1) / hidden,
        "replay": (eager[2] - eager[1]) / hidden,
        "replay_compiled": (compiled[2] - compiled[1]) / hidden,
        "replay_checkpointed": 2.0,  # the bfloat16 block input; NextStep-1 has no checkpointing to measure
        OUTSIDE_BLOCKS: eager[1] - (eager[2] - eager[1]),
        OUTSIDE_BLOCKS_STEPS: policy.sampling.num_steps,  # the plan scales the head's term by its stochastic steps
        "measured_on": (
            f"nextstep: NextStep-1-Large's Qwen2.5 block (width {hidden}) at 1 and 2 blocks and its flow head "
            f"({arch.fm_head_layers} x {arch.fm_head_dim}, {policy.sampling.num_steps} head steps), bfloat16 "
            f"autocast with CUDA's float32 list (eager), {COMPILE_BACKEND} (compiled blocks), CPU "
            "(replay_checkpointed derived, not measured)"
        ),
    }


TOY_ROWS = 4
"""The smaller batch of the toy calibration (the larger is twice it): the toy draws only 32 x 32."""


def _toy_points(policy, measure_one) -> list:
    """`measure_one(run)` over TOY_ROWS and twice as many rows; tokens per row are the 64 image
    and 2 text tokens its joint attention runs over."""
    shape = policy.latent_shape(policy.image_size, policy.image_size)
    patch = int(policy.transformer.config.patch_size)  # 4 in pixel space: 8 x 8 image tokens
    tokens = (policy.image_size // patch) ** 2 + 2  # + the colour and shape tokens
    points = []
    for rows in (TOY_ROWS, 2 * TOY_ROWS):
        cond = policy.encode_prompts(["a red circle"] * rows, with_negative=False)
        latents, sigma = torch.randn(rows, *shape), torch.full((rows,), 0.5)
        points.append((rows * tokens, *measure_one(lambda: policy.velocity(latents, sigma, cond, guidance_scale=1.0))))
    return points


def _toy_policy(checkpointing: bool):
    cfg = load_config(
        None,
        [
            "model.family=toy",
            "model.path=builtin",
            "model.dtype=bfloat16",
            "model.device=cpu",
            f"model.gradient_checkpointing={str(checkpointing).lower()}",
        ],
    )
    torch.manual_seed(0)
    return build_policy(cfg)


def calibrate_toy(root: Path) -> dict:
    """The toy family (the CPU demo) measured whole, at its real size: its image size is fixed
    (32 x 32), so the per-token slope is taken over rows (4 and 8 samples) instead of sizes."""
    policy = _toy_policy(checkpointing=False)
    hidden, layers = _blocks(policy.transformer)
    result = {}
    policy.transformer.eval()
    with CudaAutocastPolicy():
        (n1, _, peak1), (n2, _, peak2) = _toy_points(policy, lambda run: _live(run, grad=False))
    result["rollout_peak"] = (peak2 - peak1) / (n2 - n1) / hidden
    policy.transformer.train()
    with CudaAutocastPolicy():
        result["replay"] = _slope(_toy_points(policy, lambda run: _saved(policy.transformer, run)), layers, hidden)
    for block in [m for m in policy.transformer.modules() if type(m).__name__ in policy.repeated_blocks]:
        block.compile(backend=COMPILE_BACKEND, dynamic=False)
    result["replay_compiled"] = _slope(_toy_points(policy, lambda run: _saved(policy.transformer, run)), layers, hidden)
    policy = _toy_policy(checkpointing=True)
    policy.transformer.train()
    with CudaAutocastPolicy():
        (n1, kept1, _), (n2, kept2, _) = _toy_points(policy, lambda run: _live(run, grad=True))
    result["replay_checkpointed"] = (kept2 - kept1) / (n2 - n1) / (layers * hidden)
    result["measured_on"] = (
        f"toy: the whole demo transformer ({layers} blocks of width {hidden}) over 4 and 8 rows, "
        f"bfloat16 autocast with CUDA's float32 list (eager), {COMPILE_BACKEND} (compiled), CPU"
    )
    return result


CALIBRATORS = {
    **{
        family: (lambda root, side=side, family=family: calibrate(family, root, side))
        for family, side in FAMILIES.items()
    },
    "janus": calibrate_janus,
    "nextstep": calibrate_nextstep,
    "toy": calibrate_toy,
}
"""family -> its measurement (the token family has its own replay call)."""
SAME_BLOCKS = {"hunyuan_video15_i2v": "hunyuan_video15"}
"""family -> the family whose measurement it ships: HunyuanVideo 1.5 I2V's transformer is the T2V
checkpoint's config but task_type, which its forward does not read (tests/unit/models/
test_hunyuan_video15_tiny.py), so the same blocks keep the same bytes per token; its image tokens
are part of the text stream's length, which the plan counts. (Its policy also generates only the
pipeline's size buckets, which the calibration's sides are not.)"""


def _same_blocks(family: str, source: str):
    """`source`'s measurement, labelled as shipped for `family`."""

    def calibrator(root: Path) -> dict:
        body = CALIBRATORS[source](root)
        return {**body, "measured_on": f"{family}: {source}'s measurement, the same blocks ({body['measured_on']})"}

    return calibrator


CALIBRATORS.update({family: _same_blocks(family, source) for family, source in SAME_BLOCKS.items()})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write DIR/<family>.json instead of each family's calibration.json in its folder",
    )
    parser.add_argument(
        "--families",
        nargs="+",
        choices=sorted(CALIBRATORS),
        default=sorted(CALIBRATORS),
        help="measure only these; the others keep their calibration.json",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families:
            # what FamilySpec.calibration reads (its CALIBRATION_KEYS), and what measured it
            body = {
                **CALIBRATORS[family](Path(tmp)),
                "script": "benchmarks/calibrate_memory.py",
                "torch": torch.__version__,
            }
            out = args.out / f"{family}.json" if args.out else family_spec(family).folder / CALIBRATION
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(body, indent=1) + "\n")
            print(f"{family}: wrote {out}", json.dumps(body))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
