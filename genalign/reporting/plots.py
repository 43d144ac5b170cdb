"""The report's curves: one small SVG per panel, drawn with matplotlib's object API.

Where it fits: `report.py` asks `panels(run)` which panels this run has data for and embeds
`render_panel(...)`'s SVG as a data URI (an <img> per panel, so the SVGs' internal ids
never clash). `matplotlib.figure.Figure` is used without pyplot: no global figure state, no
GUI backend, safe inside a training process.

A panel is declarative: a title, a y label and the columns it draws; a column the run did
not log is left out, and a panel with none is not drawn, so new metrics (or a run without
KL, gold rewards, ...) need no branch here. Reward components are discovered from the CSV
columns (`reward_<name>_mean`, `eval_reward_<name>_mean`, `gold_<name>_mean`).
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass

from genalign.reporting.run_data import MetricTable, RunData

SMOOTH_ABOVE = 30
"""Training series with more points than this are drawn faint, under a moving average."""
MAX_POINTS = 1000
"""The faint raw line of a long series keeps every k-th point, at most this many."""
MARKERS_UP_TO = 40
"""Series with at most this many points get a marker on each (evaluations, eval times)."""


@dataclass(frozen=True)
class Line:
    column: str
    label: str
    source: str = "train"
    """Which table: "train" (metrics.csv) or "eval" (eval_metrics.csv)."""
    dashed: bool = False


@dataclass(frozen=True)
class Panel:
    key: str
    """Stable name (used as the element id in the page)."""
    title: str
    ylabel: str
    lines: tuple[Line, ...]

    def drawn_lines(self, run: RunData) -> list[Line]:
        return [line for line in self.lines if table(run, line.source).has(line.column)]


def table(run: RunData, source: str) -> MetricTable:
    return run.eval if source == "eval" else run.train


def reward_lines(metrics: MetricTable, prefix: str, label: str, source: str, dashed: bool = False) -> list[Line]:
    """The total `<prefix>_mean`, then one line per component `<prefix>_<name>_mean` unless
    the only component equals the total (weight 1), which would just repeat its line."""
    total = f"{prefix}_mean"
    components = [f"{prefix}_{name}_mean" for name in metrics.components(prefix)]
    lines = [Line(total, f"{label} total".strip(), source, dashed)]
    if len(components) > 1 or any(metrics.values(column) != metrics.values(total) for column in components):
        lines += [Line(column, f"{label} {column[len(prefix) + 1:-len('_mean')]}".strip(), source, dashed)
                  for column in components]
    return lines


def reward_panels(run: RunData) -> list[Panel]:
    """Training reward (total and per component) and eval reward beside the gold reward."""
    train = reward_lines(run.train, "reward", "", "train")
    evaluation = (reward_lines(run.eval, "eval_reward", "eval", "eval")
                  + reward_lines(run.eval, "gold", "gold", "eval", dashed=True))
    return [Panel("train_reward", "Training reward (mean over the step's samples)", "reward", tuple(train)),
            Panel("eval_reward", "Eval reward and gold reward (fixed prompts, ODE)", "reward", tuple(evaluation))]


STANDARD_PANELS = (
    Panel("kl", "KL to the reference / approx. KL old→new", "nats", (
        Line("kl", "KL to reference"), Line("approx_kl", "approx KL old→new"))),
    Panel("clip", "Clip fraction", "fraction of ratios clipped", (
        Line("clip_frac", "total"), Line("clip_frac_low", "below 1-ε"), Line("clip_frac_high", "above 1+ε"))),
    Panel("advantages", "Advantages", "advantage", (
        Line("adv_mean", "mean"), Line("adv_std", "std"), Line("adv_abs_mean", "mean |A|"),
        Line("adv_min", "min", dashed=True), Line("adv_max", "max", dashed=True),
        Line("zero_std_ratio", "zero-std groups (fraction)"))),
    Panel("loss", "Loss", "loss", (Line("loss", "loss"), Line("policy_loss", "policy loss"))),
    Panel("ratio", "Importance ratio", "ratio", (
        Line("ratio", "mean"), Line("ratio_min", "min", dashed=True), Line("ratio_max", "max", dashed=True))),
    Panel("grad_norm", "Gradient norm (before clipping)", "norm", (
        Line("grad_norm", "mean"), Line("grad_norm_max", "max", dashed=True))),
    Panel("time", "Seconds per phase", "seconds", (
        Line("time_rollout_s", "rollout"), Line("time_reward_s", "reward"), Line("time_train_s", "train"),
        Line("time_eval_s", "eval"))),
    Panel("throughput", "Throughput", "images / s", (
        Line("images_per_s", "rollout images/s"), Line("step_images_per_s", "step images/s (rollout+reward+train)"))),
    Panel("gpu_memory", "Peak GPU memory per step (torch.cuda.max_memory_allocated)", "GiB", (
        Line("gpu_peak_allocated_gib", "peak allocated"),)),
)


def panels(run: RunData) -> list[Panel]:
    """The panels this run has at least one column for, rewards first."""
    return [panel for panel in (*reward_panels(run), *STANDARD_PANELS) if panel.drawn_lines(run)]


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing mean over up to `window` points (the first points average what exists)."""
    out, total = [], 0.0
    for index, value in enumerate(values):
        total += value
        if index >= window:
            total -= values[index - window]
        out.append(total / min(index + 1, window))
    return out


def render_panel(panel: Panel, run: RunData) -> str:
    """The panel as SVG text (deterministic: no date, fixed id salt)."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context({"svg.hashsalt": "genalign", "font.size": 9, "axes.titlesize": 10,
                                "legend.fontsize": 8, "axes.spines.top": False, "axes.spines.right": False}):
        figure = Figure(figsize=(4.8, 3.0), dpi=100)  # about the size it is shown at: text stays legible
        # fixed margins: constrained layout would double the time per panel
        figure.subplots_adjust(left=0.15, right=0.98, top=0.9, bottom=0.15)
        axes = figure.subplots()
        for index, line in enumerate(panel.drawn_lines(run)):
            steps, values = table(run, line.source).values(line.column)
            color = f"C{index % 10}"
            style = "--" if line.dashed else "-"
            # evaluations and sparse columns (time_eval_s) are a few points: mark each one
            sparse = line.source == "eval" or len(steps) < len(table(run, line.source).steps)
            marker = "o" if sparse and len(steps) <= MARKERS_UP_TO or len(steps) == 1 else None
            if line.source == "train" and len(steps) > SMOOTH_ABOVE:
                stride = max(1, len(steps) // MAX_POINTS)  # a long run's raw line, thinned
                axes.plot(steps[::stride], values[::stride], style, color=color, alpha=0.25, linewidth=0.8)
                values = moving_average(values, max(2, len(steps) // 20))
            axes.plot(steps, values, style, color=color, marker=marker, markersize=3.5, linewidth=1.5,
                      label=line.label)
        if panel.key == "eval_reward":
            for step in run.diverged_steps:
                axes.axvline(step, color="crimson", alpha=0.4, linewidth=3)
        axes.set_title(panel.title, loc="left")
        axes.set_xlabel("step")
        axes.set_ylabel(panel.ylabel)
        axes.grid(alpha=0.3)
        axes.legend(frameon=False, loc="best")
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


def svg_data_uri(svg: str) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")
