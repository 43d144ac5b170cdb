"""`genalign eval --model M --benchmark B`: any model on any benchmark, written as a results folder.

Where it fits: the command above the trainer's evaluation. It resolves what `--model` names,
builds its config (the checkpoint's own, or `--config RECIPE` for a base model, an export
folder outside a checkpoint, a Hub id or a pipeline directory), applies the benchmark's
protocol (`eval.*` defaults, the manifest, scorer options) under the user's overrides, loads the
weights, and runs the same `evaluate_samples` the trainer's evaluation runs (sharded over
torchrun ranks; over Ray rollout workers with `rollout.engine=ray`). Rank 0 writes the results
(evaluation/results.py) and the page (reporting/eval_report.py).

What `--model` may name:
- a checkpoint directory (`trainable.safetensors` + `config.yaml`): its config, its trained
  (or EMA, per eval.use_ema) weights;
- an exported LoRA folder (`pytorch_lora_weights.safetensors`, diffusers' format, as
  `checkpoint-*/lora/` holds): loaded onto the base model; rank, alpha and targets from its
  adapter metadata;
- a full fine-tune folder (`config.json` + `diffusion_pytorch_model.safetensors`, as
  `checkpoint-final/transformer/`): its weights replace the denoiser's;
- `base`: the config's model as it is (model.path), untrained;
- anything else: a Hub id or a local diffusers pipeline directory, as model.path.
An export folder inside a checkpoint takes the checkpoint's config; otherwise `--config` says
which recipe (family, sizes, reward) the model belongs to.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from genalign.config.errors import ConfigError, UserError
from genalign.config.loader import config_to_dict
from genalign.config.safe_yaml import safe_load_unique
from genalign.config.schema import ExperimentConfig
from genalign.data.prompts import load_manifest
from genalign.evaluation.benchmarks import Benchmark, resolve_benchmark
from genalign.evaluation.evaluator import evaluation_samples
from genalign.evaluation.results import records_of, write_results
from genalign.evaluation.sharded import evaluate_samples
from genalign.evaluation.summaries import markdown_table, summarise
from genalign.hub import is_hub_id
from genalign.models.spec import FamilySpec, family_spec
from genalign.placement.ray_pools import start_ray_for_run, stop_ray_for_run
from genalign.preflight.files import output_dir_problems
from genalign.preflight.load import load_config
from genalign.preflight.stored_config import config_from_checkpoint, split_allow_overrides
from genalign.reporting.eval_report import write_eval_report
from genalign.rewards.composite import build_reward_runtime
from genalign.rollout.engine import LocalRolloutEngine
from genalign.runs.checkpoint import load_checkpoint
from genalign.training import setup
from genalign.training.distributed import init_distributed, rank_info_from_env, shutdown
from genalign.version import __version__
from genalign.weights.lora import load_trainable_state_dict

log = logging.getLogger(__name__)

LORA_FILE = "pytorch_lora_weights.safetensors"
TRANSFORMER_FILES = ("config.json", "diffusion_pytorch_model.safetensors")
MODEL_KINDS = ("checkpoint", "lora", "transformer", "base", "path")


class ModelSourceError(UserError, ValueError):
    pass


@dataclass(frozen=True)
class ModelSource:
    kind: str
    """One of MODEL_KINDS."""
    path: str
    checkpoint: Path | None = None
    """The checkpoint directory whose config.yaml describes the model (None: --config does)."""

    def describe(self) -> str:
        return {
            "checkpoint": f"checkpoint {self.path}",
            "lora": f"exported LoRA {self.path}",
            "transformer": f"full fine-tune folder {self.path}",
            "base": "the base model (model.path)",
            "path": f"model.path={self.path}",
        }[self.kind]


def is_checkpoint(path: Path) -> bool:
    return (path / "trainable.safetensors").is_file() and (path / "config.yaml").is_file()


def model_source(model: str) -> ModelSource:
    """What `--model` names (see the module doc); a directory that is none of the kinds is an error."""
    if model == "base":
        return ModelSource("base", model)
    path = Path(model).expanduser()
    if path.is_dir():
        parent = path.parent if is_checkpoint(path.parent) else None
        if is_checkpoint(path):
            return ModelSource("checkpoint", str(path), path)
        if (path / LORA_FILE).is_file():
            return ModelSource("lora", str(path), parent)
        if all((path / name).is_file() for name in TRANSFORMER_FILES):
            return ModelSource("transformer", str(path), parent)
        if (path / "model_index.json").is_file():
            return ModelSource("path", str(path))
        raise ModelSourceError(
            f"--model {model}: a directory that is no checkpoint (trainable.safetensors + "
            f"config.yaml), exported LoRA ({LORA_FILE}), fine-tuned transformer "
            f"({' + '.join(TRANSFORMER_FILES)}) or diffusers pipeline (model_index.json)"
        )
    if path.exists():
        raise ModelSourceError(f"--model {model} is a file; name a checkpoint or model directory, 'base' or a Hub id")

    if not is_hub_id(model):
        raise ModelSourceError(f"--model {model}: no such directory, and not a Hub id (owner/name)")
    return ModelSource("path", model)


def lora_metadata(folder: Path) -> dict[str, Any]:
    """The peft config diffusers stores beside an exported LoRA (`lora_adapter_metadata`)."""
    from safetensors import safe_open

    with safe_open(str(folder / LORA_FILE), framework="pt") as handle:
        metadata = handle.metadata() or {}
    raw = metadata.get("lora_adapter_metadata")
    config = {key.removeprefix("transformer."): item for key, item in json.loads(raw or "{}").items()}
    if "r" not in config:  # diffusers prefixes each key with the component ("transformer.r")
        raise ModelSourceError(
            f"--model {folder}: {LORA_FILE} carries no lora_adapter_metadata with the rank, alpha "
            "and targets; export it with genalign or diffusers' save_lora_weights"
        )
    return config


def value(item: Any) -> str:
    """A Python value as an override's YAML value."""
    return json.dumps(item)


def model_overrides(source: ModelSource) -> list[str]:
    """The config changes that describe the model `source` names (before the user's overrides)."""
    if source.kind == "path":
        return [f"model.path={value(source.path)}"]
    if source.kind == "transformer":
        return ["model.train_mode=full"]
    if source.kind == "lora" and source.checkpoint is None:  # inside a checkpoint its config says it all
        meta = lora_metadata(Path(source.path))
        targets = meta.get("target_modules") or []
        return [
            "model.train_mode=lora",
            f"model.lora.rank={int(meta['r'])}",
            f"model.lora.alpha={float(meta.get('lora_alpha', meta['r']))}",
            f"model.lora.target_modules={value(sorted(targets) if isinstance(targets, list) else [targets])}",
        ]
    return []


def benchmark_overrides(benchmark: Benchmark, family: FamilySpec) -> list[str]:
    """The benchmark's protocol and manifest as overrides. A protocol written for flow models
    (eval.num_steps) leaves out the keys `family` does not read (Janus-Pro's image tokens take
    no denoising steps), which its config would refuse."""
    return [f"{key}={value(setting)}" for key, setting in benchmark.protocol.items() if family.reads(key)] + [
        f"data.eval_manifest={value(benchmark.manifest)}"
    ]


def split_scorer_options(overrides: list[str]) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """(the config's overrides, {scorer: {option: value}} from every `reward.kwargs.<scorer>.<option>=value`).
    A benchmark's scorers need not be the config's rewards, so their options are not config keys
    (the config would refuse options of a reward it does not use); they are checked when the
    scorer parses them, before any model loads."""
    import yaml

    rest, options = [], {}
    for item in overrides:
        key, sep, text = item.partition("=")
        parts = key.split(".")
        if sep and len(parts) == 4 and parts[:2] == ["reward", "kwargs"]:
            try:
                options.setdefault(parts[2], {})[parts[3]] = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise ConfigError([f"{item}: the value is not YAML ({exc})"]) from None
        else:
            rest.append(item)
    return rest, options


def eval_config(
    source: ModelSource, benchmark_name: str, recipe: str | None, overrides: list[str]
) -> tuple[ExperimentConfig, Benchmark]:
    """The evaluation's config and benchmark: the model's config (checkpoint or recipe), the
    model's own changes, the benchmark's protocol, then the user's overrides (last wins);
    `reward.kwargs.*` overrides become the benchmark's scorer options (`split_scorer_options`)."""
    overrides, options = split_scorer_options(overrides)
    first = load_or_stored(source, recipe, model_overrides(source) + overrides)
    benchmark = resolve_benchmark(benchmark_name, first)
    family = family_spec(first.model.family, first.model.allow_import)
    cfg = load_or_stored(source, recipe, model_overrides(source) + benchmark_overrides(benchmark, family) + overrides)
    kwargs = {name: dict(value) for name, value in benchmark.reward_kwargs.items()}
    for name, value in options.items():
        kwargs.setdefault(name, {}).update(value)
    return cfg, dataclasses.replace(benchmark, reward_kwargs=kwargs)


def load_or_stored(source: ModelSource, recipe: str | None, overrides: list[str]) -> ExperimentConfig:
    """The checkpoint's stored config (checked like a user's; its allow_import lists ignored) or
    the recipe's, with `overrides`."""
    if source.checkpoint is not None and recipe is None:
        allowed, rest = split_allow_overrides(overrides, "genalign eval")
        path = source.checkpoint / "config.yaml"
        return config_from_checkpoint(
            safe_load_unique(path.read_text(encoding="utf-8")), str(path), allowed, rest, check_machine=False
        )
    if source.kind in ("lora", "transformer", "path") and recipe is None:
        raise ConfigError(
            [
                f"--model {source.path}: {source.describe()} outside a checkpoint needs --config RECIPE "
                "(the model family, sizes and reward it belongs to)"
            ]
        )

    return load_config(recipe, overrides, check_files=False)


def load_weights(policy, source: ModelSource, use_ema: bool) -> str:
    """Put the model's trained weights into `policy`; returns which weights were loaded."""
    from safetensors.torch import load_file

    if source.kind == "checkpoint":
        checkpoint = load_checkpoint(source.path, "--model")
        ema = use_ema and checkpoint.ema is not None
        load_trainable_state_dict(policy.transformer, checkpoint.ema if ema else checkpoint.trainable)
        return f"{'EMA' if ema else 'trained'} weights of step {checkpoint.step}"
    if source.kind == "lora":
        state = load_file(str(Path(source.path) / LORA_FILE))
        load_trainable_state_dict(policy.transformer, peft_names(state))
        return f"LoRA {source.path}"
    if source.kind == "transformer":
        load_trainable_state_dict(policy.transformer, load_file(str(Path(source.path) / TRANSFORMER_FILES[1])))
        return f"transformer {source.path}"
    return "the base weights"


def peft_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """diffusers' LoRA names (`transformer.<module>.lora_A.weight`) -> the policy's peft names
    (`<module>.lora_A.default.weight`)."""
    renamed = {}
    for name, tensor in state.items():
        name = name.removeprefix("transformer.")
        for part in ("lora_A", "lora_B"):
            name = name.replace(f".{part}.weight", f".{part}.default.weight")
        renamed[name] = tensor
    return renamed


def reward_config(cfg: ExperimentConfig, benchmark: Benchmark):
    """cfg.reward with the benchmark's scorer options under the user's reward.kwargs."""
    kwargs = {name: dict(options) for name, options in benchmark.reward_kwargs.items()}
    for name, options in cfg.reward.kwargs.items():
        kwargs.setdefault(name, {}).update(options)
    return dataclasses.replace(cfg.reward, kwargs=kwargs)


def settings_of(
    cfg: ExperimentConfig, source: ModelSource, benchmark: Benchmark, weights: str, world_size: int, reward_cfg
) -> dict[str, Any]:
    """Every setting the numbers depend on, printed and stored beside them."""
    spec, family = setup.eval_spec(cfg), family_spec(cfg.model.family, cfg.model.allow_import)
    return {
        "genalign": __version__,
        "command": sys.argv,
        "model": source.describe(),
        "weights": weights,
        "family": cfg.model.family,
        "model_path": cfg.model.path,
        "dtype": cfg.model.dtype,
        "benchmark": benchmark.name,
        "description": benchmark.description,
        "manifest": cfg.data.eval_manifest,
        "groups": benchmark.groups,
        "summary": benchmark.summary,
        "sampling": {
            "num_steps": spec.num_steps if family.reads("eval.num_steps") else None,  # None: no denoising steps
            "guidance_scale": spec.guidance_scale,
            "height": spec.height,
            "width": spec.width,
            "samples_per_prompt": cfg.eval.samples_per_prompt,
            "max_prompts": cfg.eval.max_prompts,
            "seed": cfg.eval.seed,
            "noise_seeds": cfg.eval.noise_seeds,
            "batch_size": cfg.eval.batch_size,
            "sampler": "deterministic ODE (noise level 0)"
            if family.sampler == "flow"
            else f"image tokens at temperature {spec.temperature}",
            "use_ema": cfg.eval.use_ema,
        },
        "scorer_options": {
            name: reward_cfg.kwargs.get(name, {}) for group in benchmark.groups.values() for name in group
        },
        "sources": benchmark.sources,
        "ranks": world_size,
        "rollout_engine": cfg.rollout.engine,
        "config": config_to_dict(cfg),
    }


def evaluate_model(
    model: str,
    benchmark_name: str,
    recipe: str | None,
    output_dir: str | None,
    overrides: list[str],
    scorers: list[str] | None = None,
) -> dict[str, Any]:
    """Evaluate; returns the benchmark's table (rank 0; {} on the other ranks)."""
    source = model_source(model)
    cfg, benchmark = eval_config(source, benchmark_name, recipe, overrides)
    if scorers:
        benchmark = dataclasses.replace(benchmark, groups={name: {name: 1.0} for name in scorers}, summary="mean")
    out = Path(output_dir).expanduser() if output_dir else default_output(source, benchmark)

    problems = [p.replace("trainer.output_dir", "--output-dir") for p in output_dir_problems(str(out))]
    if problems:
        raise ConfigError(problems)
    examples = load_manifest(cfg.data.eval_manifest, "data.eval_manifest")  # before any model loads
    samples = evaluation_samples(examples, cfg.eval)
    ranks = rank_info_from_env()
    if ranks.world_size > 1:
        init_distributed("ddp", cfg.distributed.training.backend, (), cfg.distributed.training.timeout_s)
    try:
        torch.manual_seed(cfg.trainer.seed)
        policy = setup.build_policy(cfg)
        weights = load_weights(policy, source, cfg.eval.use_ema)
        reward_cfg = reward_config(cfg, benchmark)
        settings = settings_of(cfg, source, benchmark, weights, ranks.world_size, reward_cfg)
        if ranks.is_main:
            print_settings(settings, out)
        owns_ray = start_ray_for_run(cfg)
        try:
            runtimes = {
                group: build_reward_runtime(reward_cfg, policy.device, components=components)
                for group, components in benchmark.groups.items()
            }
            engine = setup.build_rollout_engine(cfg, policy)
            try:
                spec = setup.eval_spec(cfg)
                with torch.no_grad():
                    outcome = evaluate_samples(
                        engine_sampler(engine, spec), samples, runtimes, setup.evaluation_shard(ranks)
                    )
            finally:
                engine.close()
                for runtime in runtimes.values():
                    runtime.close()
        finally:  # a Ray this evaluation started does not outlive it (an in-process caller goes on)
            stop_ray_for_run(owns_ray)
        if outcome.scores is None:
            return {}
        records = records_of(outcome)
        table = summarise(records, benchmark.summary, list(benchmark.groups), benchmark.score_group)
        write_results(out, records, outcome.images, table, settings)

        write_eval_report(out)
        print(markdown_table(table), end="")
        print(f"results: {out}")
        return table
    finally:
        if ranks.world_size > 1:
            shutdown()


def engine_sampler(engine, spec):
    """The rollout engine as evaluate_samples' sampler. The in-process engine samples a rank's
    positions; the Ray engine shards a whole list over its workers in units of whole prompt groups
    and sampling chunks, so the list is completed with filler groups (copies of the last prompt
    group) to a whole number of units, and the fillers' trajectories dropped."""
    if isinstance(engine, LocalRolloutEngine):
        return lambda every, positions: engine.generate(every, spec, positions)

    def sample(every, positions):
        chosen = every.index(positions)
        group_ids = chosen.group_ids.tolist()
        size = group_ids.count(group_ids[-1])  # samples per prompt group (the last group is whole)
        unit = math.lcm(size, spec.chunk_size)
        fillers = 0
        while (len(positions) + fillers * size) % unit:
            fillers += 1
        last = list(range(len(positions) - size, len(positions)))
        padded = chosen.index(list(range(len(positions))) + last * fillers)
        padded.group_ids = torch.cat(
            [chosen.group_ids, torch.arange(1, fillers + 1).repeat_interleave(size) + int(chosen.group_ids.max())]
        )
        batch = engine.generate(padded, spec)
        return batch.index(list(range(len(positions)))) if fillers else batch

    return sample


def default_output(source: ModelSource, benchmark: Benchmark) -> Path:
    """<checkpoint>/eval/<benchmark> for a checkpoint, else outputs/eval/<benchmark>."""
    base = source.checkpoint if source.kind == "checkpoint" else Path("outputs")
    return base / "eval" / benchmark.name


def print_settings(settings: dict[str, Any], out: Path) -> None:
    sampling = settings["sampling"]
    lines = [
        f"genalign eval: {settings['model']} ({settings['weights']}) on {settings['benchmark']} -> {out}",
        f"  prompts: {settings['manifest']} (first {sampling['max_prompts']}) x {sampling['samples_per_prompt']} "
        f"images, seeds {sampling['noise_seeds']} from {sampling['seed']}",
        f"  sampler: {'' if sampling['num_steps'] is None else str(sampling['num_steps']) + ' steps, '}"
        f"CFG {sampling['guidance_scale']}, "
        f"{sampling['height']}x{sampling['width']}, {sampling['sampler']}, batch {sampling['batch_size']}",
        f"  scorers: {json.dumps(settings['groups'])}, options {json.dumps(settings['scorer_options'])}",
        *(f"  source of {key}: {text}" for key, text in settings["sources"].items()),
    ]
    print("\n".join(lines))
