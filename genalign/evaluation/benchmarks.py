"""Benchmarks: a prompt set, the scorers that judge it, the summary rule, the paper's protocol.

Where it fits: `genalign eval --benchmark NAME` and the trainer's fixed evaluation both
evaluate a `Benchmark`: the trainer's is `run_benchmark(cfg)` (its eval manifest, its training
reward, gold rewards and quality measures, its `eval.*` settings), so the two agree by
construction. A shipped benchmark (`BENCHMARKS`) fixes what the papers fix: the prompt set,
the scorers and their settings, how scores are summarised (GenEval's per-tag accuracy, OCR
accuracy and edit distance, a mean with its standard error per scorer), and the sampling
protocol as `eval.*` defaults, each with where it comes from (`sources`). A user benchmark is a
YAML file naming a manifest and reward components (`user_benchmark`).

Scorer groups: each group is one set of weighted reward components scored together; its total
is the group's number ("eval_reward" is the training reward, "gold" the gold rewards, and a
group per measure for scorers that must never be summed: quality measures, DrawBench's six
preference scorers).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from genalign.config.errors import UserError
from genalign.config.safe_yaml import safe_load_unique

SUMMARIES = ("geneval", "ocr", "mean")
"""How a benchmark's per-sample scores become its table (evaluation/summaries.py)."""


class BenchmarkError(UserError, ValueError):
    """A benchmark that cannot be used; the message names the benchmark or its file."""


@dataclass(frozen=True)
class Benchmark:
    name: str
    manifest: str
    """Prompt manifest (resolved like data.eval_manifest: cwd, $GENALIGN_DATA_ROOT, the package)."""
    groups: dict[str, dict[str, float]]
    """Group name -> {reward component: weight}; each group's total is scored and summarised."""
    summary: str = "mean"
    """"geneval", "ocr" or "mean" (SUMMARIES)."""
    score_group: str = ""
    """The group the geneval / ocr summary reads (its per-sample 0/1 correctness or OCR score)."""
    reward_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """reward.kwargs the protocol fixes (the user's reward.kwargs overrides win)."""
    protocol: dict[str, Any] = field(default_factory=dict)
    """Sampling settings as config overrides ({"eval.num_steps": 40, ...}); the user's win."""
    sources: dict[str, str] = field(default_factory=dict)
    """Setting -> where it comes from (paper, code and commit), printed and stored with results."""
    description: str = ""

    def __post_init__(self) -> None:
        if self.summary not in SUMMARIES:
            raise BenchmarkError(
                f"benchmark {self.name!r}: summary={self.summary!r}; choose one of {', '.join(SUMMARIES)}"
            )
        if self.summary != "mean" and self.score_group not in self.groups:
            raise BenchmarkError(
                f"benchmark {self.name!r}: the {self.summary} summary reads group {self.score_group!r}, "
                f"which is not one of {sorted(self.groups)}"
            )
        empty = [name for name, components in self.groups.items() if not components]
        if not self.groups or empty:
            raise BenchmarkError(f"benchmark {self.name!r} needs at least one scorer in every group (empty: {empty})")


FLOW_GRPO_SD35 = (
    "Flow-GRPO config/grpo.py geneval_sd3 / general_ocr_sd3 (yifan123/flow_grpo ac4c86e): "
    "sample.eval_num_steps=40, sample.guidance_scale=4.5, resolution=512"
)
NFT_EVAL = (
    "DiffusionNFT scripts/evaluation.py (NVlabs/DiffusionNFT 24af555): --num_inference_steps 40, "
    "--resolution 512; README: --guidance_scale 4.5 for a CFG model (1.0 for its CFG-free one)"
)
SD35_PROTOCOL = {
    "eval.num_steps": 40,
    "eval.guidance_scale": 4.5,
    "eval.height": 512,
    "eval.width": 512,
    "eval.max_prompts": 1_000_000,
    "eval.use_ema": True,
}

GENEVAL = Benchmark(
    name="geneval",
    manifest="datasets/geneval/evaluation_metadata.jsonl",
    groups={"geneval": {"geneval_accuracy": 1.0}},
    summary="geneval",
    score_group="geneval",
    reward_kwargs={"geneval_accuracy": {"jpeg_quality": None, "detector_channels": "rgb"}},
    protocol={
        **SD35_PROTOCOL,
        "eval.samples_per_prompt": 4,
        "eval.seed": 42,
        "eval.noise_seeds": "per_image_index",
        "eval.batch_size": 4,
    },
    sources={
        "prompts": "GenEval prompts/evaluation_metadata.jsonl (djghosh13/geneval af4902f): 553 prompts, 6 tags",
        "eval.samples_per_prompt": "GenEval generation/diffusers_generate.py --n_samples 4",
        "eval.seed / eval.noise_seeds": "GenEval diffusers_generate.py: seed_everything(42) before each prompt, so "
        "image k of every prompt starts from the same noise",
        "eval.num_steps / eval.guidance_scale / resolution": FLOW_GRPO_SD35 + "; " + NFT_EVAL,
        "scoring": "GenEval evaluation/evaluate_images.py: Mask2Former Swin-S, thresholds 0.3 / 0.9 (counting), "
        "16 objects, no NMS, position 0.1; images read losslessly (PNG: no JPEG) in true RGB",
        "summary": "GenEval evaluation/summary_scores.py: accuracy per tag, overall = mean of the tag accuracies",
    },
    description="GenEval's compositional benchmark: 553 prompts x 4 images, GenEval's 0/1 correctness per image",
)

OCR = Benchmark(
    name="ocr",
    manifest="datasets/ocr/test.txt",
    groups={"ocr": {"ocr": 1.0}},
    summary="ocr",
    score_group="ocr",
    protocol={**SD35_PROTOCOL, "eval.samples_per_prompt": 1, "eval.seed": 20260504, "eval.batch_size": 16},
    sources={
        "prompts": "genalign's OCR test set (datasets/ocr/test.txt, 200 prompts); Flow-GRPO's own 1018-prompt "
        "dataset/ocr/test.txt is not shipped (point eval.manifest=... at it)",
        "eval.samples_per_prompt": "one image per prompt: Flow-GRPO train_sd3.py eval(); DiffusionNFT evaluation.py",
        "eval.num_steps / eval.guidance_scale / resolution": FLOW_GRPO_SD35 + "; " + NFT_EVAL,
        "eval.batch_size": "Flow-GRPO general_ocr_sd3 sample.test_batch_size=16",
        "scoring": "Flow-GRPO flow_grpo/ocr.py: 1 - Levenshtein / len(target) on the quoted text (docs/rewards.md)",
        "summary": "accuracy = mean OCR score (Flow-GRPO's eval_reward_ocr); normalised edit distance = its "
        "complement; exact-match rate",
    },
    description="Text rendering: the quoted text of each prompt read back by OCR",
)

DRAWBENCH_SCORERS = ("pickscore", "hpsv21", "image_reward", "aesthetic", "clip_score")
DRAWBENCH = Benchmark(
    name="drawbench",
    manifest="datasets/drawbench/prompts.jsonl",
    groups={name: {name: 1.0} for name in DRAWBENCH_SCORERS},
    protocol={**SD35_PROTOCOL, "eval.samples_per_prompt": 5, "eval.seed": 20260504, "eval.batch_size": 5},
    sources={
        "prompts": "DrawBench (Imagen, Saharia et al. 2022): 200 prompts, 11 categories (datasets/drawbench/)",
        "eval.samples_per_prompt": "DiffusionNFT dataset/drawbench/test.txt lists each of the 200 prompts 5 times",
        "eval.num_steps / eval.guidance_scale / resolution": NFT_EVAL,
        "eval.batch_size": "DiffusionNFT evaluation.py eval_batch_size=5 for drawbench",
        "scorers": "DiffusionNFT evaluation.py drawbench: imagereward, pickscore, aesthetic, clipscore, hpsv2 (its "
        "HPS_v2.1 weights), unifiedreward (a served VLM judge: add it with --scorers pickscore,...,vlm_judge and its "
        "reward.kwargs.vlm_judge.*, docs/evaluation.md)",
        "summary": "mean per scorer over every image (DiffusionNFT average_scores.json), with the standard error over "
        "prompts and the mean per category",
    },
    description="DrawBench's 200 prompts x 5 images, each preference scorer's mean",
)

TOY = Benchmark(
    name="toy",
    manifest="datasets/toy/test.txt",
    groups={"eval_reward": {"toy_shape": 1.0}, "gold": {"toy_shape_judge": 1.0}},
    protocol={
        "eval.num_steps": 10,
        "eval.guidance_scale": 1.0,
        "eval.height": 32,
        "eval.width": 32,
        "eval.max_prompts": 8,
        "eval.samples_per_prompt": 16,
        "eval.seed": 20260504,
        "eval.batch_size": 64,
        "eval.use_ema": False,
    },
    sources={
        "all": "the CPU demo recipe's own evaluation (genalign/configs/experiment/toy/shapes_grpo.yaml): "
        "the 8 held-out prompts x 16 seeds, 10 ODE steps, no CFG, 32x32; the shape classifier and the judge"
    },
    description="The CPU demo's held-out shapes: P(prompted shape) by the reward classifier and by the judge",
)

BENCHMARKS = {b.name: b for b in (GENEVAL, OCR, DRAWBENCH, TOY)}


def run_benchmark(cfg) -> Benchmark:
    """The run's own fixed evaluation as a benchmark: data.eval_manifest, the training reward
    ("eval_reward"), the gold rewards ("gold"), each quality measure alone ("quality_<name>"),
    at the run's eval.* settings (no protocol of its own)."""
    groups = {"eval_reward": {n: float(w) for n, w in cfg.reward.components.items() if w}}
    gold = {n: float(w) for n, w in cfg.eval.gold_rewards.items() if w}
    if gold:
        groups["gold"] = gold
    groups.update({f"quality_{name}": {name: 1.0} for name in cfg.eval.quality_metrics})
    return Benchmark(
        name="run",
        manifest=cfg.data.eval_manifest,
        groups=groups,
        summary="mean",
        sources={"all": "the run's own config: data.eval_manifest, reward.components, eval.*"},
        description="the run's own fixed evaluation (its eval manifest, reward, gold rewards, eval.*)",
    )


def user_benchmark(path: str) -> Benchmark:
    """A benchmark from a YAML file: `manifest` (required), `scorers` ({component: weight}, each
    scored and summarised alone) or `groups` ({group: {component: weight}}), optional `protocol`
    ({"eval.num_steps": ..., ...}), `reward_kwargs`, `description`. Errors name the file and key."""
    text = Path(path).expanduser().read_text(encoding="utf-8")
    data = safe_load_unique(text)
    if not isinstance(data, dict):
        raise BenchmarkError(f"{path}: a benchmark file is a mapping with manifest and scorers (or groups)")
    unknown = sorted(set(data) - {"name", "manifest", "scorers", "groups", "protocol", "reward_kwargs", "description"})
    if unknown or "manifest" not in data or not (data.get("scorers") or data.get("groups")):
        raise BenchmarkError(f"{path}: needs manifest and scorers (or groups); unknown keys: {unknown}")
    groups = data.get("groups") or {name: {name: 1.0} for name in data["scorers"]}
    if not isinstance(groups, dict) or not all(isinstance(g, dict) for g in groups.values()):
        raise BenchmarkError(f"{path}: groups must map a group name to {{component: weight}}")
    protocol = dict(data.get("protocol") or {})
    bad = [key for key in protocol if not str(key).startswith("eval.")]
    if bad:
        raise BenchmarkError(f"{path}: protocol keys must be eval.* settings, got {bad}")
    return Benchmark(
        name=str(data.get("name") or Path(path).stem),
        manifest=str(data["manifest"]),
        groups={str(g): {str(n): float(w) for n, w in c.items()} for g, c in groups.items()},
        reward_kwargs=dict(data.get("reward_kwargs") or {}),
        protocol=protocol,
        sources={"all": f"user benchmark file {path}"},
        description=str(data.get("description", "")),
    )


def resolve_benchmark(name: str, cfg) -> Benchmark:
    """A shipped benchmark by name, "run" (the config's own fixed evaluation), a user YAML file,
    or a prompt manifest path (scored like the run's evaluation: its reward, gold rewards, eval.*)."""
    if name == "run":
        return run_benchmark(cfg)
    if name in BENCHMARKS:
        return BENCHMARKS[name]
    suffix = Path(name).suffix.lower()
    if suffix in (".yaml", ".yml"):
        return user_benchmark(name)
    if suffix in (".txt", ".jsonl", ".json"):
        return replace(
            run_benchmark(cfg),
            name=Path(name).stem,
            manifest=name,
            sources={"all": f"prompt manifest {name}; the config's reward, gold rewards and eval.*"},
        )
    raise BenchmarkError(
        f"--benchmark {name!r}: choose one of {', '.join([*BENCHMARKS, 'run'])}, a benchmark .yaml "
        f"file (manifest + scorers) or a prompt manifest (.txt/.jsonl/.json)"
    )
