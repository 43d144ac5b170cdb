"""What the GPU suite runs and how long it should take: its items, planned before any runs.

`benchmarks/gpu_suite.py` runs them. Here: every registered family's recipe at its real shapes
(or the tiny ones), shrunk in counts until its planned seconds fit, its memory plan (through
`preflight/memory_plan.estimate_memory`) against the card, the comparison with Flow-GRPO's loop, the
rollout profile and the levers, and which items are one run. Nothing here touches CUDA: the
parent process plans, forked children run.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from benchmarks import flow_grpo_reference as reference
from benchmarks.random_weights import random_family_overrides
from genalign.config.catalog import recipe_paths
from genalign.config.errors import UserError
from genalign.config.loader import compose_config, config_to_dict
from genalign.models.registry import MODEL_FAMILIES
from genalign.models.spec import family_spec
from genalign.preflight.load import load_config

GIB = 2**30
VALUE_ORDER = (
    "sd3",
    "flux",
    "wan",
    "janus",
    "nextstep",
    "cosmos",
    "qwen_image",
    "flux_kontext",
    "flux2",
    "wan_i2v",
    "hunyuan_video15",
    "hunyuan_video15_i2v",
    "qwen_image_edit",
    "qwen_image_edit_plus",
    "toy",
)
"""Families first in this order (the most used first); a family registered later comes after them."""
RECIPES = {
    "sd3": "experiment/diffusion/sd3_5/online_grpo_ocr",
    "wan": "experiment/diffusion/wan_2_1/online_grpo_pickscore",
    "wan_i2v": "experiment/diffusion/wan_2_1/i2v_14b_online_grpo_pickscore",
    "toy": "experiment/toy/shapes_grpo",
    "z_image": "experiment/diffusion/z_image/turbo_online_grpo_pickscore",
    "flux2": "experiment/diffusion/flux2/online_grpo_clip_pickscore",  # in one process: 121.5 GiB planned
}
"""A family's suite recipe where it has several; otherwise its one recipe."""
VARIANTS = {
    "sd3": [("sd3_5_large", "SD3.5 Large", ["model.path=stabilityai/stable-diffusion-3.5-large"])],
    "wan": [("wan2_2_t2v_a14b", "Wan 2.2 T2V-A14B", []), ("wan2_2_ti2v_5b", "Wan 2.2 TI2V-5B", [])],
    "flux2_klein": [("flux2_klein_4b", "FLUX.2 [klein] 4B", ["model.path=black-forest-labs/FLUX.2-klein-4B"])],
    "wan_i2v": [
        ("wan2_2_i2v_a14b", "Wan 2.2 I2V-A14B", []),
        ("wan2_2_ti2v_5b_i2v", "Wan 2.2 TI2V-5B I2V", []),
        ("wan2_1_flf2v", "Wan 2.1 FLF2V", []),
    ],
    "z_image": [("z_image_base", "Z-Image (base)", [])],
    "qwen_image_edit_plus": [
        ("qwen_image_edit_2511", "Qwen-Image-Edit-2511", ["model.path=Qwen/Qwen-Image-Edit-2511"])
    ],
}
"""More real shapes of a family: (key, title, overrides) run after the family's own item."""
VARIANT_RECIPES = {
    "sd3_5_large": "experiment/diffusion/sd3_5/online_grpo_ocr_large",
    "wan2_2_t2v_a14b": "experiment/diffusion/wan_2_2/online_grpo_pickscore",
    "wan2_2_ti2v_5b": "experiment/diffusion/wan_2_2/ti2v_5b_online_grpo_pickscore",
    "wan2_2_i2v_a14b": "experiment/diffusion/wan_2_2/i2v_a14b_online_grpo_pickscore",
    "wan2_2_ti2v_5b_i2v": "experiment/diffusion/wan_2_2/ti2v_5b_i2v_online_grpo_pickscore",
    "wan2_1_flf2v": "experiment/diffusion/wan_2_1/flf2v_14b_online_grpo_pickscore",
    "z_image_base": "experiment/diffusion/z_image/online_grpo_pickscore",
}
"""A variant's own recipe, where it has one (else the family's)."""
LEVERS = [
    ("compiled", "model.compile=true", ["model.compile=true"]),
    (
        "compiled_split_cfg",
        "compiled, split CFG",
        ["model.compile=true", "model.cfg_batch=split", "algorithm.detach_uncond=true"],
    ),
    (
        "compiled_float8",
        "compiled, float8 matmuls (torchao, tensorwise)",
        ["model.compile=true", "model.float8=tensorwise"],
    ),
]
"""Section 3: SD3.5 Medium at the comparison settings with each lever (key, title, overrides)."""
EAGER_FLOP_S, COMPILED_FLOP_S = 180e12, 360e12
"""Transformer FLOP/s the time plan assumes: SD3.5 Medium's measured step on an H100 (docs/benchmarks.md)."""
FULL_ROWS = 16384
"""Token rows per transformer call (samples x CFG branches x tokens) from which that rate holds;
below it the rate falls in proportion. Seen on the H100, 2026-11-26: Wan 2.1 1.3B at one sample
and two CFG rows a call (3k rows) ran about 57 TFLOP/s, SD3.5 Medium at 8 x 2 (22k) the rate above."""
START_S, STEP_EXTRA_S, COMPILE_S, TOKEN_S = 10.0, 2.0, 110.0, 0.08
"""Time plan on a GPU: a child's start (fork, random weights, LoRA), a step's work beside the
transformer (encoders, VAE decode, reward), regional compilation, one sampled image token of a
chunk (Janus-Pro 7B, CFG, 8 a chunk: 46 s for 576 tokens on the H100, 2026-11-26)."""
ITEM_CAP_S = 75.0
"""Section 1 shrinks an item's counts until its planned seconds fit this."""
FINISH_S = 5.0
"""Kept back from the budget to write the outputs."""


@dataclasses.dataclass
class Item:
    """One thing the suite runs (a forked child), as planned; the JSON records its fields."""

    key: str
    """Its name in the time plan, the JSON and `--only`."""
    section: int
    title: str
    kind: str
    """"train" (the trainer's steps), "profile" (the same with the rollout timed by module) or
    "reference" (Flow-GRPO's loop)."""
    recipe: str = ""
    overrides: list[str] = dataclasses.field(default_factory=list)
    family: str = ""
    steps: int = 2
    """Training steps (the reference: epochs, the first one warm-up)."""
    shrunk: list[str] = dataclasses.field(default_factory=list)
    """What was shrunk from the recipe ("group 8 -> 2")."""
    settings: dict = dataclasses.field(default_factory=dict)
    plan_gib: float | None = None
    """The memory plan's peak per GPU of its config."""
    estimate_s: float = 0.0
    """Its planned seconds (the time plan)."""
    skip: str | None = None
    """Why it does not run, or None."""
    compiles: bool = False
    same_as: str | None = None
    """An earlier item whose run is this item's (the same config and at least as many steps)."""
    config: dict | None = dataclasses.field(default=None, repr=False)


def family_recipes() -> dict[str, str]:
    """Every registered family -> its suite recipe ("" when none is shipped), in value order."""
    found: dict[str, list[str]] = {}
    for name in recipe_paths():
        found.setdefault(compose_config(name).model.family, []).append(name)
    order = [f for f in VALUE_ORDER if f in MODEL_FAMILIES] + [
        f for f in MODEL_FAMILIES.names() if f not in VALUE_ORDER
    ]
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
    return [
        *(f"reward.components.{name}=0.0" for name in components if name != "jpeg_compressibility"),
        "reward.components.jpeg_compressibility=1.0",
        "reward.async_scoring=true",
        "eval.every=0",
        "eval.at_start=false",
        "trainer.save_every=0",
        "trainer.progress_bar=false",
        f"trainer.num_steps={steps}",
        f"trainer.output_dir={out / key / 'run'}",
    ]


def tiny_overrides(recipe: str, family: str) -> list[str]:
    """The tiny models' shapes: the smallest size the family draws, 5 frames for video (4k + 1,
    what every video VAE here reads: HunyuanVideo 1.5's compresses time by 4, the tiny Wan VAE's
    by 2, and the Wan VAE encodes an image-to-video condition in chunks of 4 after the first),
    4 steps (the recipe's SDE window fitted into them), one prompt group of 2. Prompts of 16
    tokens, except where a prompt carries source pictures (an editing family whose text encoder
    reads their vision tokens: the recipe's budget, which the tiny shapes do not shrink)."""
    cfg, spec = compose_config(recipe), family_spec(family)
    size = spec.fixed_size or 2 * spec.size_multiple
    frames = 5 if cfg.model.num_frames > 1 else 1
    text_tokens = cfg.model.max_sequence_length if spec.source_images else 16
    window = cfg.rollout.sde_window
    # a recipe's SDE window that does not fit 4 steps (Z-Image base: 3 of the first 8;
    # HunyuanVideo 1.5: 8 of the first 9) moves to the first half of them, at most 2 steps wide
    fitted = (
        ["rollout.sde_window.lo=0", "rollout.sde_window.hi=null", f"rollout.sde_window.size={min(window.size, 2)}"]
        if window.problems(4)
        else []
    )
    return [
        *fitted,
        "/base/distributed=local",
        f"rollout.height={size}",
        f"rollout.width={size}",
        f"model.num_frames={frames}",
        f"model.max_sequence_length={text_tokens}",
        f"rollout.sde_window.size={min(cfg.rollout.sde_window.size, 2)}",
        # NextStep-1: 4 head steps; a family without denoising steps (Janus-Pro) refuses the key
        *(["rollout.num_steps=4"] if spec.reads("rollout.num_steps") else []),
        "rollout.n=2",
        "rollout.rollout_batch_size=1",
        "rollout.sample_batch_size=2",
        "actor.micro_batch_size=2",
        "actor.gradient_accumulation_steps=1",
    ]


def tiny_source_overrides(recipe: str, out: Path) -> list[str]:
    """For a recipe whose prompts carry source images (an editing family), its manifests copied
    under `out` with every source image resized to the tiny size `tiny_overrides` sets (a
    manifest's sources must be the run's size); [] for text prompts."""
    from PIL import Image

    from genalign.data.prompts import load_manifest
    from genalign.data.source_images import SOURCE_KEY, sources_of

    cfg = compose_config(recipe)
    size = family_spec(cfg.model.family).fixed_size or 2 * family_spec(cfg.model.family).size_multiple
    overrides = []
    for name in ("manifest", "eval_manifest"):
        examples = load_manifest(getattr(cfg.data, name), f"data.{name}")
        if not any(sources_of(example.metadata) for example in examples):
            continue
        rows = []
        for index, example in enumerate(examples):
            paths = []
            for number, path in enumerate(sources_of(example.metadata)):
                copy = out / "sources" / f"{name}_{index}_{number}.png"
                copy.parent.mkdir(parents=True, exist_ok=True)
                with Image.open(path) as image:
                    image.convert("RGB").resize((size, size), Image.Resampling.BICUBIC).save(copy)
                paths.append(str(copy))
            rows.append({"prompt": example.prompt, **example.metadata, SOURCE_KEY: paths})
        copied = out / f"{name}.jsonl"
        copied.write_text("".join(json.dumps(row) + "\n" for row in rows))
        overrides.append(f"data.{name}={copied}")
    return overrides


def settings_of(cfg) -> dict:
    from genalign.preflight.step_sizes import StepSizes

    plan, m, r = StepSizes.from_config(cfg), cfg.model, cfg.rollout
    return {
        "size": f"{r.width}x{r.height}" + (f"x{m.num_frames}" if m.num_frames > 1 else ""),
        "dtype": m.dtype,
        "train_mode": m.train_mode,
        # None for a family without denoising steps (Janus-Pro's image tokens): its rollout.num_steps is unread
        "denoising_steps": r.num_steps if family_spec(m.family, m.allow_import).reads("rollout.num_steps") else None,
        "trained_steps": plan.num_train_timesteps,
        "cfg": r.guidance_scale,
        "prompts": plan.prompts_per_step,
        "group": plan.samples_per_prompt,
        "chunk": plan.rollout_micro_batch,
        "micro_batch": plan.train_micro_batch,
    }


def plan_gib(cfg) -> float:
    """The memory plan's peak per GPU (`preflight/memory_plan.estimate_memory`) of `cfg` (the
    benchmark's dotted family plans as the registered family its spec names)."""
    from genalign.preflight.memory_plan import estimate_memory

    # a stated card size: the plan then never reads the device (the parent leaves CUDA to its children)
    resources = dataclasses.replace(cfg.distributed.resources, gpu_memory_gib=1e6)
    distributed = dataclasses.replace(cfg.distributed, resources=resources)
    planned = estimate_memory(dataclasses.replace(cfg, distributed=distributed))
    return max(role.peak_bytes for role in planned.roles) / GIB


def estimate_s(cfg, family: str, tiny: bool, steps: int) -> float:
    """Planned seconds of an item: start, then per step the transformer's FLOPs (12·width² per
    token per block, twice per multiply-add, plus attention) at the assumed rate (lower for calls
    of fewer than FULL_ROWS token rows), the
    forward-backward of replay (2x a forward for LoRA, 3x for a full fine-tune) and the KL
    reference, or for a token family one forward per image token; compilation once."""
    if tiny:
        return 4.0 + 2.0 * steps
    from genalign.models.architecture import load_architecture
    from genalign.preflight.step_sizes import StepSizes

    arch = load_architecture(family_spec(family), cfg.model.path)
    plan, m, r = StepSizes.from_config(cfg), cfg.model, cfg.rollout
    if arch is None:
        return START_S + steps * 10.0
    image = arch.geometry.image_tokens(r.height, r.width, m.num_frames) * (1 + arch.geometry.source_images)  # + sources
    tokens = image + (m.max_sequence_length + arch.geometry.extra_text_tokens if arch.geometry.text_in_sequence else 0)
    row = 2 * tokens * arch.num_layers * (12 * arch.hidden_size**2 + 2 * tokens * arch.hidden_size)
    cfg_rows = 2 if plan.uses_cfg else 1

    def rate(samples_per_call: int) -> float:
        full = COMPILED_FLOP_S if m.compile else EAGER_FLOP_S
        return full * min(1.0, samples_per_call * cfg_rows * tokens / FULL_ROWS)

    samples = plan.samples_per_step
    replay = (
        samples * plan.num_train_timesteps * cfg_rows * ((3 if m.train_mode == "full" else 2) + plan.needs_reference)
    )
    if arch.geometry.kv_cache:
        rollout_s = samples / plan.rollout_micro_batch * image * TOKEN_S
    else:
        rollout_s = samples * r.num_steps * cfg_rows * row / rate(plan.rollout_micro_batch)
    step = rollout_s + replay * row / rate(plan.train_micro_batch) + STEP_EXTRA_S
    return START_S + steps * step + (COMPILE_S if m.compile else 0.0)


def shrink_candidates(recipe: str, base: list[str]):
    """(overrides, what was shrunk) from the least shrunk: the fewest prompt groups whose samples
    fill whole sampling chunks and replay micro-batches; then a group no smaller than those
    (they set the memory); then half the denoising steps, down to 2 (and the SDE window, and
    one trained step)."""
    cfg = compose_config(recipe, base)
    r, actor = cfg.rollout, cfg.actor
    has_steps = family_spec(cfg.model.family, cfg.model.allow_import).reads("rollout.num_steps")
    micro = actor.micro_batch_size or r.sample_batch_size
    unit = math.lcm(r.sample_batch_size, micro)  # samples per step come in whole chunks and micro-batches
    for group in [r.n] + ([max(2, unit)] if max(2, unit) < r.n else []):
        prompts = math.lcm(group, unit) // group
        accumulation = math.gcd(actor.gradient_accumulation_steps, prompts * group // micro * actor.num_inner_epochs)
        steps = r.num_steps
        while True:
            overrides = [
                *base,
                f"rollout.rollout_batch_size={prompts}",
                f"rollout.n={group}",
                *([f"rollout.num_steps={steps}"] if has_steps else []),  # Janus-Pro: no denoising steps
                f"actor.gradient_accumulation_steps={accumulation}",
            ]
            shrunk = [
                f"{what} {before} -> {after}"
                for what, before, after in (
                    ("prompts/step", r.rollout_batch_size, prompts),
                    ("group", r.n, group),
                    ("denoising steps", r.num_steps, steps),
                )
                if before != after
            ]
            yield overrides, shrunk
            halved = steps // 2  # still at least 2, the SDE window twice over, and one trained step
            if halved < max(2, 2 * r.sde_window.size) or int(halved * cfg.algorithm.timestep_fraction) < 1:
                break
            if not has_steps:
                break  # the family has no denoising steps: not a count to shrink
            steps //= 2


def build_items(out: Path, tiny: bool, card_gib: float | None) -> list[Item]:
    items: list[Item] = []
    for family, recipe in family_recipes().items():
        entries = [(family, family_spec(family).name, [])] + VARIANTS.get(family, [])
        for key, title, extra in entries:
            item_recipe = VARIANT_RECIPES.get(key, recipe)
            item = Item(key, 1, title, "train", item_recipe, family=family)
            if not item_recipe or (tiny and key != family and not _own_tiny_form(item_recipe, extra, family)):
                item.skip = (
                    "no shipped recipe names this family"
                    if not recipe
                    else "a variant of real shapes: at tiny shapes it is its family's item again"
                )
                items.append(item)
                continue
            base = [*model_overrides(family, tiny), *extra, *common_overrides(item_recipe, out, key, item.steps)]
            candidates = (
                [
                    (
                        base + tiny_overrides(item_recipe, family) + tiny_source_overrides(item_recipe, out / key),
                        ["tiny shapes"],
                    )
                ]
                if tiny
                else shrink_candidates(item_recipe, base + ["/base/distributed=local"])
            )
            items.append(_fitted(item, candidates, tiny, card_gib))
    comparison = reference.TINY if tiny else reference.GPU
    epochs = 2 if tiny else 3  # the reference's first epoch warms up (kernels, autotuning): measured after it
    sd3 = [*model_overrides("sd3", tiny), *reference.genalign_overrides(comparison)]
    recipe = RECIPES["sd3"]
    items.append(
        Item(
            "flow_grpo",
            2,
            "Flow-GRPO's train_sd3.py",
            "reference",
            family="sd3",
            steps=epochs,
            settings=dataclasses.asdict(comparison),
            skip=reference.missing(),
            estimate_s=4.0 + epochs * 2.0 if tiny else START_S + epochs * comparison.images / 0.9,
        )
    )
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


def _own_tiny_form(recipe: str, extra: list[str], family: str) -> bool:
    """Whether a variant's model.path has a tiny model of its own form (`FamilySpec.tiny_variants`:
    Wan 2.2's two experts, TI2V-5B's VAE), so its tiny item is not its family's again."""
    path = compose_config(recipe, extra).model.path
    return path in dict(family_spec(family).tiny_variants)


def select(items: list[Item], only: list[str]) -> list[Item]:
    """The items `--only` names, in the order it names them (a later GPU session puts first what
    has not run yet); a key the plan does not have is an error listing the plan's keys."""
    by_key = {item.key: item for item in items}
    unknown = [key for key in only if key not in by_key]
    if unknown:
        raise ValueError(f"--only {' '.join(unknown)}: not in the time plan; its keys are {', '.join(by_key)}")
    return [by_key[key] for key in dict.fromkeys(only)]


def reuse_runs(items: list[Item]) -> None:
    """An item whose run an earlier item makes already (the same config, at least as many steps)
    takes that run's result instead of making it twice (SD3.5 Medium's family item is the
    comparison's genalign side)."""
    for index, item in enumerate(items):
        earlier = [
            e
            for e in items[:index]
            if e.config
            and e.config == item.config
            and e.steps >= item.steps
            and e.kind == item.kind == "train"
            and not e.skip
            and not e.same_as
        ]
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
            getattr(
                importlib.import_module("diffusers" if spec.export == "diffusers" else "transformers"),
                spec.pipeline_class,
            )


def _fitted(item: Item, candidates, tiny: bool, card_gib: float | None) -> Item:
    """The first candidate whose planned seconds fit ITEM_CAP_S (else the least shrunk of the
    quickest: fewer denoising steps do not shorten a token family's rollout), with its settings,
    memory plan and time plan; a config the recipe refuses is the item's skip reason."""
    chosen, quickest = None, float("inf")
    for overrides, shrunk in candidates:
        try:
            cfg = load_config(item.recipe, overrides)
        except UserError as exc:
            item.skip = f"config refused: {str(exc).splitlines()[-1].strip()}"
            continue
        planned = estimate_s(cfg, item.family, tiny, item.steps)
        if planned < quickest:
            chosen, quickest = (overrides, shrunk, cfg), planned
        if planned <= ITEM_CAP_S or tiny:
            break
    if chosen is None:
        return item
    item.overrides, item.shrunk, cfg = chosen
    item.skip, item.settings = None, settings_of(cfg)
    item.config = config_to_dict(
        dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, output_dir="", num_steps=0))
    )
    item.plan_gib = None if tiny else plan_gib(cfg)  # at tiny shapes no real model runs to compare
    item.estimate_s = estimate_s(cfg, item.family, tiny, item.steps)
    # the run's own rule: the plan's peak (allocator headroom and CUDA context included) within
    # distributed.resources.gpu_memory_fraction of the card, as the trainer would check it
    fraction = cfg.distributed.resources.gpu_memory_fraction or 1.0
    if not tiny and card_gib and item.plan_gib and item.plan_gib > fraction * card_gib:
        item.skip = (
            f"the memory plan needs {item.plan_gib:.1f} GiB, over {fraction:.0%} of this card's "
            f"{card_gib:.0f} GiB: run it on a larger card"
        )
    return item
