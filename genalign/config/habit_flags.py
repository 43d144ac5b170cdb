"""Flags that users of diffusers' training scripts, TRL and the HF Trainer type out of habit.

Where it fits: `cli.py` reads `genalign train|config` arguments through `split_habit_flags`
before argparse sees them. `--report_to X` is accepted (it becomes the override
`trainer.loggers=[csv,X]`, as `report_to` names the trackers there); every other flag in
`EQUIVALENTS` is answered with the one `key=value` override that does the same here, so a
user learns the config key instead of reading a page of help. Plain data: no imports above
config/.
"""

from __future__ import annotations

from genalign.config.errors import ConfigError, UserError

EQUIVALENTS: dict[str, str] = {
    "output_dir": "trainer.output_dir",
    "max_train_steps": "trainer.num_steps",
    "max_steps": "trainer.num_steps",
    "learning_rate": "actor.lr",
    "seed": "trainer.seed",
    "checkpointing_steps": "trainer.save_every",
    "save_steps": "trainer.save_every",
    "checkpoints_total_limit": "trainer.keep_last",
    "save_total_limit": "trainer.keep_last",
    "resume_from_checkpoint": "trainer.resume_from",
    "pretrained_model_name_or_path": "model.path",
    "model_name_or_path": "model.path",
    "revision": "model.revision",
    "mixed_precision": "model.dtype",
    "gradient_accumulation_steps": "actor.gradient_accumulation_steps",
    "max_grad_norm": "actor.max_grad_norm",
    "adam_weight_decay": "actor.weight_decay",
    "weight_decay": "actor.weight_decay",
    "rank": "model.lora.rank",
    "lora_r": "model.lora.rank",
    "lora_alpha": "model.lora.alpha",
    "gradient_checkpointing": "model.gradient_checkpointing",
    "push_to_hub": "trainer.push_to_hub",
    "hub_model_id": "trainer.push_to_hub",
    "hub_strategy": "trainer.hub_strategy",
    "validation_steps": "eval.every",
    "eval_steps": "eval.every",
    "num_generations": "rollout.n",
    "beta": "algorithm.kl_beta",
    "epsilon": "algorithm.clip_range",
    "dataset_name": "data.manifest",
    "tracker_project_name": "trainer.wandb.project",
    "run_name": "trainer.wandb.name",
}
"""diffusers / TRL / HF Trainer flag (without dashes, `_` spelling) -> the genalign key."""

FLAGS_WITHOUT_VALUE = {"gradient_checkpointing": "true", "push_to_hub": None}
"""Flags those scripts take as switches: the value the key gets (None: the key needs one anyway)."""

REPORT_TO_ALL = ("tensorboard", "wandb", "mlflow")
"""What `--report_to all` names: every tracker genalign has (TRL: every installed integration)."""


def _value_for(flag: str, value: str | None) -> str:
    """The override value for `flag` given as `value` (translating the few spellings that differ)."""
    if flag == "mixed_precision" and value is not None:
        return {"fp16": "float16", "bf16": "bfloat16", "no": "float32"}.get(value, value)
    if flag == "resume_from_checkpoint" and value == "latest":
        return "auto"
    if flag == "dataset_name" and value is not None and "://" not in value:
        return f"hf://datasets/{value}"
    if value is None:
        return FLAGS_WITHOUT_VALUE.get(flag) or "<value>"
    return value


def report_to_loggers(value: str) -> str:
    """`--report_to wandb,tensorboard` -> "trainer.loggers=[csv,wandb,tensorboard]" (none: csv only)."""
    names = [name.strip() for name in value.replace(" ", ",").split(",") if name.strip()]
    if names in (["none"], ["csv"]):
        names = []
    elif names == ["all"]:
        names = list(REPORT_TO_ALL)
    return "trainer.loggers=[" + ",".join(["csv", *[name for name in names if name != "csv"]]) + "]"


def split_habit_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the arguments for argparse, overrides the accepted flags stand for). `--report_to X`
    (or `--report-to=X`) is accepted; any other flag of `EQUIVALENTS` raises a UserError with
    one line per flag naming the override to write instead."""
    rest: list[str] = []
    overrides: list[str] = []
    answers: list[str] = []
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        if not token.startswith("--") or token == "--":
            rest.append(token)
            continue
        name, has_value, value = token[2:].partition("=")
        flag = name.replace("-", "_")
        if flag != "report_to" and flag not in EQUIVALENTS:
            rest.append(token)
            continue
        if not has_value:
            takes_none = flag in FLAGS_WITHOUT_VALUE
            following = argv[index] if index < len(argv) else None
            if following is not None and not following.startswith("-") and not takes_none:
                value, index = following, index + 1
            else:
                value = None
        if flag == "report_to":
            if not value:
                raise UserError(
                    "--report_to needs a tracker: tensorboard, wandb, mlflow, all or none "
                    "(it sets trainer.loggers=[csv,<tracker>])"
                )
            overrides.append(report_to_loggers(value))
            continue
        shown = f"--{name}" + (f" {value}" if value is not None else "")
        answers.append(
            f"{shown} is a flag of diffusers' and TRL's scripts; here it is the override "
            f"{EQUIVALENTS[flag]}={_value_for(flag, value)}"
        )
    if answers:
        raise ConfigError(
            answers, hint="overrides are key=value after the command; `genalign config --describe KEY` explains a key"
        )
    return rest, overrides
