"""The GPU suite: what a lent GPU runs first, in one command, ordered by value.

    python benchmarks/gpu_suite.py [--budget-s 420] [--out $OUT] [--only KEY ...]
    python benchmarks/gpu_suite.py --tiny --out /tmp/suite      # the same suite on the CPU

1. Every model family at its real shapes: each registered family's recipe (random weights at
   the published architecture, `benchmarks/random_weights.py`; the toy family its shipped
   weights), bf16 as the recipes say, eager, 2 training steps: finite, replay parity, images/s,
   peak GPU memory beside the memory plan's estimate. Shrunk only in counts, never in shapes:
   one prompt group a step, and, where the time plan needs it, a smaller group (never below the
   sampling chunk and replay micro-batch, which set the memory) and fewer denoising steps;
   each item says what it shrank. SD3.5 Large beside SD3.5 Medium. An item whose plan is over
   85 % of the card's memory (what the plan leaves out: the CUDA context, fragmentation) is
   skipped, naming the plan: SD3.5 Large and Qwen-Image run on a 141 GB card.
2. SD3.5 Medium against Flow-GRPO's own training loop at the same settings
   (`benchmarks/flow_grpo_reference.py`), the ratio in one run.
3. What remains of the budget: the rollout profile (where a step's rollout seconds go:
   transformer, VAE decode, text encoders, the rest) and the levers (compiled, split CFG).

It prints a time plan first; every item runs in a forked child with what is left of
`--budget-s` as its limit, so a crash, an out-of-memory or the budget ends that item alone,
and the suite stops cleanly with what it has. After every item it rewrites
`gpu_suite.json` and `gpu_suite.md` under `--out` (default $OUT); `gpu_suite_report.py`
turns the JSON into docs/benchmarks.md's tables, naming the card. `--tiny` runs the same
items at the tiny models' shapes in float32 on the CPU (the default test suite does,
tests/integration/test_gpu_suite.py), so the suite cannot rot; its numbers mean nothing.
What the GPU machine lacks is prepared by `benchmarks/prepare_gpu.sh` (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import json
import math
import multiprocessing
import os
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # is_available() leaves CUDA to the forked children
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from benchmarks import flow_grpo_reference as reference  # noqa: E402
from benchmarks.gpu_suite_report import write_outputs  # noqa: E402
from benchmarks.random_weights import random_family_overrides  # noqa: E402
from genalign.config.catalog import recipe_paths  # noqa: E402
from genalign.config.errors import UserError  # noqa: E402
from genalign.config.loader import compose_config, config_to_dict  # noqa: E402
from genalign.models.registry import MODEL_FAMILIES  # noqa: E402
from genalign.models.spec import family_spec  # noqa: E402
from genalign.preflight.load import load_config  # noqa: E402

GIB = 2**30
VALUE_ORDER = ("sd3", "flux", "wan", "janus", "cosmos", "qwen_image", "toy")
"""Families first in this order (the most used first); a family registered later comes after them."""
RECIPES = {"sd3": "experiment/diffusion/sd3_5/online_grpo_ocr", "toy": "experiment/toy/shapes_grpo"}
"""A family's suite recipe where it has several; otherwise its one recipe."""
VARIANTS = {"sd3": [("sd3_5_large", "SD3.5 Large", ["model.path=stabilityai/stable-diffusion-3.5-large"])]}
"""More real shapes of a family: (key, title, overrides) run after the family's own item."""
LEVERS = [("compiled", "model.compile=true", ["model.compile=true"]),
          ("compiled_split_cfg", "compiled, split CFG",
           ["model.compile=true", "model.cfg_batch=split", "algorithm.detach_uncond=true"])]
"""Section 3: SD3.5 Medium at the comparison settings with each lever (key, title, overrides)."""
PLAN_HEADROOM = 0.85
"""An item runs when its memory plan is at most this share of the card (the plan leaves out
the CUDA context, allocator fragmentation and what a benchmark adds: docs/memory_plan.md)."""
EAGER_FLOP_S, COMPILED_FLOP_S = 180e12, 360e12
"""Transformer FLOP/s the time plan assumes: SD3.5 Medium's measured step on an H100 (docs/benchmarks.md)."""
START_S, STEP_EXTRA_S, COMPILE_S, TOKEN_S = 25.0, 2.0, 110.0, 0.03
"""Time plan on a GPU: a child's start (fork, random weights, LoRA), a step's work beside the
transformer (encoders, VAE decode, reward), regional compilation, one sampled image token."""
ITEM_CAP_S = 75.0
"""Section 1 shrinks an item's counts until its planned seconds fit this."""
FINISH_S = 5.0
"""Kept back from the budget to write the outputs."""


@dataclasses.dataclass
class Item:
    key: str
    section: int
    title: str
    kind: str  # "train", "reference" or "profile"
    recipe: str = ""
    overrides: list[str] = dataclasses.field(default_factory=list)
    family: str = ""
    steps: int = 2
    shrunk: list[str] = dataclasses.field(default_factory=list)
    settings: dict = dataclasses.field(default_factory=dict)
    plan_gib: float | None = None
    estimate_s: float = 0.0
    skip: str | None = None
    compiles: bool = False
    same_as: str | None = None
    """An earlier item whose run is this item's (the same config and at least as many steps)."""
    config: dict | None = dataclasses.field(default=None, repr=False)


# ------------------------------------------------------------------ building the items
def family_recipes() -> dict[str, str]:
    """Every registered family -> its suite recipe ("" when none is shipped), in value order."""
    found: dict[str, list[str]] = {}
    for name in recipe_paths():
        found.setdefault(compose_config(name).model.family, []).append(name)
    order = [f for f in VALUE_ORDER if f in MODEL_FAMILIES] + [f for f in MODEL_FAMILIES.names() if f not in VALUE_ORDER]
    return {f: RECIPES.get(f) or (found.get(f) or [""])[0] for f in order}


def model_overrides(family: str, tiny: bool) -> list[str]:
    """Random weights (real or tiny shapes) for a family without shipped weights; device, dtype."""
    spec = family_spec(family)
    device = ["model.device=cpu", "model.dtype=float32"] if tiny else ["model.device=cuda"]
    return device if spec.builtin_path else [*random_family_overrides(family, "tiny" if tiny else "real"), *device]


def common_overrides(recipe: str, out: Path, key: str, steps: int) -> list[str]:
    """No evaluation, no checkpoints, a model-free reward (the jpeg size) in place of the
    recipe's scorers (their weights cannot be downloaded; the reward is not what is measured)."""
    components = compose_config(recipe).reward.components
    return [*(f"reward.components.{name}=0.0" for name in components if name != "jpeg_compressibility"),
            "reward.components.jpeg_compressibility=1.0", "reward.async_scoring=true", "eval.every=0", "eval.at_start=false",
            "trainer.save_every=0", "trainer.progress_bar=false", f"trainer.num_steps={steps}",
            f"trainer.output_dir={out / key / 'run'}"]


def tiny_overrides(recipe: str, family: str) -> list[str]:
    """The tiny models' shapes: the smallest size the family draws, 3 frames for video, 4
    steps, one prompt group of 2."""
    cfg, spec = compose_config(recipe), family_spec(family)
    size = spec.fixed_size or 2 * spec.size_multiple
    frames = 3 if cfg.model.num_frames > 1 else 1
    return ["/base/distributed=local", f"rollout.height={size}", f"rollout.width={size}", f"model.num_frames={frames}",
            "model.max_sequence_length=16", "rollout.num_steps=4", "rollout.n=2", "rollout.rollout_batch_size=1",
            "rollout.sample_batch_size=2", "actor.micro_batch_size=2", "actor.gradient_accumulation_steps=1"]


def settings_of(cfg) -> dict:
    from genalign.preflight.plan import RunPlan

    plan, m, r = RunPlan.from_config(cfg), cfg.model, cfg.rollout
    return {"size": f"{r.width}x{r.height}" + (f"x{m.num_frames}" if m.num_frames > 1 else ""), "dtype": m.dtype,
            "train_mode": m.train_mode, "denoising_steps": r.num_steps, "trained_steps": plan.num_train_timesteps,
            "cfg": r.guidance_scale, "prompts": plan.prompts_per_step, "group": plan.samples_per_prompt,
            "chunk": plan.rollout_micro_batch, "micro_batch": plan.train_micro_batch}


def plan_gib(cfg, family: str) -> float | None:
    """The memory plan's peak per GPU (`preflight/memory_plan.plan_memory`) of `cfg` read as
    the registered family it runs (the benchmark's dotted family has no calibration entry)."""
    from genalign.preflight.memory_plan import plan_memory

    planned = plan_memory(dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, family=family)))
    return None if planned is None else max(role.peak_bytes for role in planned.roles) / GIB


def estimate_s(cfg, family: str, tiny: bool, steps: int) -> float:
    """Planned seconds of an item: start, then per step the transformer's FLOPs (12·width² per
    token per block, twice per multiply-add, plus attention) at the assumed rate, the
    forward-backward of replay (2x a forward for LoRA, 3x for a full fine-tune) and the KL
    reference, or for a token family one forward per image token; compilation once."""
    if tiny:
        return 4.0 + 2.0 * steps
    from genalign.models.architecture import load_architecture
    from genalign.preflight.plan import RunPlan

    arch, plan, m, r = load_architecture(family, cfg.model.path), RunPlan.from_config(cfg), cfg.model, cfg.rollout
    if arch is None:
        return START_S + steps * 10.0
    image = arch.geometry.image_tokens(r.height, r.width, m.num_frames)
    tokens = image + (m.max_sequence_length + arch.geometry.extra_text_tokens if arch.geometry.text_in_sequence else 0)
    row = 2 * tokens * arch.num_layers * (12 * arch.hidden_size ** 2 + 2 * tokens * arch.hidden_size)
    rate = COMPILED_FLOP_S if m.compile else EAGER_FLOP_S
    cfg_rows = 2 if plan.uses_cfg else 1
    samples = plan.samples_per_step
    replay = samples * plan.num_train_timesteps * cfg_rows * ((3 if m.train_mode == "full" else 2) + plan.needs_reference)
    if arch.geometry.kv_cache:
        rollout_s = samples / plan.rollout_micro_batch * image * TOKEN_S
    else:
        rollout_s = samples * r.num_steps * cfg_rows * row / rate
    step = rollout_s + replay * row / rate + STEP_EXTRA_S
    return START_S + steps * step + (COMPILE_S if m.compile else 0.0)


def shrink_candidates(recipe: str, base: list[str]):
    """(overrides, what was shrunk) from the least shrunk: the fewest prompt groups whose samples
    fill whole sampling chunks and replay micro-batches; then a group no smaller than those
    (they set the memory); then half the denoising steps, down to 2 (and the SDE window, and
    one trained step)."""
    cfg = compose_config(recipe, base)
    r, actor = cfg.rollout, cfg.actor
    micro = actor.micro_batch_size or r.sample_batch_size
    unit = math.lcm(r.sample_batch_size, micro)  # samples per step come in whole chunks and micro-batches
    for group in [r.n] + ([max(2, unit)] if max(2, unit) < r.n else []):
        prompts = math.lcm(group, unit) // group
        accumulation = math.gcd(actor.gradient_accumulation_steps, prompts * group // micro * actor.num_inner_epochs)
        steps = r.num_steps
        while True:
            overrides = [*base, f"rollout.rollout_batch_size={prompts}", f"rollout.n={group}",
                         f"rollout.num_steps={steps}", f"actor.gradient_accumulation_steps={accumulation}"]
            shrunk = [f"{what} {before} -> {after}" for what, before, after in
                      (("prompts/step", r.rollout_batch_size, prompts), ("group", r.n, group),
                       ("denoising steps", r.num_steps, steps)) if before != after]
            yield overrides, shrunk
            halved = steps // 2  # still at least 2, the SDE window twice over, and one trained step
            if halved < max(2, 2 * r.sde_window.size) or int(halved * cfg.algorithm.timestep_fraction) < 1:
                break
            steps //= 2


def build_items(out: Path, tiny: bool, card_gib: float | None) -> list[Item]:
    items: list[Item] = []
    for family, recipe in family_recipes().items():
        entries = [(family, family_spec(family).name, [])] + VARIANTS.get(family, [])
        for key, title, extra in entries:
            item = Item(key, 1, title, "train", recipe, family=family)
            if not recipe or (tiny and extra):
                item.skip = "no shipped recipe names this family" if not recipe else \
                    "a variant of real shapes: at tiny shapes it is its family's item again"
                items.append(item)
                continue
            base = [*model_overrides(family, tiny), *extra, *common_overrides(recipe, out, key, item.steps)]
            candidates = [(base + tiny_overrides(recipe, family), ["tiny shapes"])] if tiny else \
                shrink_candidates(recipe, base + ["/base/distributed=local"])
            items.append(_fitted(item, candidates, tiny, card_gib))
    comparison = reference.TINY if tiny else reference.GPU
    epochs = 2 if tiny else 3  # the reference's first epoch warms up (kernels, autotuning): measured after it
    sd3 = [*model_overrides("sd3", tiny), *reference.genalign_overrides(comparison)]
    recipe = RECIPES["sd3"]
    items.append(Item("flow_grpo", 2, "Flow-GRPO's train_sd3.py", "reference", family="sd3", steps=epochs,
                      settings=dataclasses.asdict(comparison), skip=reference.missing(),
                      estimate_s=4.0 + epochs * 2.0 if tiny else START_S + epochs * comparison.images / 0.9))
    same = Item("genalign", 2, "genalign, same settings", "train", recipe, family="sd3")  # step 2 is measured
    items.append(_fitted(same, [([*sd3, *common_overrides(recipe, out, same.key, same.steps)], [])], tiny, card_gib))
    profile = Item("rollout_profile", 3, "rollout profile", "profile", recipe, family="sd3")
    items.append(_fitted(profile, [([*sd3, *common_overrides(recipe, out, profile.key, 2)], [])], tiny, card_gib))
    for key, title, extra in LEVERS:
        lever = Item(key, 3, title, "train", recipe, family="sd3", steps=3, compiles="model.compile=true" in extra)
        lever = _fitted(lever, [([*sd3, *extra, *common_overrides(recipe, out, key, 3)], [])], tiny, card_gib)
        if tiny and lever.compiles:
            lever.skip = "compiles: inductor on the CPU takes minutes (run on a GPU)"
        items.append(lever)
    return items


def reuse_runs(items: list[Item]) -> None:
    """An item whose run an earlier item makes already (the same config, at least as many steps)
    takes that run's result instead of making it twice (SD3.5 Medium's family item is the
    comparison's genalign side)."""
    for index, item in enumerate(items):
        earlier = [e for e in items[:index] if e.config and e.config == item.config and e.steps >= item.steps
                   and e.kind == item.kind == "train" and not e.skip and not e.same_as]
        if earlier and not item.skip:
            item.same_as, item.estimate_s = earlier[0].key, 0.0


def warm_imports(items: list[Item]) -> None:
    """Import in the parent what every child would import first (the trainer, each family's
    policy, tiny builder and pipeline class): forked children inherit the modules."""
    import importlib

    import genalign.training.trainer  # noqa: F401

    for family in sorted({item.family for item in items if item.family and not item.skip}):
        spec = family_spec(family)
        spec.policy_class()
        if spec.tiny_builder:
            importlib.import_module(spec.tiny_builder.split(":")[0])
        if spec.pipeline_class:
            getattr(importlib.import_module("diffusers" if spec.export == "diffusers" else "transformers"),
                    spec.pipeline_class)


def _fitted(item: Item, candidates, tiny: bool, card_gib: float | None) -> Item:
    """The first candidate whose planned seconds fit ITEM_CAP_S (else the most shrunk), with its
    settings, memory plan and time plan; a config the recipe refuses is the item's skip reason."""
    chosen = None
    for overrides, shrunk in candidates:
        try:
            cfg = load_config(item.recipe, overrides)
        except UserError as exc:
            item.skip = f"config refused: {str(exc).splitlines()[-1].strip()}"
            continue
        chosen = (overrides, shrunk, cfg)
        if estimate_s(cfg, item.family, tiny, item.steps) <= ITEM_CAP_S or tiny:
            break
    if chosen is None:
        return item
    item.overrides, item.shrunk, cfg = chosen
    item.skip, item.settings = None, settings_of(cfg)
    item.config = config_to_dict(dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, output_dir="",
                                                                                         num_steps=0)))
    item.plan_gib = None if tiny else plan_gib(cfg, item.family)  # at tiny shapes no real model runs to compare
    item.estimate_s = estimate_s(cfg, item.family, tiny, item.steps)
    if not tiny and card_gib and item.plan_gib and item.plan_gib > PLAN_HEADROOM * card_gib:
        item.skip = (f"the memory plan needs {item.plan_gib:.1f} GiB, over {PLAN_HEADROOM:.0%} of this card's "
                     f"{card_gib:.0f} GiB: run it on a larger card")
    return item


# ------------------------------------------------------------------ running one item (a forked child)
def child(item: Item, item_dir: Path, tiny: bool) -> None:
    """Run one item; write `child.json` as it goes (the parent reads it, and metrics.csv, even
    when it had to end the child)."""
    item_dir.mkdir(parents=True, exist_ok=True)
    log = open(item_dir / "log.txt", "w", buffering=1)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    state: dict = {}

    def note(**values) -> None:
        state.update(values)
        (item_dir / "child.json").write_text(json.dumps(state))

    try:
        if item.kind == "reference":
            settings = reference.Settings(**item.settings)
            note(**reference.run_reference(settings, "cpu" if tiny else "cuda", epochs=item.steps,
                                           shapes="tiny" if tiny else "real"))
        else:
            from genalign.training.trainer import Trainer

            start = time.perf_counter()
            trainer = Trainer(load_config(item.recipe, item.overrides))
            note(load_s=time.perf_counter() - start)
            with rollout_profile(trainer) if item.kind == "profile" else contextlib.nullcontext() as profile:
                train_steps(trainer, item.steps)
            note(profile=profile)
            if torch.cuda.is_available():
                note(peak_gib=torch.cuda.max_memory_allocated() / GIB)
        note(done=True)
    except BaseException as exc:  # noqa: BLE001 - the item's failure is its result, never the suite's
        traceback.print_exc()
        note(error=f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"[:400])
    finally:
        log.flush()
        os._exit(0)


def train_steps(trainer, steps: int) -> None:
    """The trainer's own steps (`Trainer.train_step`: rollout, reward, parity on step 1, update),
    each row logged to metrics.csv as it ends; no evaluation, checkpoint or export (a full
    fine-tune's final checkpoint alone would write its optimizer state to disk: tens of GB)."""
    try:
        trainer.output_dir.mkdir(parents=True, exist_ok=True)
        for step in range(1, steps + 1):
            trainer.metrics.log(step, trainer.train_step(step))
    finally:
        trainer.close()


@contextlib.contextmanager
def rollout_profile(trainer):
    """Seconds per step spent, during the rollout only, in the transformer, the VAE's decoder and
    the text encoders (synchronised forward hooks), and the rollout's total."""
    policy, totals = trainer.policy, {"transformer_s": 0.0, "vae_decode_s": 0.0, "text_encoders_s": 0.0}
    modules = [("transformer_s", policy.transformer)]
    if getattr(policy, "vae", None) is not None and hasattr(policy.vae, "decoder"):
        modules.append(("vae_decode_s", policy.vae.decoder))
    modules += [("text_encoders_s", encoder) for encoder in getattr(policy, "text_encoders", [])]
    in_rollout, started, handles = [False], {}, []

    def sync() -> None:
        if policy.device.type == "cuda":
            torch.cuda.synchronize(policy.device)

    for name, module in modules:
        def before(_module, _args, name=name):
            if in_rollout[0]:
                sync()
                started[name] = time.perf_counter()

        def after(_module, _args, _output, name=name):
            if in_rollout[0] and name in started:
                sync()
                totals[name] += time.perf_counter() - started.pop(name)
        handles += [module.register_forward_pre_hook(before), module.register_forward_hook(after)]
    collect = trainer.source.collect
    rollouts: list[float] = []

    def timed_collect(step):
        in_rollout[0] = True
        try:
            data = collect(step)
        finally:
            in_rollout[0] = False
        rollouts.append(data.times["time_rollout_s"])
        return data

    trainer.source.collect = timed_collect
    try:
        yield totals
    finally:
        for handle in handles:
            handle.remove()
        steps = max(len(rollouts), 1)
        for name in list(totals):
            totals[name] /= steps
        totals["rollout_s"] = sum(rollouts) / steps
        totals["other_s"] = totals["rollout_s"] - totals["transformer_s"] - totals["vae_decode_s"] - \
            totals["text_encoders_s"]


# ------------------------------------------------------------------ the parent
def probe_card(tiny: bool) -> dict:
    """The card's name and memory, read in a forked child (the parent never initialises CUDA)."""
    if tiny or not torch.cuda.is_available():
        return {"name": "CPU (tiny shapes, float32: a smoke test, not speed figures)", "memory_gib": None}
    reader, writer = multiprocessing.get_context("fork").Pipe(duplex=False)

    def read() -> None:
        props = torch.cuda.get_device_properties(0)
        writer.send({"name": props.name, "memory_gib": props.total_memory / GIB,
                     "capability": f"{props.major}.{props.minor}"})
        os._exit(0)

    process = multiprocessing.get_context("fork").Process(target=read)
    process.start()
    process.join(120)
    return reader.recv() if reader.poll() else {"name": "unknown CUDA device", "memory_gib": None}


def result_of(item: Item, item_dir: Path, elapsed_s: float, killed: bool) -> dict:
    state = json.loads((item_dir / "child.json").read_text()) if (item_dir / "child.json").is_file() else {}
    rows = []
    metrics = item_dir / "run" / "metrics.csv"
    if metrics.is_file():
        with open(metrics, newline="") as handle:
            rows = list(csv.DictReader(handle))
    out = {**dataclasses.asdict(item), "elapsed_s": elapsed_s, **{k: v for k, v in state.items() if k != "done"}}
    if rows:
        def number(row, key):
            return float(row[key]) if row.get(key) not in (None, "") else None
        steps = [{"step": int(r["step"]), "images_per_s": number(r, "step_images_per_s"),
                  "rollout_s": number(r, "time_rollout_s"), "reward_s": number(r, "time_reward_s"),
                  "train_s": number(r, "time_train_s"), "loss": number(r, "loss"),
                  "peak_gib": number(r, "gpu_peak_allocated_gib")} for r in rows]
        losses = [s["loss"] for s in steps if s["loss"] is not None]
        peaks = [s["peak_gib"] for s in steps if s["peak_gib"] is not None]
        out.update(steps=steps, images_per_s=steps[-1]["images_per_s"], parity=number(rows[0], "parity_max_abs_log_prob_diff"),
                   finite=all(math.isfinite(v) for v in losses) and "error" not in state,
                   peak_gib=max(peaks) if peaks else state.get("peak_gib"))
        if out.get("plan_gib") and out.get("peak_gib"):
            out["peak_over_plan"] = out["peak_gib"] / out["plan_gib"]
    if state.get("error"):
        out.update(status="failed", reason=state["error"])
    elif killed:
        out.update(status="stopped", reason=f"stopped at the budget after {len(rows)} of {item.steps} steps")
    elif state.get("done"):
        out["status"] = "ok"
    else:
        out.update(status="failed", reason="the child ended without a result (killed by the system?)")
    return out


def ratios(results: list[dict]) -> dict:
    by_key = {r["key"]: r for r in results if r.get("status") == "ok" and r.get("images_per_s")}
    ref = by_key.get("flow_grpo")
    if not ref:
        return {}
    return {f"{by_key[k]['title']} / Flow-GRPO": by_key[k]["images_per_s"] / ref["images_per_s"]
            for k in ("genalign", *(key for key, _, _ in LEVERS)) if k in by_key}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="tiny shapes, float32, on the CPU (the smoke test)")
    parser.add_argument("--budget-s", type=float, default=420.0, help="wall-clock seconds for the whole suite")
    parser.add_argument("--out", default=os.environ.get("OUT", "gpu_suite_out"), help="folder for the JSON and table")
    parser.add_argument("--only", nargs="*", help="run only these item keys (the plan lists them)")
    args = parser.parse_args(argv)
    start, out = time.perf_counter(), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "items" if args.tiny else Path(os.environ.get("TMPDIR", "/tmp")) / "gpu_suite_items"
    if not args.tiny and not torch.cuda.is_available():
        parser.error("no CUDA device: run on a GPU, or pass --tiny for the CPU smoke test")
    card = probe_card(args.tiny)
    items = build_items(work, args.tiny, card.get("memory_gib"))
    if args.only:
        items = [i for i in items if i.key in args.only]
    reuse_runs(items)
    warm_imports(items)
    header = {"mode": "tiny" if args.tiny else "real", "card": card, "budget_s": args.budget_s,
              "versions": versions(), "prepared": prepared()}
    print(f"GPU suite on {card['name']}" + (f" ({card['memory_gib']:.0f} GiB)" if card.get("memory_gib") else "") +
          f", budget {args.budget_s:.0f} s; time plan:", flush=True)
    planned = 0.0
    for item in items:
        if not item.skip:
            planned += item.estimate_s
        print(f"  [{item.section}] {item.key:<20} " + (f"skip: {item.skip}" if item.skip else
              f"the run of {item.same_as}" if item.same_as else
              f"~{item.estimate_s:4.0f} s (cumulative {planned:4.0f} s)" +
              (f", plan {item.plan_gib:.1f} GiB" if item.plan_gib else "") +
              (f", shrunk: {'; '.join(item.shrunk)}" if item.shrunk else "")), flush=True)
    results: list[dict] = []
    for item in items:
        left = args.budget_s - (time.perf_counter() - start) - FINISH_S
        if item.skip is None and not item.estimate_s <= left:
            item.skip = f"not run: ~{item.estimate_s:.0f} s planned, {max(left, 0):.0f} s of the budget left"
        if item.skip is not None:
            results.append({**dataclasses.asdict(item), "status": "skipped", "reason": item.skip})
        elif item.same_as is not None:
            earlier = next(r for r in results if r["key"] == item.same_as)
            results.append({**earlier, **{k: getattr(item, k) for k in ("key", "section", "title", "same_as")},
                            "elapsed_s": 0.0})
        else:
            results.append(run_item(item, work / item.key, args.tiny, left))
        line = results[-1]
        print(f"[{item.section}] {item.key}: {line['status']}" + (f" ({line['reason']})" if line.get("reason") else "") +
              (f", {line['images_per_s']:.3g} images/s" if line.get("images_per_s") else "") +
              (f", peak {line['peak_gib']:.1f} GiB" if line.get("peak_gib") else "") +
              (f", plan {line['plan_gib']:.1f} GiB" if line.get("plan_gib") else ""), flush=True)
        write_outputs(out, {**header, "elapsed_s": time.perf_counter() - start, "items": results,
                            "ratios": ratios(results)})
    report = {**header, "elapsed_s": time.perf_counter() - start, "items": results, "ratios": ratios(results)}
    write_outputs(out, report)
    for name, value in report["ratios"].items():
        print(f"{name}: {value:.2f}x")
    print(f"wrote {out / 'gpu_suite.json'} and {out / 'gpu_suite.md'} in {report['elapsed_s']:.0f} s", flush=True)
    return 0


def run_item(item: Item, item_dir: Path, tiny: bool, limit_s: float) -> dict:
    context = multiprocessing.get_context("fork")
    begin = time.perf_counter()
    process = context.Process(target=child, args=(item, item_dir, tiny))
    process.start()
    process.join(limit_s)
    killed = process.is_alive()
    if killed:
        process.kill()
        process.join()
    result = result_of(item, item_dir, time.perf_counter() - begin, killed)
    if result["status"] == "failed":
        tail = (item_dir / "log.txt").read_text(errors="replace").splitlines()[-12:] if (item_dir / "log.txt").is_file() else []
        print("\n".join(f"    | {line}" for line in tail), flush=True)
    return result


def versions() -> dict:
    import importlib.metadata

    found = {}
    for name in ("torch", "diffusers", "transformers", "peft", "accelerate"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[name] = importlib.metadata.version(name)
    return found


def prepared() -> dict:
    marker = REPO / ".gpu_prepared.json"
    found = json.loads(marker.read_text()) if marker.is_file() else {}
    found["flow_grpo_commit"] = reference.prepared_commit()
    return found


if __name__ == "__main__":
    sys.exit(main())
