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
import math
import re
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
        lines += [
            Line(column, f"{label} {column[len(prefix) + 1 : -len('_mean')]}".strip(), source, dashed)
            for column in components
        ]
    return lines


def reward_panels(run: RunData) -> list[Panel]:
    """Training reward (total and per component) and eval reward beside the gold reward."""
    train = reward_lines(run.train, "reward", "", "train")
    evaluation = reward_lines(run.eval, "eval_reward", "eval", "eval") + reward_lines(
        run.eval, "gold", "gold", "eval", dashed=True
    )
    return [
        Panel("train_reward", "Training reward (mean over the step's samples)", "reward", tuple(train)),
        Panel("eval_reward", "Eval reward and gold reward (fixed prompts, ODE)", "reward", tuple(evaluation)),
    ]


STANDARD_PANELS = (
    Panel(
        "kl",
        "KL to the reference / approx. KL old→new",
        "nats",
        (Line("kl", "KL to reference"), Line("approx_kl", "approx KL old→new")),
    ),
    Panel(
        "clip",
        "Clip fraction",
        "fraction of ratios clipped",
        (Line("clip_frac", "total"), Line("clip_frac_low", "below 1-ε"), Line("clip_frac_high", "above 1+ε")),
    ),
    Panel(
        "advantages",
        "Advantages",
        "advantage",
        (
            Line("adv_mean", "mean"),
            Line("adv_std", "std"),
            Line("adv_abs_mean", "mean |A|"),
            Line("adv_min", "min", dashed=True),
            Line("adv_max", "max", dashed=True),
            Line("zero_std_ratio", "zero-std groups (fraction)"),
        ),
    ),
    Panel("loss", "Loss", "loss", (Line("loss", "loss"), Line("policy_loss", "policy loss"))),
    Panel(
        "ratio",
        "Importance ratio",
        "ratio",
        (Line("ratio", "mean"), Line("ratio_min", "min", dashed=True), Line("ratio_max", "max", dashed=True)),
    ),
    Panel(
        "grad_norm",
        "Gradient norm (before clipping)",
        "norm",
        (Line("grad_norm", "mean"), Line("grad_norm_max", "max", dashed=True)),
    ),
    Panel(
        "time",
        "Seconds per phase",
        "seconds",
        (
            Line("time_rollout_s", "rollout"),
            Line("time_reward_s", "reward"),
            Line("time_train_s", "train"),
            Line("time_eval_s", "eval"),
        ),
    ),
    Panel(
        "throughput",
        "Throughput",
        "images / s",
        (Line("images_per_s", "rollout images/s"), Line("step_images_per_s", "step images/s (rollout+reward+train)")),
    ),
    Panel(
        "gpu_memory",
        "Peak GPU memory per step (torch.cuda.max_memory_allocated)",
        "GiB",
        (Line("gpu_peak_allocated_gib", "peak allocated"),),
    ),
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


WIDTH_IN = 4.8
"""Panel width (inches at 100 dpi): about the size the report shows it at, so text stays legible."""
AXES_HEIGHT_IN = 2.2
TITLE_IN = 0.35
"""Above the axes: the title."""
XAXIS_IN = 0.5
"""Below the axes: the step ticks and the x label."""
LEGEND_ROW_IN = 0.19
"""One row of the legend, which sits below the x label, where it can cover no curve."""
CHAR_IN = 0.065
"""Width of one character of the 8 pt legend text, roughly (DejaVu Sans)."""
TICK_CHAR_IN = 0.08
"""Width of one character of a 9 pt tick label (DejaVu Sans digits: 0.64 em)."""
YLABEL_IN = 0.45
"""Left of the tick labels: the rotated y label, its pad and the ticks."""


def legend_columns(labels: list[str]) -> int:
    """Columns of the legend below the axes: as many as fit the panel's width (at most 3)."""
    longest = max(len(label) for label in labels)
    return max(1, min(3, len(labels), int((WIDTH_IN - 0.3) / ((longest + 5) * CHAR_IN))))


SCALE = re.compile(r"(1e-?\d+)?([+-].+)?")
"""matplotlib's offset text ("1e-5+1": ticks × 1e-5, plus 1), read apart."""


def y_scale_in_label(axes, ylabel: str) -> str:
    """`ylabel` with the y axis's power of ten and offset written into it, e.g. "ratio (× 1e-5
    + 1)", and matplotlib's own offset text (drawn above the axes, over a left-aligned title)
    hidden. Reads the formatter after locating the ticks: no draw needed."""
    formatter = axes.yaxis.get_major_formatter()
    formatter.set_locs(axes.get_yticks())
    text = formatter.get_offset().replace("\u2212", "-")  # matplotlib writes a Unicode minus
    axes.yaxis.get_offset_text().set_visible(False)
    if not text:
        return ylabel
    match = SCALE.fullmatch(text)
    if match is None:  # a form this does not know: shown as matplotlib writes it
        return f"{ylabel} ({text})"
    power, offset = match.groups()
    parts = ([f"× {power}"] if power else []) + ([f"{offset[0]} {offset[1:]}"] if offset else [])
    return f"{ylabel} ({' '.join(parts)})"


RC = {
    "svg.hashsalt": "genalign",
    "font.size": 9,
    "axes.titlesize": 10,
    "legend.fontsize": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    # powers of ten from 1e-3 and 1e4 on (a KL of 1e-4: ticks 0-1.4 "× 1e-4", not 0.00014)
    "axes.formatter.limits": (-3, 4),
}


def render_panel(panel: Panel, run: RunData) -> str:
    """The panel as SVG text (deterministic: no date, fixed id salt)."""
    import matplotlib

    with matplotlib.rc_context(RC):
        figure = draw_panel(panel, run)
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


def draw_panel(panel: Panel, run: RunData):
    """The panel's matplotlib `Figure` (call inside `matplotlib.rc_context(RC)`).

    Layout by hand (constrained layout would double the time per panel): the title above the
    axes; the left margin sized to the longest tick label; a scale the ticks need (1e-5, + 1)
    in the y label, not above the axes where the title is; the legend below the x axis, so it
    never covers a curve, in as many rows as its entries need."""
    from matplotlib.figure import Figure

    drawn = panel.drawn_lines(run)
    rows = math.ceil(len(drawn) / legend_columns([line.label for line in drawn]))
    legend_in = rows * LEGEND_ROW_IN + 0.1
    height_in = TITLE_IN + AXES_HEIGHT_IN + XAXIS_IN + legend_in
    figure = Figure(figsize=(WIDTH_IN, height_in), dpi=100)
    # the axes' height first: the y ticks (and so the scale and the label widths) depend on it
    figure.subplots_adjust(top=1 - TITLE_IN / height_in, bottom=(XAXIS_IN + legend_in) / height_in)
    axes = figure.subplots()
    for index, line in enumerate(drawn):
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
        axes.plot(steps, values, style, color=color, marker=marker, markersize=3.5, linewidth=1.5, label=line.label)
    if panel.key == "eval_reward":
        for step in run.diverged_steps:
            axes.axvline(step, color="crimson", alpha=0.4, linewidth=3)
    axes.set_title(panel.title, loc="left")
    axes.set_xlabel("step")
    axes.set_ylabel(y_scale_in_label(axes, panel.ylabel))
    axes.grid(alpha=0.3)
    labels = axes.yaxis.get_major_formatter().format_ticks(axes.get_yticks())
    left_in = YLABEL_IN + TICK_CHAR_IN * max(map(len, labels), default=4)  # the y label + the widest tick
    right_in = 0.15
    figure.subplots_adjust(left=left_in / WIDTH_IN, right=1 - right_in / WIDTH_IN)
    axes_width_in = WIDTH_IN - left_in - right_in
    # in axes coordinates: from the figure's left edge, just below the x label
    axes.legend(
        frameon=False,
        loc="upper left",
        bbox_to_anchor=(0.1 / axes_width_in - left_in / axes_width_in, -XAXIS_IN / AXES_HEIGHT_IN),
        ncol=legend_columns([line.label for line in drawn]),
        borderaxespad=0,
        handlelength=1.8,
        columnspacing=1.2,
    )
    return figure


def svg_data_uri(svg: str) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")
