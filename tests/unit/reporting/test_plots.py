"""The report's panels laid out so nothing hides anything (reporting/plots.py), checked on the
drawn figure's text and legend boxes: a run of the demo's magnitudes (a KL of 1e-4, ratios
1 ± 1e-5, losses of 1e-6) is where the labels were cut and the scales collided with titles."""

from __future__ import annotations

import matplotlib
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from support import make_demo_like_run

from genalign.reporting import plots
from genalign.reporting.run_data import read_run


@pytest.fixture(scope="module")
def demo_like_run(tmp_path_factory):
    return read_run(make_demo_like_run(tmp_path_factory.mktemp("run")))


def boxes(figure):
    canvas = FigureCanvasAgg(figure)
    canvas.draw()  # places the axis labels beside their tick labels
    renderer = canvas.get_renderer()
    [axes] = figure.axes
    low, high = sorted(axes.get_ylim())
    left, right = sorted(axes.get_xlim())
    title = axes._left_title  # set_title(loc="left") draws this one (matplotlib has no public getter of the artist)
    texts = [
        title,
        axes.yaxis.label,
        axes.xaxis.label,
        axes.yaxis.get_offset_text(),  # ticks in view: drawn
        *(t for t in axes.get_yticklabels() if low <= t.get_position()[1] <= high),
        *(t for t in axes.get_xticklabels() if left <= t.get_position()[0] <= right),
    ]
    visible = [t for t in texts if t.get_visible() and t.get_text()]
    return renderer, axes, title, {t: t.get_window_extent(renderer) for t in visible}


def test_every_panel_keeps_its_text_inside_and_apart_and_its_legend_off_the_curves(demo_like_run):
    drawn = plots.panels(demo_like_run)
    assert {p.key for p in drawn} >= {"kl", "ratio", "loss", "advantages", "time"}
    with matplotlib.rc_context(plots.RC):
        for panel in drawn:
            figure = plots.draw_panel(panel, demo_like_run)
            renderer, axes, title_text, extents = boxes(figure)
            width, height = figure.bbox.width, figure.bbox.height
            for text, box in extents.items():  # nothing cut at the figure's edges (the KL label was)
                assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= width and box.y1 <= height, (
                    panel.key,
                    text.get_text(),
                    box,
                )
            title = extents[title_text]
            others = [box for text, box in extents.items() if text is not title_text]
            assert not any(title.overlaps(box) for box in others), panel.key  # the ratio's "1e-5+1" was on it
            legend = axes.get_legend().get_window_extent(renderer)
            assert not legend.overlaps(axes.bbox), panel.key  # below the axes: it covers no curve
            assert 0 <= legend.y0 and legend.x1 <= width, panel.key


def test_a_scale_is_written_into_the_y_label(demo_like_run):
    labels = {}
    with matplotlib.rc_context(plots.RC):
        for panel in plots.panels(demo_like_run):
            axes = plots.draw_panel(panel, demo_like_run).axes[0]
            labels[panel.key] = axes.get_ylabel()
            assert not axes.yaxis.get_offset_text().get_visible()
    assert labels["ratio"] == "ratio (× 1e-5 + 1)" and labels["kl"] == "nats (× 1e-4)"
    assert labels["loss"] == "loss (× 1e-6)" and labels["train_reward"] == "reward"
