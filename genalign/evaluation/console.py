"""The evaluation's console line: the headline figures in under `MAX_CHARS` characters.

Where it fits: the trainer logs `eval_line(step, metrics)` after each evaluation; the full row
(every component, gold reward and quality measure with its std, min and max) is
`eval_metrics.csv`'s, so the line only has to say where the run stands.
"""

from __future__ import annotations

import math
import re

MAX_CHARS = 160
"""Longest eval line (its timestamp and logger name come on top)."""
COMPONENT = re.compile(r"eval_reward_(.+)_mean")


def _number(metrics: dict[str, float], key: str) -> float | None:
    value = metrics.get(key)
    return None if value is None or math.isnan(float(value)) else float(value)


def eval_line(step: int, metrics: dict[str, float]) -> str:
    """e.g. "eval step 20: reward 0.6710 ± 0.0120, gold 0.6820 (all figures: eval_metrics.csv)";
    with several reward components their means follow in brackets while the line stays under
    MAX_CHARS, and a gold reward that diverges from the reward says so."""
    parts = []
    reward, error = _number(metrics, "eval_reward_mean"), _number(metrics, "eval_reward_se")
    if reward is not None:
        parts.append(f"reward {reward:.4f}" + (f" ± {error:.4f}" if error is not None else ""))
    gold = _number(metrics, "gold_mean")
    if gold is not None:
        parts.append(f"gold {gold:.4f}")
    if metrics.get("gold_divergence"):
        parts.append("reward and gold diverge")
    head = f"eval step {step}: " + ", ".join(parts)
    tail = " (all figures: eval_metrics.csv)"
    components = [
        f"{match[1]} {metrics[key]:.4f}" for key in metrics if (match := COMPONENT.fullmatch(key)) and match[1] != "se"
    ]
    if len(components) > 1:
        shown: list[str] = []
        for component in components:
            if len(head) + len(" [" + ", ".join([*shown, component, "..."]) + "]") + len(tail) > MAX_CHARS:
                shown.append("...")
                break
            shown.append(component)
        head += " [" + ", ".join(shown) + "]"
    return head + tail
