"""Command line: `genalign train | config | eval | compare | report | export | pretrain-demo |
serve-reward` (+ `--help`, `--version`).

Parse -> config -> call; no logic lives here. `python -m genalign.train ARGS` is the same
as `genalign train ARGS`. `genalign train --help` and `genalign config --help` list the
shipped recipes and config groups (`config/catalog.py`).
"""

from __future__ import annotations

import argparse
import sys
import textwrap

from genalign.config.errors import DISK_FULL_ERRNOS, DISK_FULL_HINT, ConfigError, UserError
from genalign.config.habit_flags import split_habit_flags
from genalign.runs.stopping import RunInterrupted, SignalWatch
from genalign.tracking.logs import configure_console_logging
from genalign.version import __version__


class _RecipeParser(argparse.ArgumentParser):
    """`--help` ends with the shipped recipes and config groups (read only then); a usage error
    prints the usage line and the error alone, not the catalog (dozens of lines)."""

    def format_help(self) -> str:
        from genalign.config.catalog import describe  # lazy: reads the shipped recipes, only when help is printed

        return super().format_help() + "\n" + describe() + "\n"

    def error(self, message: str):  # argparse's own exit status (2), with a way forward
        self.print_usage(sys.stderr)
        self.exit(
            2,
            f"{self.prog}: error: {message}\nhint: overrides are key=value (e.g. trainer.num_steps=10); "
            f"`{self.prog} --help` lists the options and recipes, `genalign config --describe` the keys\n",
        )


def _recipe_parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = _RecipeParser(
        prog=prog,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=textwrap.fill(
            "overrides: key=value sets a key (the value is YAML; ${oc.env:VAR} and ${oc.env:VAR,default} read the "
            "environment, here and in YAML files); +key=value adds a key to an open mapping (reward.components, "
            "reward.kwargs, reward.kwargs.<name>); /group=option swaps a config group. "
            "`genalign config --describe [PREFIX]` lists every key with its type, default and meaning. "
            "--report_to TRACKER (tensorboard, wandb, mlflow, all, none) is trainer.loggers=[csv,TRACKER]; other "
            "flags of diffusers' and TRL's scripts are answered with the override that does the same.",
            width=100,
        ),
    )
    parser.add_argument(
        "--config",
        default=None,
        help="recipe name under genalign/configs (e.g. experiment/diffusion/sd3_5/online_grpo_ocr) "
        "or a path to a YAML file; default: the CPU demo recipe",
    )
    parser.add_argument(
        "overrides", nargs="*", help="dotlist overrides key=value (last wins) and group swaps /group=option"
    )
    return parser


def _parse_recipe_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """argparse on `argv` after the habit flags: `--report_to X` becomes a leading override (so
    an explicit trainer.loggers=... after it wins); the others raise their equivalent."""
    rest, flag_overrides = split_habit_flags(list(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(rest)
    args.overrides = [*flag_overrides, *args.overrides]
    return args


def _configure_logging() -> None:
    configure_console_logging()


def train_main(argv: list[str] | None = None, prog: str = "genalign train") -> int:
    parser = _recipe_parser(prog, "Run RL post-training from a recipe.")
    parser.add_argument(
        "--nproc-per-node",
        type=int,
        default=None,
        help="start this many ranks on this machine under torchrun (needs "
        "distributed.training.strategy=ddp or fsdp2); a failed rank ends the job with a "
        "message naming it and the command that resumes the run",
    )
    args = _parse_recipe_args(parser, argv)
    from genalign.preflight.load import load_config  # lazy: CLI start-up (torch)

    cfg = load_config(args.config, args.overrides, check_files=True)  # every mistake before a model loads
    if args.nproc_per_node is not None:
        from genalign.placement.launch import launch_ranks  # lazy: CLI start-up

        if args.nproc_per_node < 1 or cfg.distributed.training.strategy == "none":
            raise UserError(
                f"--nproc-per-node={args.nproc_per_node} needs a positive count and "
                "distributed.training.strategy=ddp or fsdp2 (now "
                f"{cfg.distributed.training.strategy!r})"
            )
        from genalign.preflight.step_sizes import per_rank_accumulation  # lazy: CLI start-up

        per_rank_accumulation(cfg.actor.gradient_accumulation_steps, args.nproc_per_node)
        return launch_ranks(args.nproc_per_node, args.config, args.overrides)
    _configure_logging()
    from genalign.training.trainer import Trainer  # lazy: CLI start-up (torch)

    with SignalWatch(defer=False):  # a signal while the run is built stops it at once; the steps defer it
        trainer = Trainer.for_config(cfg)  # None: the run is already at trainer.num_steps
        if trainer is not None:
            trainer.train()
    return 0


def config_main(argv: list[str] | None = None) -> int:
    parser = _recipe_parser("genalign config", "Print the resolved, validated config; loads no model.")
    parser.add_argument(
        "--no-check-files",
        action="store_true",
        help="skip the checks of files the config names (manifests, model path, output_dir, "
        "trainer.resume_from), e.g. when composing a config for another machine",
    )
    parser.add_argument(
        "--describe",
        nargs="?",
        const="",
        default=None,
        metavar="PREFIX",
        help="list every config key (or those under PREFIX, e.g. trainer.wandb) with its type, "
        "default, allowed values and meaning, instead of printing a config",
    )
    parser.add_argument(
        "--memory",
        action="store_true",
        help="also print the memory plan (each role's per-GPU peak; printed anyway when the config plans a GPU)",
    )
    args = _parse_recipe_args(parser, argv)
    if args.describe is not None:
        from genalign.preflight.describe import describe  # lazy: CLI start-up

        try:
            print(describe(args.describe))
        except ValueError as err:
            raise UserError(str(err)) from err
        return 0
    from genalign.config.loader import config_to_yaml  # lazy: CLI start-up
    from genalign.preflight.load import load_config  # lazy: CLI start-up (torch)

    cfg = load_config(args.config, args.overrides, check_files=not args.no_check_files)
    print(config_to_yaml(cfg), end="")
    from genalign.preflight.cautions import config_cautions  # lazy: CLI start-up

    for caution in config_cautions(cfg):
        print(f"genalign: warning: {caution}", file=sys.stderr)
    from genalign.preflight.memory_plan import check_memory  # lazy: CLI start-up

    # printed as YAML comments, so the output stays a loadable config
    check_memory(cfg, lambda text: print("\n".join("# " + line for line in text.splitlines())), always=args.memory)
    return 0


def eval_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="genalign eval",
        description="Evaluate a model on a benchmark as its paper does (docs/evaluation.md), or a checkpoint on its "
        "run's own fixed evaluation (--checkpoint alone).",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="a checkpoint directory, an exported LoRA or fine-tuned transformer folder, 'base' (the "
        "config's model.path), a Hub id or a diffusers pipeline directory",
    )
    parser.add_argument(
        "--checkpoint",
        default=None,
        help="a checkpoint-<step> or checkpoint-final directory (alone: its run's fixed evaluation, "
        "written like the run's eval_metrics.csv; with --benchmark: as --model)",
    )
    parser.add_argument(
        "--benchmark",
        default=None,
        help="geneval | ocr | drawbench | toy | run (the config's own evaluation) | a benchmark .yaml "
        "(manifest + scorers) | a prompt manifest (.txt/.jsonl/.json)",
    )
    parser.add_argument(
        "--config",
        default=None,
        help="the recipe the model belongs to (needed for 'base', a Hub id, or an export folder outside a checkpoint)",
    )
    parser.add_argument(
        "--scorers",
        default=None,
        type=lambda text: [name for name in text.split(",") if name],
        help="comma-separated reward components to score with instead of the benchmark's (each "
        "alone), e.g. --scorers pickscore,vlm_judge",
    )
    parser.add_argument(
        "--output-dir",
        default=None,
        help="where to write the results (default: <checkpoint>/eval[/<benchmark>] or outputs/eval/<benchmark>)",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        help="key=value overrides, e.g. eval.samples_per_prompt=1 "
        "eval.max_prompts=8, reward.kwargs.<name>.<key>=..., and "
        "reward.allow_import=[...] / model.allow_import=[...] / "
        "algorithm.allow_import=[...] (never read from a checkpoint)",
    )
    args = parser.parse_intermixed_args(argv)  # overrides may stand before and after the options
    _configure_logging()
    if args.model is None and args.checkpoint is None:
        raise UserError("genalign eval: give --model (or --checkpoint)")
    if args.model is None and args.benchmark is None:
        from genalign.training.checkpoint_eval import evaluate_checkpoint  # lazy: CLI start-up (torch)

        evaluate_checkpoint(args.checkpoint, args.output_dir, args.overrides)
        return 0
    if args.model is not None and args.checkpoint is not None:
        raise UserError("genalign eval: give --model or --checkpoint, not both")
    from genalign.training.model_eval import evaluate_model  # lazy: CLI start-up (torch)

    evaluate_model(
        args.model or args.checkpoint,
        args.benchmark or "run",
        args.config,
        args.output_dir,
        args.overrides,
        args.scorers,
    )
    return 0


def compare_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="genalign compare",
        description="Put runs and `genalign eval` results side by side: one table, overlaid curves, the same "
        "prompts' images in columns, in one offline page.",
    )
    parser.add_argument("inputs", nargs="+", help="run directories and/or results folders (two or more)")
    parser.add_argument("--output", default="compare.html", help="where to write the page (default: compare.html)")
    args = parser.parse_args(argv)
    from genalign.reporting.compare import write_compare  # lazy: CLI start-up (torch)

    print(write_compare(args.inputs, args.output))
    return 0


def report_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="genalign report",
        description="Write RUN_DIR/report.html: curves, before/after contact sheets, "
        "parity preflight, config and provenance in one offline page.",
    )
    parser.add_argument("run_dir", help="a run directory (the trainer.output_dir of a finished or running run)")
    parser.add_argument("--output", default=None, help="where to write the page (default: RUN_DIR/report.html)")
    parser.add_argument(
        "--figures",
        default=None,
        metavar="DIR",
        help="also write each curve panel as DIR/<panel>.svg (for docs and papers)",
    )
    args = parser.parse_args(argv)
    from genalign.reporting.report import write_figures, write_report  # lazy: CLI start-up

    print(write_report(args.run_dir, args.output))
    for path in write_figures(args.run_dir, args.figures) if args.figures else []:
        print(path)
    return 0


def export_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="genalign export",
        description="Show the model folder of a checkpoint (lora/ or transformer/, with its "
        "model card) and optionally upload it to the Hugging Face Hub.",
    )
    parser.add_argument("checkpoint", help="a checkpoint-<step> or checkpoint-final directory")
    parser.add_argument(
        "--push-to-hub",
        metavar="REPO_ID",
        default=None,
        help="upload the folder to this model repository (created if missing; your huggingface_hub login or $HF_TOKEN)",
    )
    parser.add_argument("--private", action="store_true", help="create the repository private")
    parser.add_argument("--commit-message", default=None, help="the Hub commit message")
    args = parser.parse_args(argv)
    from genalign.export.publish import export_folder, push_to_hub  # lazy: CLI start-up

    folder = export_folder(args.checkpoint)
    print(folder)
    for path in sorted(folder.iterdir()):
        print(f"  {path.name}")
    if args.push_to_hub:
        _configure_logging()
        print(push_to_hub(folder, args.push_to_hub, private=args.private, commit_message=args.commit_message))
    return 0


def pretrain_demo_main(argv: list[str] | None = None) -> int:
    _configure_logging()
    from genalign.demo.pretrain import main  # lazy: CLI start-up (torch)

    return main(argv) or 0


def serve_reward_main(argv: list[str] | None = None) -> int:
    _configure_logging()
    from genalign.rewards.serve_command import main  # lazy: CLI start-up (torch)

    return main(argv)


COMMANDS = {
    "train": train_main,
    "config": config_main,
    "eval": eval_main,
    "compare": compare_main,
    "report": report_main,
    "export": export_main,
    "pretrain-demo": pretrain_demo_main,
    "serve-reward": serve_reward_main,
}
SUMMARIES = {
    "train": "run RL post-training from a recipe (no arguments: the CPU demo, minutes)",
    "config": "print the resolved, validated config of a recipe; loads no model",
    "eval": "evaluate a model (checkpoint, export, base, Hub id) on a benchmark (geneval, ocr, drawbench, ...)",
    "compare": "put runs and evaluations side by side: one table, overlaid curves, the same prompts' images",
    "report": "write RUN_DIR/report.html: curves, before/after sheets, parity, config, provenance",
    "export": "show a checkpoint's model folder (LoRA or transformer + model card); --push-to-hub uploads it",
    "pretrain-demo": "pretrain the toy demo model and its classifiers into ./toy_demo (about 50 min on one CPU core)",
    "serve-reward": "serve reward scorers over HTTP for trainers with reward.runtime=http",
}
"""One line per command for `genalign --help` (every command has one: a test checks)."""


def top_level_help() -> str:
    width = max(map(len, COMMANDS)) + 2
    return "\n".join(
        [
            f"usage: genalign [-h] [--version] {{{','.join(COMMANDS)}}} ...",
            "",
            "Reinforcement-learning post-training for visual generative models (Flow-GRPO and family).",
            "",
            "commands:",
            *(f"  {name:<{width}}{SUMMARIES[name]}" for name in COMMANDS),
            "",
            "options:",
            f"  {'-h, --help':<{width}}show this help and exit",
            f"  {'--version':<{width}}print the genalign version and exit",
            "",
            "`genalign COMMAND --help` shows a command's options; `genalign train --help` lists the recipes "
            "and config groups; `genalign config --describe [PREFIX]` lists the config keys.",
            "examples:",
            "  genalign train                                   # the CPU demo recipe",
            "  genalign train --config experiment/diffusion/sd3_5/online_grpo_ocr trainer.output_dir=outputs/run1",
            "  genalign config --config experiment/toy/shapes_grpo rollout.n=4",
            "  genalign config --describe trainer.wandb                # the keys under trainer.wandb",
            "  genalign eval --checkpoint outputs/run1/checkpoint-final",
            "  genalign eval --model outputs/run1/checkpoint-final --benchmark geneval",
            "  genalign compare outputs/run1 outputs/run2",
            "  genalign export outputs/run1/checkpoint-final --push-to-hub my-user/sd35-ocr-lora",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(top_level_help())
        return 0
    if argv[0] == "--version":
        print(f"genalign {__version__}")
        return 0
    if argv[0] not in COMMANDS:
        print(
            f"genalign: error: unknown command {argv[0]!r}; choose one of: {', '.join(COMMANDS)}\n"
            "hint: genalign --help lists the commands",
            file=sys.stderr,
        )
        return 2
    try:
        return COMMANDS[argv[0]](argv[1:])
    except RunInterrupted as interrupted:  # SIGTERM / SIGINT: the conventional 128 + signal number
        if not interrupted.logged:
            print(f"genalign: {interrupted}", file=sys.stderr)
        return interrupted.exit_code
    except KeyboardInterrupt:  # Ctrl-C in a command that does not watch signals (eval, report)
        print("genalign: interrupted (SIGINT)", file=sys.stderr)
        return 130
    except UserError as err:  # a mistake in a config, file or command line; anything else is a bug
        print(format_user_error(err), file=sys.stderr)
        return 2
    except OSError as err:  # a full disk where no write names its file: still the user's to fix
        if err.errno not in DISK_FULL_ERRNOS:
            raise
        where = f"writing {err.filename}" if err.filename else "a write"
        print(f"genalign: error: {where} failed: {err.strerror or err}\nhint: {DISK_FULL_HINT}", file=sys.stderr)
        return 2


def format_user_error(err: UserError) -> str:
    """One line per problem (one line in all for a single mistake), then an optional `hint:` line."""
    problems = err.problems if isinstance(err, ConfigError) else [str(err)]
    if len(problems) == 1:
        text = f"genalign: error: {problems[0]}"
    else:
        text = f"genalign: error: {len(problems)} problems:\n" + "\n".join(f"  - {p}" for p in problems)
    return text + (f"\nhint: {err.hint}" if err.hint else "")


if __name__ == "__main__":
    sys.exit(main())
