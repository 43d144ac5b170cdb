"""The rollout sample table: which samples, their images and rewards, and how trackers get it."""

import numpy
import torch

from genalign.tracking.samples import rollout_samples, spread_over_groups
from genalign.tracking.sinks import CSVSink, MultiSink, NullSink, PrefixedSink, Sample
from genalign.tracking.trackers import samples_markdown


def test_one_sample_per_group_before_a_second_from_any():
    groups = [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert spread_over_groups(groups, 3) == [0, 3, 6]
    assert spread_over_groups(groups, 5) == [0, 1, 3, 4, 6]
    assert spread_over_groups(groups, 100) == list(range(9))


def test_rows_hold_the_image_prompt_and_each_reward():
    images = torch.arange(4 * 3 * 2 * 2, dtype=torch.uint8).reshape(4, 3, 2, 2)  # [B, 3, H, W]
    components = {"ocr": torch.tensor([0.1, 0.2, 0.3, 0.4, 9.0]), "jpeg": torch.tensor([1.0, 2.0, 3.0, 4.0, 9.0])}
    total = 0.5 * components["ocr"] + components["jpeg"]  # [>= B]: rank 0's samples come first
    rows = rollout_samples(images, ["a", "a", "b", "b"], [0, 0, 1, 1], components, total, count=2)
    assert [row.prompt for row in rows] == ["a", "b"]
    assert rows[1].rewards == {"ocr": components["ocr"][2].item(), "jpeg": 3.0, "total": total[2].item()}
    pixels = torch.from_numpy(numpy.array(rows[1].image)).permute(2, 0, 1)  # [3, H, W]
    assert torch.equal(pixels, images[2])


def test_a_video_sample_shows_its_first_frame():
    videos = torch.randint(0, 255, (2, 5, 3, 4, 4), dtype=torch.uint8)  # [B, F, 3, H, W]
    rows = rollout_samples(videos, ["v", "w"], [0, 1], {"r": torch.zeros(2)}, torch.zeros(2), count=1)
    pixels = torch.from_numpy(numpy.array(rows[0].image)).permute(2, 0, 1)
    assert torch.equal(pixels, videos[0, 0])


def test_sinks_forward_tables_to_trackers_under_their_prefix_and_the_csv_ignores_them(tmp_path):
    received = []

    class Recorder(NullSink):
        def log_samples(self, step, name, samples):
            received.append((step, name, samples))

    samples = [Sample(None, "p", {"r": 1.0, "total": 1.0})]
    sink = MultiSink([CSVSink(tmp_path / "metrics.csv"), PrefixedSink(Recorder(), "train")])
    sink.log_samples(5, "rollout_samples", samples)
    assert received == [(5, "train/rollout_samples", samples)]
    assert not (tmp_path / "metrics.csv").exists()


def test_markdown_table_escapes_pipes():
    text = samples_markdown([Sample(None, "a | b\nc", {"ocr": 0.25, "total": 0.5})])
    assert text.splitlines() == [
        "| # | prompt | ocr | total |",
        "|---|---|---|---|",
        "| 0 | a \\| b c | 0.2500 | 0.5000 |",
    ]
