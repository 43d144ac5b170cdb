"""Every mistake a careless or hostile user makes is one line (plus an optional hint), exit 2,
before any model or reward loads, and touches no earlier run.

Each case of CASES runs the real CLI entry point `genalign.cli.main` in-process (fast) with
model loading replaced by a tripwire, and asserts: exit code 2; the message is one line,
optionally followed by one `hint:` line, with no traceback; it names the key/file; it came
quickly; and the files of an earlier run (in the recipe's default output_dir under the
working directory) are byte-identical afterwards. `train` cases are also run as
`genalign config`, which must report the same first line. A handful of cases at the end run
`python -m genalign` in a subprocess to prove the top-level handler and the exit code, the
hubconf attack through `genalign eval --checkpoint` and `trainer.resume_from`, and that a real
bug still shows its traceback.
"""

from __future__ import annotations

import hashlib
import io
import os
import socket
import subprocess
import sys
import time
import traceback
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest
import torch
import yaml

from genalign import cli
from genalign.config.loader import config_to_dict
from genalign.preflight.load import load_config
from genalign.runs.checkpoint import save_checkpoint

TIME_LIMIT_S = 60.0  # generous: the box is shared; failing before model loading takes well under a second
ENV = {
    **os.environ,
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[2])]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    ),
}


class ReachedModelLoading(RuntimeError):
    """Raised by the tripwire: the mistake was not caught before a model would have loaded."""


# ------------------------------------------------------------------ files the cases point at
def write_bytes(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def make_checkpoint(path: Path, edit_config: Callable[[dict], None] | None = None) -> Path:
    """A structurally valid checkpoint of the default toy recipe (tiny fake tensors): enough for
    every check that runs before the weights are used."""
    config = config_to_dict(load_config(None))
    if edit_config:
        edit_config(config)
    return save_checkpoint(
        path,
        step=1,
        config=config,
        trainable={"w": torch.zeros(2)},
        ema=None,
        optimizer={"state": {}, "param_groups": []},
        trainer_state={"eval_history": {}},
    )


def hubconf_dir(root: Path) -> Path:
    """A torch.hub repo whose hubconf.py, if ever imported, writes `root/PWNED`."""
    repo = root / "evil_repo"
    repo.mkdir(parents=True, exist_ok=True)
    marker = str(root / "PWNED")
    (repo / "hubconf.py").write_text(f"open({marker!r}, 'w').write('ran')\ndef x(**kw):\n    return None\n")
    return repo


def hubconf_checkpoint(root: Path, where: str = "components") -> Path:
    """A checkpoint whose config.yaml (edited by an attacker) loads a reward through torch.hub."""
    repo = hubconf_dir(root)

    def attack(config: dict) -> None:
        target = config["reward"] if where == "components" else config["eval"]
        key = "components" if where == "components" else "gold_rewards"
        target[key] = {"torch.hub:load": 1.0}
        config["reward"]["kwargs"] = {"torch.hub:load": {"repo_or_dir": str(repo), "model": "x", "source": "local"}}
        config["reward"]["allow_import"] = ["torch.hub:load"]  # the attacker's own allow-list is ignored

    return make_checkpoint(root / "checkpoint-evil", attack)


def corrupt(name: str, data: bytes | None = None, truncate: bool = False) -> Callable[[Path], Path]:
    def setup(tmp: Path) -> Path:
        path = make_checkpoint(tmp / "checkpoint-1")
        target = path / name
        if truncate:
            target.write_bytes(target.read_bytes()[:-3])
        elif data is None:
            target.unlink()
        else:
            target.write_bytes(data)
        return path

    return setup


def edited_checkpoint(edit: Callable[[dict], None]) -> Callable[[Path], Path]:
    return lambda tmp: make_checkpoint(tmp / "checkpoint-1", edit)


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
    for i in range(8)
)
"""Nine levels of ten-fold aliases: 10^9 strings once expanded, 700 bytes written."""


def bomb_checkpoint(tmp: Path) -> Path:
    """A checkpoint whose config.yaml hides the alias bomb under model.lora.target_modules."""
    path = make_checkpoint(tmp / "checkpoint-1")
    text = (path / "config.yaml").read_text()
    lines = [line for line in ALIAS_BOMB.splitlines()]
    (path / "config.yaml").write_text(
        "bomb:\n"
        + "".join(f"  {line}\n" for line in lines)
        + text.replace("target_modules:", "target_modules: *i\n    _was:", 1)
    )
    return path


def nan_checkpoint(tmp: Path) -> Path:
    config = config_to_dict(load_config(None))
    return save_checkpoint(
        tmp / "checkpoint-1",
        step=1,
        config=config,
        trainable={"w": torch.tensor([0.0, float("nan")])},
        ema=None,
        optimizer={"state": {}, "param_groups": []},
        trainer_state={"eval_history": {}},
    )


def foreign_dir(tmp: Path) -> Path:
    """Another tool's directory: a metrics.csv and a wandb/ folder, no genalign config.yaml."""
    write_bytes(tmp / "theirs" / "metrics.csv", b"epoch,acc\n1,0.9\n")
    write_bytes(tmp / "theirs" / "wandb" / "run.txt", b"w")
    return tmp / "theirs"


BUSY_PORTS: list[socket.socket] = []
"""Listening sockets the port-in-use cases hold until the module's tests end."""


def busy_port(tmp: Path) -> Path:
    """A loopback port something else listens on; "{file}" becomes its number."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    BUSY_PORTS.append(sock)
    return Path(str(sock.getsockname()[1]))


def raising_plugin(module: str) -> Callable[[Path], Path]:
    """An allow-listed plugin module (on sys.path: the case's tmp dir) whose import raises."""
    return lambda tmp: write_bytes(tmp / f"{module}.py", b"raise RuntimeError('boom at import')\n").parent


def fifo(tmp: Path) -> Path:
    path = tmp / "prompts.txt"
    os.mkfifo(path)  # a reader would block until a writer comes: never opened by the checks
    return path


def exported_checkpoint(tmp: Path) -> Path:
    """A checkpoint holding an exported LoRA folder (what `genalign export` uploads)."""
    write_bytes(tmp / "checkpoint-2" / "lora" / "README.md", b"---\nlibrary_name: diffusers\n---\n")
    write_bytes(tmp / "checkpoint-2" / "lora" / "pytorch_lora_weights.safetensors", b"{}")
    return tmp / "checkpoint-2"


def linked_log_dir(tmp: Path) -> Path:
    """A run directory whose train.log is a symlink to a file outside it."""
    run = tmp / "linked"
    write_bytes(run / "config.yaml", yaml.safe_dump(config_to_dict(load_config(None))).encode())
    write_bytes(tmp / "elsewhere.txt", b"precious\n")
    (run / "train.log").symlink_to(tmp / "elsewhere.txt")
    return run


# ------------------------------------------------------------------ the table
@dataclass
class Case:
    id: str
    args: list[str]
    """CLI argv; "{tmp}" is the case's tmp dir, "{file}" what `setup` returned."""
    names: list[str]
    """Fragments the error line must contain (the key and/or the file)."""
    setup: Callable[[Path], Path] | None = None
    also_config: bool = True
    """For `train` cases: `genalign config` must report the same line."""
    absent: list[str] = field(default_factory=list)
    """Fragments the error must NOT contain (e.g. the wrong key)."""


def manifest(name: str, data: bytes) -> Callable[[Path], Path]:
    return lambda tmp: write_bytes(tmp / name, data)


def yaml_file(text: bytes) -> Callable[[Path], Path]:
    return lambda tmp: write_bytes(tmp / "recipe.yaml", text)


TOY = ["train", "trainer.resume_from=auto"]
"""The toy recipe, continuing the earlier run in its default output_dir (a bare `train` there
is itself a mistake: case output-dir-holds-a-run)."""
SD3 = ["train", "--config", "experiment/diffusion/sd3_5/online_grpo_ocr"]
SERVE = ["serve-reward", "--components", "jpeg_compressibility"]
FLUX = ["train", "--config", "experiment/diffusion/flux/online_grpo_ocr"]
ROW = b'{"prompt": "a red circle"}\n'
CASES = [
    # manifests (item 6)
    Case("manifest-missing", TOY + ["data.manifest=nope/train.txt"], ["data.manifest", "nope/train.txt", "not found"]),
    Case("eval-manifest-missing", TOY + ["data.eval_manifest={tmp}/absent.txt"], ["data.eval_manifest", "absent.txt"]),
    Case(
        "manifest-empty", TOY + ["data.manifest={file}"], ["data.manifest", "holds no prompts"], manifest("e.txt", b"")
    ),
    Case("manifest-directory", TOY + ["data.manifest={tmp}"], ["data.manifest", "is a directory"]),
    Case(
        "manifest-not-utf8",
        TOY + ["data.manifest={file}"],
        ["data.manifest", "not UTF-8"],
        manifest("latin.txt", "a red café\n".encode("latin-1")),
    ),
    Case(
        "manifest-blank-line",
        TOY + ["data.manifest={file}"],
        ["data.manifest", "line 2 of", "is empty"],
        manifest("blank.txt", b"a red circle\n\na blue square\n"),
    ),
    Case(
        "eval-manifest-blank-line",
        TOY + ["data.eval_manifest={file}"],
        ["data.eval_manifest", "line 1 of"],
        manifest("eblank.txt", b"   \na red circle\n"),
    ),
    Case(
        "manifest-bad-jsonl",
        TOY + ["data.manifest={file}"],
        ["data.manifest", "line 2 of", "not JSON"],
        manifest("bad.jsonl", ROW + b'{"prompt": "x",\n'),
    ),
    Case(
        "manifest-jsonl-no-prompt",
        TOY + ["data.manifest={file}"],
        ["data.manifest", 'no "prompt" field'],
        manifest("np.jsonl", b'{"text": "a red circle"}\n'),
    ),
    Case(
        "manifest-json-not-list",
        TOY + ["data.manifest={file}"],
        ["data.manifest", "JSON list"],
        manifest("obj.json", b'{"prompt": "a red circle"}'),
    ),
    Case(
        "manifest-csv",
        TOY + ["data.manifest={file}"],
        ["data.manifest", "unsupported extension"],
        manifest("p.csv", b"a red circle\n"),
    ),
    Case(
        "manifest-26mb-line",
        TOY + ["data.manifest={file}"],
        ["data.manifest", "line 1 of", "characters long"],
        manifest("huge.txt", b"x" * 26_000_000 + b"\n"),
    ),
    # values that passed `genalign config` and failed later (item 7)
    Case("lr-negative", TOY + ["actor.lr=-1"], ["actor.lr", "> 0"]),
    Case("lr-nan", TOY + ["actor.lr=nan"], ["actor.lr", "finite"]),
    Case("lr-inf", TOY + ["actor.lr=inf"], ["actor.lr", "finite"]),
    Case("betas-one", TOY + ["actor.betas=[0.5]"], ["actor.betas", "two numbers"]),
    Case("betas-range", TOY + ["actor.betas=[0.9,1.5]"], ["actor.betas"]),
    Case("eps-zero", TOY + ["actor.eps=0"], ["actor.eps"]),
    Case("noise-nan", TOY + ["rollout.noise_level=nan"], ["rollout.noise_level", "finite"]),
    Case("guidance-nan", TOY + ["rollout.guidance_scale=nan"], ["rollout.guidance_scale", "finite"]),
    Case("guidance-below-one", TOY + ["rollout.guidance_scale=0.5"], ["rollout.guidance_scale", ">= 1"]),
    Case("eval-guidance-inf", TOY + ["eval.guidance_scale=inf"], ["eval.guidance_scale", "finite"]),
    Case("clip-range-nan", TOY + ["algorithm.clip_range=nan"], ["algorithm.clip_range", "finite"]),
    Case("eval-samples-zero", TOY + ["eval.samples_per_prompt=0"], ["eval.samples_per_prompt", "positive"]),
    Case("eval-max-prompts-zero", TOY + ["eval.max_prompts=0"], ["eval.max_prompts", "positive"]),
    Case("ema-decay-two", TOY + ["actor.ema.decay=2"], ["actor.ema.decay", "[0, 1)"]),
    Case("reward-weight-nan", TOY + ["reward.components.toy_shape=nan"], ["reward.components.toy_shape", "finite"]),
    Case("height-huge", TOY + ["rollout.height=100000"], ["rollout.height=100000", "too large"]),
    Case("height-toy-size", TOY + ["rollout.height=16", "rollout.width=16"], ["rollout.height", "32x32"]),
    Case("height-sd3-multiple", SD3 + ["rollout.height=500"], ["rollout.height=500", "multiple of 16"]),
    Case(
        "reward-option-typo",
        TOY + ["reward.components.random=1.0", "reward.kwargs.random.sed=1"],
        ["reward.kwargs.random.sed", "did you mean reward.kwargs.random.seed"],
    ),
    Case(
        "reward-option-value",
        TOY + ["reward.components.random=1.0", "reward.kwargs.random.seed=abc"],
        ["reward.kwargs.random.seed", "expected int"],
    ),
    Case(
        "model-hub-id-not-cached",
        SD3 + ["model.path=no-such-org/no-such-model"],
        ["model.path='no-such-org/no-such-model'", "HF_HUB_OFFLINE is set", "not in the Hugging Face cache"],
    ),
    Case(
        "reward-hub-id-not-cached",
        TOY + ["reward.components.clip_score=1.0", "reward.kwargs.clip_score.model_name=no-such-org/clip"],
        ["reward.kwargs.clip_score.model_name='no-such-org/clip'", "not in the Hugging Face cache"],
    ),
    Case("reward-kwargs-unknown-reward", TOY + ["reward.kwargs.toy_shap.path=x"], ["reward.kwargs.toy_shap"]),
    Case("reward-unknown", TOY + ["reward.components={toy_shap: 1.0}"], ["reward.components", "toy_shap"]),
    # overrides and config files (item 8)
    Case("override-not-yaml", TOY + ["actor.betas=[0.9,"], ["actor.betas", "not valid YAML"]),
    Case("override-at-sign", TOY + ["trainer.output_dir=@foo"], ["trainer.output_dir", "not valid YAML"]),
    Case("override-no-equals", TOY + ["rollout.n"], ["rollout.n", "key=value"]),
    Case("override-typo", TOY + ["rollout.nn=4"], ["rollout.nn", "did you mean"]),
    Case("override-wrong-type", TOY + ["rollout.n=abc"], ["rollout.n", "expected int"]),
    Case("override-nested-unknown", TOY + ["eval.foo.bar=1"], ["eval.foo", "unknown key"], absent=["KeyError"]),
    Case(
        "config-not-utf8",
        ["train", "--config", "{file}"],
        ["recipe.yaml", "not UTF-8"],
        yaml_file("trainer:\n  output_dir: caf\xe9\n".encode("latin-1")),
    ),
    Case(
        "config-duplicate-key",
        ["train", "--config", "{file}"],
        ["recipe.yaml", "duplicate key 'actor'"],
        yaml_file(b"actor:\n  lr: 0.001\nrollout:\n  n: 4\nactor:\n  eps: 1.0e-6\n"),
    ),
    Case("config-not-mapping", ["train", "--config", "{file}"], ["recipe.yaml", "mapping"], yaml_file(b"- a\n- b\n")),
    Case(
        "config-bad-yaml",
        ["train", "--config", "{file}"],
        ["recipe.yaml", "not valid YAML"],
        yaml_file(b"actor: [1, 2\n"),
    ),
    Case("config-missing", ["train", "--config", "{tmp}/absent.yaml"], ["--config", "absent.yaml"]),
    Case("recipe-typo", ["train", "--config", "experiment/toy/shapes_grpoo"], ["--config", "Did you mean"]),
    # bounded YAML, empty mappings, run directories that are not ours
    Case(
        "config-alias-bomb",
        ["train", "--config", "{file}"],
        ["recipe.yaml", "expands to more than 100000 values"],
        yaml_file(ALIAS_BOMB.encode()),
    ),
    Case(
        "config-too-large",
        ["train", "--config", "{file}"],
        ["recipe.yaml", "characters long"],
        yaml_file(b"# " + b"x" * 1_100_000 + b"\n"),
    ),
    Case(
        "override-alias-bomb",
        TOY + ["model.lora.target_modules=" + ALIAS_BOMB.replace("\n", ", ").join("{}")],
        ["model.lora.target_modules", "expands to more than"],
    ),
    Case(
        "eval-checkpoint-alias-bomb",
        ["eval", "--checkpoint", "{file}"],
        ["--checkpoint", "config.yaml", "expands to more than"],
        bomb_checkpoint,
    ),
    Case(
        "resume-alias-bomb",
        TOY + ["trainer.resume_from={file}"],
        ["trainer.resume_from", "config.yaml", "expands to more than"],
        bomb_checkpoint,
    ),
    Case(
        "gold-rewards-empty",
        TOY + ["eval.gold_rewards={}"],
        ["eval.gold_rewards={}", "changes nothing", "eval.gold_rewards.toy_shape_judge=0"],
    ),
    Case(
        "eval-checkpoint-nan-tensor",
        ["eval", "--checkpoint", "{file}"],
        ["--checkpoint", "trainable.safetensors", "tensor 'w' holds NaN"],
        nan_checkpoint,
    ),
    Case(
        "output-dir-not-a-run",
        ["train", "trainer.output_dir={file}"],
        ["trainer.output_dir", "metrics.csv", "not a genalign run", "trainer.overwrite=true"],
        foreign_dir,
    ),
    Case(
        "output-dir-not-a-run-auto",
        TOY + ["trainer.output_dir={file}"],
        ["trainer.output_dir", "metrics.csv", "not a genalign run"],
        foreign_dir,
    ),
    Case(
        "output-dir-symlinked-log",
        TOY + ["trainer.output_dir={file}"],
        ["trainer.output_dir", "train.log is a symbolic link"],
        linked_log_dir,
    ),
    Case(
        "nproc-accumulation-not-a-multiple",
        [
            "train",
            "--nproc-per-node=2",
            "trainer.resume_from=auto",
            "distributed.training.strategy=ddp",
            "actor.gradient_accumulation_steps=1",
        ],
        ["actor.gradient_accumulation_steps=1", "multiple of the 2 ranks", "set it to 2"],
        also_config=False,
    ),
    # the last tracebacks: each one line naming the key or file, before the model loads
    Case(
        "model-path-not-a-pipeline",
        SD3 + ["model.path={file}"],
        ["model.path", "not a diffusers pipeline directory", "StableDiffusion3Pipeline"],
        lambda tmp: write_bytes(tmp / "notpipe" / "readme.txt", b"hi").parent,
    ),
    Case(
        "model-path-other-family",
        FLUX + ["model.path={file}"],
        ["model.path", "holds a StableDiffusion3Pipeline", "not the FluxPipeline", "model.family=sd3"],
        lambda tmp: (
            write_bytes(tmp / "sd3" / "model_index.json", b'{"_class_name": "StableDiffusion3Pipeline"}').parent
        ),
        absent=["embedded_guidance"],
    ),
    Case(
        "output-dir-sysfs",
        TOY + ["trainer.output_dir=/sys/genalign_run"],
        ["trainer.output_dir", "cannot create", "not writable"],
    ),
    Case(
        "manifest-60k-line",
        TOY + ["data.manifest={file}"],
        ["data.manifest", "line 1 of", "60,000 characters long"],
        manifest("long.txt", b"a" * 60_000 + b"\n"),
    ),
    Case(
        "manifest-nul-byte",
        TOY + ["data.manifest={file}"],
        ["data.manifest", "line 2 of", "NUL byte"],
        manifest("nul.txt", b"a red circle\na blue\x00square\n"),
    ),
    Case(
        "allow-import-no-module",
        TOY + ["reward.components={'nosuchmod.sub:Scorer': 1.0}", "reward.allow_import=['nosuchmod.sub:Scorer']"],
        ["reward.components", "nosuchmod.sub", "cannot be imported"],
    ),
    Case(
        "allow-import-no-attribute",
        TOY + ["reward.components={'os.path:NoScorer': 1.0}", "reward.allow_import=['os.path:NoScorer']"],
        ["reward.components", "has no attribute 'NoScorer'"],
    ),
    Case(
        "allow-import-not-a-class",
        TOY + ["reward.components={'os.path:sep': 1.0}", "reward.allow_import=['os.path:sep']"],
        ["reward.components", "'os.path:sep' is a str, not a class"],
    ),
    # checkpoints to resume from (item 9)
    Case(
        "resume-missing",
        TOY + ["trainer.resume_from={tmp}/checkpoint-9"],
        ["trainer.resume_from", "checkpoint-9", "does not exist"],
    ),
    Case(
        "resume-is-file",
        TOY + ["trainer.resume_from={file}"],
        ["trainer.resume_from", "is a file"],
        manifest("ckpt.bin", b"not a checkpoint"),
    ),
    Case(
        "resume-truncated-safetensors",
        TOY + ["trainer.resume_from={file}"],
        ["trainer.resume_from", "trainable.safetensors", "truncated"],
        corrupt("trainable.safetensors", truncate=True),
    ),
    Case(
        "resume-bad-trainer-state",
        TOY + ["trainer.resume_from={file}"],
        ["trainer.resume_from", "trainer_state.json", "not valid JSON"],
        corrupt("trainer_state.json", b"{step: 1"),
    ),
    Case(
        "resume-no-step",
        TOY + ["trainer.resume_from={file}"],
        ["trainer.resume_from", "trainer_state.json", "step"],
        corrupt("trainer_state.json", b'{"eval_history": {}}'),
    ),
    Case(
        "resume-bad-optimizer-json",
        TOY + ["trainer.resume_from={file}"],
        ["trainer.resume_from", "optimizer.json", "not valid JSON"],
        corrupt("optimizer.json", b"\x00\x01"),
    ),
    Case(
        "resume-incomplete",
        TOY + ["trainer.resume_from={file}"],
        ["trainer.resume_from", "missing optimizer.json"],
        corrupt("optimizer.json"),
    ),
    Case(
        "resume-bad-config-key",
        TOY + ["trainer.resume_from={file}"],
        ["trainer.resume_from", "config.yaml", "lrr"],
        edited_checkpoint(lambda c: c["actor"].update(lrr=1.0)),
    ),
    Case(
        "resume-config-nan",
        TOY + ["trainer.resume_from={file}"],
        ["trainer.resume_from", "config.yaml", "actor.lr"],
        edited_checkpoint(lambda c: c["actor"].update(lr=float("nan"))),
    ),
    # `genalign eval --checkpoint` (items 9, 10)
    Case(
        "eval-checkpoint-is-file",
        ["eval", "--checkpoint", "{file}"],
        ["--checkpoint", "is a file"],
        manifest("model.safetensors", b"x"),
        absent=["trainer.resume_from"],
    ),
    Case(
        "eval-checkpoint-missing",
        ["eval", "--checkpoint", "{tmp}/nope"],
        ["--checkpoint", "does not exist"],
        absent=["trainer.resume_from"],
    ),
    Case(
        "eval-truncated-safetensors",
        ["eval", "--checkpoint", "{file}"],
        ["--checkpoint", "optimizer.safetensors"],
        corrupt("optimizer.safetensors", truncate=True),
    ),
    Case(
        "eval-nested-unknown",
        ["eval", "--checkpoint", "{file}", "eval.foo.bar=1"],
        ["eval.foo", "unknown key"],
        edited_checkpoint(lambda c: None),
        absent=["KeyError"],
    ),
    Case(
        "eval-non-eval-override",
        ["eval", "--checkpoint", "{file}", "rollout.n=2"],
        ["rollout.n=2", "eval.<key>"],
        edited_checkpoint(lambda c: None),
    ),
    Case(
        "eval-bad-override-value",
        ["eval", "--checkpoint", "{file}", "eval.max_prompts=0"],
        ["eval.max_prompts"],
        edited_checkpoint(lambda c: None),
    ),
    Case(
        "eval-output-dir-is-file",
        ["eval", "--checkpoint", "{file}", "--output-dir", "{file}/config.yaml"],
        ["--output-dir", "is a file"],
        edited_checkpoint(lambda c: None),
    ),
    Case(
        "eval-allow-import-not-list",
        ["eval", "--checkpoint", "{file}", "reward.allow_import=torch.hub:load"],
        ["reward.allow_import", "expected a list"],
        edited_checkpoint(lambda c: None),
    ),
    Case(
        "eval-checkpoint-manifest-gone",
        ["eval", "--checkpoint", "{file}"],
        ["config.yaml", "data.eval_manifest"],
        edited_checkpoint(lambda c: c["data"].update(eval_manifest="/nonexistent/test.txt")),
    ),
    Case(
        "eval-checkpoint-dotted-family",
        ["eval", "--checkpoint", "{file}"],
        ["model.family", "os:system"],
        edited_checkpoint(lambda c: c["model"].update(family="os:system")),
    ),
    # security (item 1): a checkpoint's config is data, never code
    Case(
        "eval-hubconf-attack",
        ["eval", "--checkpoint", "{file}"],
        ["torch.hub:load", "reward.allow_import"],
        hubconf_checkpoint,
    ),
    Case(
        "eval-hubconf-gold-attack",
        ["eval", "--checkpoint", "{file}"],
        ["eval.gold_rewards", "torch.hub:load"],
        lambda tmp: hubconf_checkpoint(tmp, where="gold"),
    ),
    Case(
        "resume-hubconf-attack",
        TOY + ["trainer.resume_from={file}"],
        ["trainer.resume_from", "config.yaml", "torch.hub:load"],
        hubconf_checkpoint,
    ),
    Case(
        "cli-dotted-not-allowed",
        TOY + ["reward.components={os.path:join: 1.0}"],
        ["reward.components", "os.path:join", "reward.allow_import"],
    ),
    # files the config names (items 3, 11)
    Case(
        "reward-path-missing",
        TOY + ["reward.kwargs.toy_shape.path={tmp}/classifiers"],
        ["reward.kwargs.toy_shape.path", "classifiers", "does not exist"],
    ),
    Case(
        "output-dir-is-file",
        TOY + ["trainer.output_dir={file}"],
        ["trainer.output_dir", "is a file"],
        manifest("out.txt", b"x"),
    ),
    Case(
        "output-dir-under-file",
        TOY + ["trainer.output_dir={file}/run"],
        ["trainer.output_dir", "is a file"],
        manifest("out2.txt", b"x"),
    ),
    Case(
        "output-dir-unwritable",
        TOY + ["trainer.output_dir=/proc/sys/genalign_run"],
        ["trainer.output_dir", "not writable"],
    ),
    Case("output-dir-empty", TOY + ["trainer.output_dir="], ["trainer.output_dir", "empty"]),
    Case(
        "output-dir-holds-a-run",
        ["train"],
        [
            "trainer.output_dir=outputs/toy_shapes_grpo",
            "already holds a run",
            "trainer.resume_from=auto",
            "trainer.overwrite=true",
        ],
    ),
    Case("manifest-empty-path", TOY + ["data.manifest="], ["data.manifest", "empty"]),
    Case("device-typo", TOY + ["model.device=gpu"], ["model.device='gpu'", "cuda"]),
    Case("model-path-missing", TOY + ["model.path={tmp}/no_model"], ["model.path", "no_model", "does not exist"]),
    Case("model-path-is-file", TOY + ["model.path={file}"], ["model.path", "is a file"], manifest("weights.bin", b"x")),
    # the reward service's command line, and the last values that passed `config` and failed later
    Case("serve-max-request-nan", SERVE + ["--max-request-mb", "nan"], ["--max-request-mb nan", "finite number > 0"]),
    Case("serve-max-request-inf", SERVE + ["--max-request-mb", "inf"], ["--max-request-mb inf", "finite number > 0"]),
    Case("serve-port-in-use", SERVE + ["--port", "{file}"], ["--port", "is already in use", "--port"], busy_port),
    Case(
        "serve-host-unresolvable",
        SERVE + ["--host", "no-such-host.invalid"],
        ["--host 'no-such-host.invalid'", "does not resolve"],
    ),
    Case(
        "serve-host-not-here", SERVE + ["--host", "192.0.2.1"], ["--host 192.0.2.1", "not an address of this machine"]
    ),
    Case(
        "serve-weak-token-public",
        SERVE + ["--host", "0.0.0.0", "--token-env", "GENALIGN_TEST_WEAK_TOKEN"],
        ["$GENALIGN_TEST_WEAK_TOKEN is too weak", "at least 32 characters", "--insecure-token"],
    ),
    Case(
        "serve-plugin-raises-on-import",
        ["serve-reward", "--components", "boom_served:Scorer", "reward.allow_import=[boom_served:Scorer]"],
        ["boom_served:Scorer", "raised RuntimeError: boom at import"],
        raising_plugin("boom_served"),
    ),
    Case(
        "reward-plugin-raises-on-import",
        TOY + ["reward.components={'boom_reward:Scorer': 1.0}", "reward.allow_import=['boom_reward:Scorer']"],
        ["reward.components", "boom_reward:Scorer", "raised RuntimeError: boom at import"],
        raising_plugin("boom_reward"),
    ),
    Case(
        "family-plugin-raises-on-import",
        TOY + ["model.family=boom_family:SPEC", "model.allow_import=[boom_family:SPEC]"],
        ["model.family", "boom_family:SPEC", "raised RuntimeError: boom at import"],
        raising_plugin("boom_family"),
    ),
    Case("adv-clip-max-zero", TOY + ["algorithm.adv_clip_max=0"], ["algorithm.adv_clip_max", "must be > 0"]),
    Case(
        "lora-rank-past-int64",
        TOY + ["model.lora.rank=100000000000000000000"],
        ["model.lora.rank=100000000000000000000", "64-bit integer"],
    ),
    Case(
        "seed-past-int64",
        TOY + ["trainer.seed=99999999999999999999"],
        ["trainer.seed=99999999999999999999", "64-bit integer"],
    ),
    Case(
        "reward-url-unclosed-bracket",
        TOY + ["reward.runtime=http", "reward.url=http://[::1"],
        ["reward.url='http://[::1'", "is not a URL"],
    ),
    Case(
        "export-push-offline",
        ["export", "{file}", "--push-to-hub", "me/my-lora"],
        ["--push-to-hub me/my-lora", "HF_HUB_OFFLINE is set"],
        exported_checkpoint,
    ),
    Case("manifest-dev-zero", TOY + ["data.manifest=/dev/zero"], ["data.manifest", "/dev/zero", "not a regular file"]),
    Case("manifest-fifo", TOY + ["data.manifest={file}"], ["data.manifest", "prompts.txt", "not a regular file"], fifo),
]


if not torch.cuda.is_available():  # a machine fact: only where this box has no GPU
    CASES.append(Case("device-not-here", TOY + ["model.device=cuda"], ["model.device=cuda", "no CUDA device"]))
if not torch.backends.mps.is_available():
    CASES.append(Case("device-mps-not-here", TOY + ["model.device=mps"], ["model.device=mps", "no Apple mps device"]))


# ------------------------------------------------------------------ running a case
def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """The working directory of every case, holding an earlier run at the recipe's default
    trainer.output_dir: no case may change a byte of it."""
    root = tmp_path_factory.mktemp("cwd")
    earlier = root / "outputs" / "toy_shapes_grpo"
    make_checkpoint(earlier / "checkpoint-1")
    (earlier / "metrics.csv").write_text("step,loss\n1,0.5\n")
    (earlier / "config.yaml").write_text(yaml.safe_dump(config_to_dict(load_config(None))))
    return root


@pytest.fixture
def tripwire(monkeypatch):
    """Model loading (train and eval) raises instead of loading; logging set-up is a no-op."""

    def trip(*args, **kwargs):
        raise ReachedModelLoading("the mistake was not caught before model loading")

    monkeypatch.setattr("genalign.training.trainer.Trainer.for_config", trip)
    monkeypatch.setattr("genalign.training.setup.build_policy", trip)
    monkeypatch.setattr("genalign.rewards.serve_command.build_scorers", trip)  # serve-reward loads its scorers
    monkeypatch.setattr(cli, "_configure_logging", lambda: None)
    monkeypatch.setenv("GENALIGN_REWARD_TOKEN", "tripwire-token-" + "0123456789abcdefghijklmnopqrstuv")
    monkeypatch.setenv("GENALIGN_TEST_WEAK_TOKEN", "password")


def run_in_process(argv: list[str]) -> tuple[int, str, float]:
    stderr, start = io.StringIO(), time.monotonic()
    with redirect_stderr(stderr), redirect_stdout(io.StringIO()):
        try:
            code = cli.main(argv)
        except SystemExit as exc:  # argparse
            code = exc.code
        except Exception:  # noqa: BLE001 - a traceback is what this suite must never see
            traceback.print_exc()
            code = 1
    return code, stderr.getvalue(), time.monotonic() - start


def assert_one_line_error(code: int, stderr: str, seconds: float, case: Case) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2, f"exit {code}; stderr:\n{stderr}"
    assert "Traceback" not in stderr and "ReachedModelLoading" not in stderr, stderr
    assert 1 <= len(lines) <= 2, f"expected one line (+ hint), got:\n{stderr}"
    assert lines[0].startswith("genalign: error: "), lines[0]
    if len(lines) == 2:
        assert lines[1].startswith("hint: "), lines
    for fragment in case.names:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    for fragment in case.absent:
        assert fragment not in stderr, stderr
    assert len(lines[0]) < 1000, f"error line of {len(lines[0])} characters"
    assert seconds < TIME_LIMIT_S
    return lines[0]


def materialise(case: Case, tmp: Path) -> list[str]:
    made = case.setup(tmp) if case.setup else tmp
    return [arg.replace("{file}", str(made)).replace("{tmp}", str(tmp)) for arg in case.args]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_is_one_line_before_anything_loads(case, tmp_path, workdir, tripwire, monkeypatch):
    monkeypatch.chdir(workdir)
    monkeypatch.syspath_prepend(str(tmp_path))  # the plugin modules a case writes
    before = snapshot(workdir)
    argv = materialise(case, tmp_path)
    code, stderr, seconds = run_in_process(argv)
    line = assert_one_line_error(code, stderr, seconds, case)
    if argv[0] == "train" and case.also_config:  # `genalign config` reports the same problem
        code, stderr, seconds = run_in_process(["config"] + argv[1:])
        assert assert_one_line_error(code, stderr, seconds, case) == line
    assert snapshot(workdir) == before, "an earlier run's files changed"
    assert not (tmp_path / "PWNED").exists(), "the checkpoint's config ran code"


def test_there_are_at_least_fifty_cases():
    assert len(CASES) >= 50 and len({case.id for case in CASES}) == len(CASES)


def test_config_no_check_files_composes_for_another_machine(tmp_path, workdir, tripwire, monkeypatch):
    monkeypatch.chdir(workdir)
    argv = ["config", "--no-check-files", "data.manifest=/data/elsewhere/train.txt", "model.path=/models/toy"]
    code, stderr, _ = run_in_process(argv)
    assert code == 0, stderr


def test_the_users_own_allow_list_is_honoured(tmp_path, workdir, tripwire, monkeypatch):
    """The guard is an allow-list, not a ban: with the import listed on the user's command line
    the same checkpoint passes validation and reaches model loading (the tripwire)."""
    monkeypatch.chdir(workdir)
    scorer = "genalign.rewards.random_reward:RandomReward"  # any importable class with a score method
    checkpoint = make_checkpoint(
        tmp_path / "checkpoint-1", lambda c: c["reward"].update(components={scorer: 1.0}, allow_import=[])
    )
    code, stderr, _ = run_in_process(["eval", "--checkpoint", str(checkpoint), f"reward.allow_import=[{scorer}]"])
    assert code == 1 and "ReachedModelLoading" in stderr, stderr
    code, stderr, _ = run_in_process([*TOY, f"reward.components={{{scorer}: 1.0}}", f"reward.allow_import=[{scorer}]"])
    assert code == 1 and "ReachedModelLoading" in stderr, stderr


def test_a_real_bug_keeps_its_traceback(monkeypatch):
    def bug(argv):
        raise ZeroDivisionError("a bug, not a user error")

    monkeypatch.setitem(cli.COMMANDS, "config", bug)
    with pytest.raises(ZeroDivisionError):
        cli.main(["config"])


def test_disk_full_during_a_checkpoint_is_one_line_and_keeps_the_previous(tmp_path, monkeypatch):
    """ENOSPC while `genalign train` writes a checkpoint. The trainer is a stub that only saves
    (a real run to its first checkpoint takes a minute on this box); the write path is real."""
    import errno

    import genalign.runs.checkpoint as checkpoint_module

    previous = make_checkpoint(tmp_path / "run" / "checkpoint-final")
    before = snapshot(tmp_path / "run")

    def full_disk(tensors, filename):
        raise OSError(errno.ENOSPC, "No space left on device", filename)

    class SavingTrainer:
        @classmethod
        def for_config(cls, cfg):
            return cls()

        def train(self):
            checkpoint_module.save_checkpoint(
                previous,
                step=2,
                config={},
                trainable={"w": torch.ones(2)},
                ema=None,
                optimizer={"state": {}, "param_groups": []},
                trainer_state={},
            )

    monkeypatch.setattr(checkpoint_module, "save_file", full_disk)
    monkeypatch.setattr("genalign.training.trainer.Trainer", SavingTrainer)
    monkeypatch.setattr(cli, "_configure_logging", lambda: None)
    case = Case("disk-full", [], ["trainer.output_dir", "checkpoint-final", "No space left on device", "intact"])
    code, stderr, seconds = run_in_process(["train", f"trainer.output_dir={tmp_path / 'new_run'}"])
    assert_one_line_error(code, stderr, seconds, case)
    assert snapshot(tmp_path / "run") == before  # the previous checkpoint, byte for byte
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["checkpoint-final"]  # the partial temp dir is gone


# ------------------------------------------------------------------ the real process
def run_cli(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "genalign", *args], capture_output=True, text=True, env=ENV, cwd=cwd, timeout=300
    )
    return result, time.monotonic() - start


SUBPROCESS_CASES = [
    "eval-hubconf-attack",
    "resume-hubconf-attack",
    "override-not-yaml",
    "eval-checkpoint-is-file",
    "resume-truncated-safetensors",
    "manifest-blank-line",
]


@pytest.mark.parametrize("case_id", SUBPROCESS_CASES)
def test_the_process_exits_2_with_one_line(case_id, tmp_path, workdir):
    case = next(case for case in CASES if case.id == case_id)
    before = snapshot(workdir)
    result, seconds = run_cli(*materialise(case, tmp_path), cwd=workdir)
    line = assert_one_line_error(result.returncode, result.stderr, seconds, case)
    assert "step sizes" not in result.stderr and "loading" not in result.stderr.lower(), line  # nothing was built
    assert snapshot(workdir) == before
    assert not (tmp_path / "PWNED").exists(), "the checkpoint's config ran code"


def test_the_process_shows_a_real_bug_as_a_traceback(tmp_path):
    code = (
        "import sys; from genalign import cli; "
        "cli.COMMANDS['config'] = lambda argv: 1 / 0; sys.exit(cli.main(['config']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300
    )
    assert result.returncode == 1 and "Traceback" in result.stderr and "ZeroDivisionError" in result.stderr


def test_hubconf_runs_when_called_directly(tmp_path):
    """The attack is real: the same repo does write its marker when torch.hub is called, so
    the cases above prove the guard, not a broken payload."""
    torch.hub.load(str(hubconf_dir(tmp_path)), "x", source="local")
    assert (tmp_path / "PWNED").exists()


PACKAGE = Path(cli.__file__).resolve().parent
WARNED = [
    (["reward.components.toy_shape=-1"], "reward.components.toy_shape=-1 is negative"),
    (["reward.components.ocr=1.0"], "reward.components.ocr with model.family=toy: this model never draws text"),
    (["data.manifest={tmp}/one.txt"], "data.manifest holds 1 prompt(s) but rollout.rollout_batch_size=8"),
    (
        ["rollout.n=1", "rollout.sample_batch_size=8", "trainer.output_dir={tmp}/fresh"],
        "rollout.n=1 with algorithm.advantage.per_prompt=true: each group holds one sample, whose advantage",
    ),
    (["model.lora.rank=100000"], "model.lora.rank=100000 is above the transformer's width 64"),
    (["--no-check-files", "trainer.output_dir=/"], "trainer.output_dir=/ is the filesystem root"),
    (
        [f"trainer.output_dir={PACKAGE}/runs/demo"],
        f"trainer.output_dir={PACKAGE}/runs/demo is inside the installed genalign package",
    ),
]


@pytest.mark.parametrize(
    "overrides, warning",
    WARNED,
    ids=[
        "negative-weight",
        "ocr-on-toy",
        "one-prompt",
        "group-of-one",
        "lora-rank-past-width",
        "output-dir-root",
        "output-dir-in-package",
    ],
)
def test_accepted_but_surprising_settings_are_one_warning_line(
    overrides, warning, tmp_path, workdir, tripwire, monkeypatch
):
    """Valid settings a user would want to hear about: `genalign config` exits 0 and says so
    in one `genalign: warning:` line (the trainer logs the same line before building)."""
    monkeypatch.chdir(workdir)
    write_bytes(tmp_path / "one.txt", b"a red circle\n")
    flags = [o for o in overrides if o.startswith("--")]  # before the positional overrides
    argv = [
        "config",
        *flags,
        "trainer.resume_from=auto",
        *(o.replace("{tmp}", str(tmp_path)) for o in overrides if o not in flags),
    ]
    code, stderr, _ = run_in_process(argv)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 0 and len(lines) == 1 and lines[0].startswith(f"genalign: warning: {warning}"), stderr


def test_a_checkpoint_whose_tensors_do_not_fit_the_model_is_one_line(tmp_path, monkeypatch):
    """Names and shapes are known only once the model is built: one line naming the file."""
    from safetensors.torch import load_file, save_file

    monkeypatch.setattr(cli, "_configure_logging", lambda: None)
    small = [
        "trainer.progress_bar=false",
        "rollout.n=4",
        "rollout.rollout_batch_size=2",
        "rollout.sample_batch_size=8",
        "rollout.num_steps=4",
        "eval.every=0",
        "eval.at_start=false",
        "trainer.num_steps=1",
        f"trainer.output_dir={tmp_path / 'run'}",
    ]
    code, stderr, _ = run_in_process(["train", *small])
    assert code == 0, stderr
    trainable = tmp_path / "run" / "checkpoint-final" / "trainable.safetensors"
    tensors = load_file(str(trainable))
    name = sorted(tensors)[0]
    tensors[name] = torch.zeros(3, 3)
    save_file(tensors, str(trainable))
    code, stderr, seconds = run_in_process(["train", *small, "trainer.num_steps=2", "trainer.resume_from=auto"])
    case = Case("checkpoint-wrong-shapes", [], ["trainer.resume_from", "trainable.safetensors", "shape mismatches"])
    assert_one_line_error(code, stderr, seconds, case)
