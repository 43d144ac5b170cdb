"""Which config keys a resumed run may change, and `ResumeError`, a resume refused.

Where it fits: resuming (`Trainer.__init__`) refuses a checkpoint whose config differs under
RESUME_KEYS, and the run-directory rules (`run_dir.py`) refuse to replace a run with a
different config; both compare config dicts with `incompatible_keys`.
"""

from __future__ import annotations

from genalign.config.errors import UserError

# Config keys whose change makes a checkpoint's state meaningless for this run. Everything
# else (output_dir, num_steps, eval cadence, logging) may change on resume.
RESUME_KEYS = ["model", "rollout", "actor", "algorithm", "reward", "data.manifest", "data.shuffle", "trainer.seed"]
RESUME_FREE_KEYS = [
    "reward.allow_import",
    "model.allow_import",
    "algorithm.allow_import",
    "model.card",
    "rollout.overlap",
]
"""Under RESUME_KEYS but free to change, with everything under them: permissions of this
invocation, what exported model cards say about the base model (not run state; absent
from checkpoints written before it existed), and whether the rollout runs beside training
(turned on at a resume, the first rollout samples with the checkpoint's weights)."""


class ResumeError(UserError, ValueError):
    """A checkpoint this run cannot continue from: the message names the checkpoint and why."""


def select(tree: dict, dotted: str):
    node = tree
    for part in dotted.split("."):
        node = node.get(part, {}) if isinstance(node, dict) else {}
    return node


def incompatible_keys(saved: dict, current: dict) -> list[str]:
    """Dotted keys under RESUME_KEYS whose values differ between two config dicts."""
    differing: list[str] = []

    def walk(a, b, prefix: str) -> None:
        if any(prefix == free or prefix.startswith(free + ".") for free in RESUME_FREE_KEYS):
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b)):
                walk(a.get(key), b.get(key), f"{prefix}.{key}")
        elif a != b:
            differing.append(f"{prefix}: checkpoint {a!r} vs now {b!r}")

    for key in RESUME_KEYS:
        walk(select(saved, key), select(current, key), key)
    return differing
