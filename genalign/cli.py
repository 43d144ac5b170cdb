"""Command line: `genalign train | config | eval | pretrain-demo`.

Parse -> config -> call; no logic lives here. `python -m genalign.train ARGS` is the same
as `genalign train ARGS`.
"""

from __future__ import annotations

import argparse
import logging
import sys

from genalign.config.errors import ConfigError, UserError


def _recipe_parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--config", default=None,
                        help="recipe name under genalign/configs (e.g. experiment/diffusion/sd3_5/online_grpo_ocr) "
                             "or a path to a YAML file; default: the CPU demo recipe")
    parser.add_argument("overrides", nargs="*",
                        help="dotlist overrides key=value (last wins) and group swaps /group=option")
    return parser


def _configure_logging() -> None:
    from genalign.tracking.logs import configure_console_logging

    configure_console_logging()


def train_main(argv: list[str] | None = None, prog: str = "genalign train") -> int:
    args = _recipe_parser(prog, "Run RL post-training from a recipe.").parse_args(argv)
    from genalign.config.loader import load_config

    cfg = load_config(args.config, args.overrides, check_files=True)  # every mistake before a model loads
    _configure_logging()
    from genalign.training.trainer import Trainer

    Trainer(cfg).train()
    return 0


def config_main(argv: list[str] | None = None) -> int:
    parser = _recipe_parser("genalign config", "Print the resolved, validated config; loads no model.")
    parser.add_argument("--no-check-files", action="store_true",
                        help="skip the checks of files the config names (manifests, model path, output_dir, "
                             "trainer.resume_from), e.g. when composing a config for another machine")
    args = parser.parse_args(argv)
    from genalign.config.loader import config_to_yaml, load_config

    cfg = load_config(args.config, args.overrides, check_files=not args.no_check_files)
    print(config_to_yaml(cfg), end="")
    return 0


def eval_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="genalign eval", description="Evaluate a checkpoint on the fixed eval prompts.")
    parser.add_argument("--checkpoint", required=True, help="a checkpoint-<step> or checkpoint-final directory")
    parser.add_argument("--output-dir", default=None, help="where to write eval_metrics.csv and the contact sheet "
                                                          "(default: <checkpoint>/eval)")
    parser.add_argument("overrides", nargs="*", help="eval.* overrides, e.g. eval.max_prompts=4, and "
                                                     "reward.allow_import=[...] (never read from the checkpoint)")
    args = parser.parse_args(argv)
    _configure_logging()
    from genalign.evaluation.standalone import evaluate_checkpoint

    evaluate_checkpoint(args.checkpoint, args.output_dir, args.overrides)
    return 0


def pretrain_demo_main(argv: list[str] | None = None) -> int:
    _configure_logging()
    from genalign.models.toy.pretrain import main

    return main(argv) or 0


COMMANDS = {"train": train_main, "config": config_main, "eval": eval_main, "pretrain-demo": pretrain_demo_main}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        known = ", ".join(COMMANDS)
        if argv and argv[0] not in ("-h", "--help"):
            print(f"genalign: unknown command {argv[0]!r}; choose one of: {known}", file=sys.stderr)
            return 2
        print(f"usage: genalign {{{known}}} [--config RECIPE] [key=value ...]\n"
              "  genalign train                      run the CPU demo recipe (minutes)\n"
              "  genalign train --config RECIPE k=v  run a recipe with overrides\n"
              "  genalign config --config RECIPE     print the resolved config")
        return 0
    try:
        return COMMANDS[argv[0]](argv[1:])
    except UserError as err:  # a mistake in a config, file or command line; anything else is a bug
        print(format_user_error(err), file=sys.stderr)
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
