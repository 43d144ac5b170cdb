"""Activation-memory calibration for the memory plan, measured on CPU.

    python benchmarks/calibrate_memory.py [--out genalign/models/architectures/calibration.json]
                                          [--families janus ...]   (re-measure only these)

For every diffusion family it builds the tiny pipeline (`models/tiny_random.py`) with its transformer
replaced by the real model's (the shipped architecture file: the same block options, head
size, MLP ratio and norms) cut to 2 blocks of 2 heads, loads it through
the real `build_policy` (LoRA, float32 masters, bfloat16 compute) and runs the policy's own
`velocity` - the call rollout and replay make - while a dispatch-mode tracker counts the
bytes of every live tensor storage created inside the call:

- replay (grad on): bytes still alive after the forward (what autograd keeps for backward),
  eager and with gradient checkpointing;
- rollout (no grad): the peak of live bytes during the forward (the working set).

Each is measured at two image sizes, so the bytes split into a per-token slope and a fixed
part; the slope is divided by (layers x hidden size) and stored as bytes per token, per block,
per hidden unit at bfloat16: the width-independent number the plan scales by the real
model's sequence length, depth and width (`training/memory_plan.py`). Per-head terms (softmax
log-sum-exp) keep their share at 2 heads; per-token terms that do not grow with width (norm
statistics) weigh a little more at 2 heads than at 24, so the coefficients err high; the
plan's check against the GPU measurement (docs/memory_plan.md) says by how much.

Janus-Pro (the token family) the same way: the tiny Janus with its language model replaced by
Janus-Pro-7B's LLaMA block (real head size and MLP ratio) cut to 2 blocks of 2 heads, through
`build_policy`, measuring the policy's teacher-forced `token_log_probs` (the replay call) at
two image-token counts; the no-grad peak of the same call stands for the rollout's prefill.
Its language model has no gradient checkpointing, so `replay_checkpointed` is the block input
alone (2 bytes per unit, derived, not measured).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import weakref
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402

from genalign.config.loader import load_config  # noqa: E402
from genalign.models.architecture import ARCHITECTURES  # noqa: E402
from genalign.models.tiny_random import JANUS_SHAPES, build_tiny_janus, save_tiny  # noqa: E402
from genalign.training.setup import build_policy  # noqa: E402

FAMILIES = {"sd3": 64, "flux": 64, "qwen_image": 64, "wan": 64, "cosmos": 64}
"""family -> the smaller calibration image side (the larger is twice it)."""
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "genalign" / "models" / "architectures" / "calibration.json"


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


TINY_BOUND_KEYS = ("in_channels", "out_channels", "joint_attention_dim", "pooled_projection_dim", "text_dim",
                   "crossattn_proj_in_channels", "encoder_hidden_states_channels", "text_embed_dim",
                   "concat_padding_mask", "patch_size")
"""Transformer config keys that bind it to the tiny pipeline's text encoders and VAE: taken
from the tiny transformer; every other key (block options, head size, MLP ratio, norms) is
the real model's."""


def calibration_transformer(family: str, tiny_config: dict):
    """The real model's transformer (shipped architecture file) cut to 2 blocks (FLUX: 1 + 1)
    of 2 heads of the real head size, its inputs bound to the tiny pipeline's shapes."""
    import diffusers

    spec = next(json.loads(p.read_text()) for p in ARCHITECTURES.glob("*.json")
                if json.loads(p.read_text()).get("family") == family)["components"]["transformer"]
    config = {k: v for k, v in spec["config"].items()}
    config.update({k: tiny_config[k] for k in TINY_BOUND_KEYS if k in tiny_config and k in config})
    config["num_attention_heads"] = 2
    config["num_layers"] = 1 if "num_single_layers" in config else 2
    if "num_single_layers" in config:
        config["num_single_layers"] = 1
    if "dual_attention_layers" in config:  # SD3.5-M: dual attention in 13 of 24 blocks; here 1 of 2
        config["dual_attention_layers"] = [0]
    if "caption_projection_dim" in config:
        config["caption_projection_dim"] = config["num_attention_heads"] * config["attention_head_dim"]
    return getattr(diffusers, spec["class"]).from_config(config)


def _policy(family: str, root: Path, checkpointing: bool):
    path = save_tiny(family, root / family)
    transformer_dir = path / "transformer"
    tiny_config = json.loads((transformer_dir / "config.json").read_text())
    torch.manual_seed(0)
    calibration_transformer(family, tiny_config).save_pretrained(transformer_dir)
    extra = {"wan": ["model.num_frames=5"], "cosmos": ["model.num_frames=5"], "flux": ["model.embedded_guidance=3.5"]}
    frames = extra.get(family, [])
    cfg = load_config(None, [f"model.family={family}", f"model.path={path}", "model.dtype=bfloat16",
                             "model.device=cpu", "model.max_sequence_length=32", "model.negative_prompt=",
                             f"model.gradient_checkpointing={str(checkpointing).lower()}", *frames])
    torch.manual_seed(0)
    return build_policy(cfg)


def _blocks(transformer) -> tuple[int, int]:
    config = transformer.config
    return (int(config.num_attention_heads * config.attention_head_dim),
            int(config.num_layers) + int(getattr(config, "num_single_layers", 0) or 0))


def _tokens(latent_shape: tuple[int, ...]) -> int:
    """Transformer image tokens of a latent (C, [F,] h, w) under a (1, 2, 2) patch."""
    spatial = 1
    for size in latent_shape[1:]:
        spatial *= size
    return spatial // 4


def measure(policy, side: int, grad: bool) -> tuple[int, int, int]:
    """(image tokens, bytes kept after the forward, peak bytes during it) of one sample's velocity."""
    cond = policy.encode_prompts(["a calibration prompt"], with_negative=False)
    shape = policy.latent_shape(side, side)
    latents = torch.randn(1, *shape)
    sigma = torch.full((1,), 0.5)
    tracker = LiveBytes()
    with torch.set_grad_enabled(grad), tracker:
        out = policy.velocity(latents, sigma, cond, guidance_scale=1.0)
        kept = tracker.live
    del out
    return _tokens(shape), kept, tracker.peak


def calibrate(family: str, root: Path, small: int) -> dict:
    result = {}
    for checkpointing in (False, True):
        policy = _policy(family, root, checkpointing)
        hidden, layers = _blocks(policy.transformer)
        policy.transformer.train()
        (n1, kept1, _), (n2, kept2, _) = (measure(policy, s, grad=True) for s in (small, 2 * small))
        key = "replay_checkpointed" if checkpointing else "replay"
        result[key] = (kept2 - kept1) / (n2 - n1) / (layers * hidden)
        if not checkpointing:
            policy.transformer.eval()
            (m1, _, peak1), (m2, _, peak2) = (measure(policy, s, grad=False) for s in (small, 2 * small))
            result["rollout_peak"] = (peak2 - peak1) / (m2 - m1) / hidden
    result["measured_on"] = f"tiny {family}: {layers} blocks of width {hidden}, bfloat16 autocast, CPU"
    return result


JANUS_TOKENS = 256
"""The smaller image-token count of the Janus calibration (the larger is twice it)."""


def calibration_janus_shapes() -> str:
    """Register the tiny Janus whose language model is Janus-Pro-7B's block (shipped file) cut to
    2 layers of 2 heads of the real head size, at the real MLP ratio; returns its shapes key."""
    spec = json.loads((ARCHITECTURES / "deepseek-community--Janus-Pro-7B.json").read_text())
    text = spec["components"]["heads_and_aligners"]["config"]["text_config"]
    head_dim = text["hidden_size"] // text["num_attention_heads"]
    hidden = 2 * head_dim
    JANUS_SHAPES["calibration"] = dict(JANUS_SHAPES["tiny"], text=dict(
        hidden_size=hidden, intermediate_size=hidden * text["intermediate_size"] // text["hidden_size"],
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4 * JANUS_TOKENS))
    return "calibration"


def calibrate_janus(root: Path, small: int = JANUS_TOKENS) -> dict:
    build_tiny_janus(0, calibration_janus_shapes()).save_pretrained(root / "janus")
    cfg = load_config(None, ["model.family=janus", "algorithm.name=ar_grpo", f"model.path={root / 'janus'}",
                             "model.dtype=bfloat16", "model.device=cpu", "model.train_mode=lora"])
    torch.manual_seed(0)
    policy = build_policy(cfg)
    config = policy.transformer.config
    hidden, layers = int(config.hidden_size), int(config.num_hidden_layers)
    cond = policy.encode_prompts(["a calibration prompt"], with_negative=False)
    result = {}
    for grad in (True, False):
        policy.transformer.train(grad)
        points = []
        for count in (small, 2 * small):
            tokens = torch.randint(0, int(policy.model.model.vqmodel.config.num_embeddings), (1, count))
            tracker = LiveBytes()
            with torch.set_grad_enabled(grad), tracker:
                out = policy.token_log_probs(cond, tokens, guidance_scale=1.0, temperature=1.0)
                kept = tracker.live
            del out
            points.append((count, kept, tracker.peak))
        (n1, kept1, peak1), (n2, kept2, peak2) = points
        if grad:
            result["replay"] = (kept2 - kept1) / (n2 - n1) / (layers * hidden)
        else:
            result["rollout_peak"] = (peak2 - peak1) / (n2 - n1) / hidden
    result["replay_checkpointed"] = 2.0  # the bfloat16 block input; Janus has no checkpointing to measure
    result["measured_on"] = (f"tiny janus: {layers} LLaMA blocks of width {hidden}, bfloat16, CPU "
                             "(replay_checkpointed derived, not measured)")
    return result


CALIBRATORS = {**{family: (lambda root, side=side, family=family: calibrate(family, root, side))
                  for family, side in FAMILIES.items()}, "janus": calibrate_janus}
"""family -> its measurement (the token family has its own replay call)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--families", nargs="+", choices=sorted(CALIBRATORS), default=sorted(CALIBRATORS),
                        help="measure only these; the others keep their entries in --out")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    families = json.loads(args.out.read_text())["families"] if args.out.is_file() else {}
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families:
            families[family] = CALIBRATORS[family](Path(tmp))
            print(family, json.dumps(families[family]))
    body = {"units": "bytes per transformer token per block per hidden unit at bfloat16 compute "
                     "(replay: kept for backward; replay_checkpointed: with gradient checkpointing); "
                     "rollout_peak: peak working bytes per token per hidden unit of a no-grad forward",
            "script": "benchmarks/calibrate_memory.py", "torch": torch.__version__, "families": families}
    args.out.write_text(json.dumps(body, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
