"""The benchmarks' tables, worked out by hand: GenEval's per-tag accuracy and overall (the mean of
the tag accuracies, not of the images), OCR accuracy and edit distance, and standard errors
over prompts."""

from __future__ import annotations

import math

import pytest

from genalign.evaluation.summaries import SampleRecord, geneval_summary, markdown_table, mean_se, ocr_summary, summarise


def record(index, prompt_index, score, tag=None, group="g", image_index=0):
    metadata = {"tag": tag} if tag else {}
    return SampleRecord(index, prompt_index, image_index, f"p{prompt_index}", 0, metadata, {group: score})


def test_geneval_overall_is_the_mean_of_tag_accuracies_as_summary_scores_py():
    # counting: prompt 0 has 2 images (1 correct), prompt 1 has 1 (wrong) -> 1/3; colors: 1 image, correct -> 1
    records = [
        record(0, 0, 1.0, "counting"),
        record(1, 0, 0.0, "counting", image_index=1),
        record(2, 1, 0.0, "counting"),
        record(3, 2, 1.0, "colors"),
    ]
    table = geneval_summary(records, "g")
    assert list(table["tags"]) == ["counting", "colors"]  # first appearance, as groupby(sort=False)
    assert table["tags"]["counting"] == {"accuracy": pytest.approx(1 / 3), "correct": 1, "images": 3}
    assert table["overall"] == pytest.approx((1 / 3 + 1) / 2)  # not the image mean 2/4
    assert table["correct_images"] == 0.5
    assert table["correct_prompts"] == pytest.approx(2 / 3)  # prompts 0 and 2 have a correct image


def test_ocr_accuracy_edit_distance_and_exact_match():
    records = [record(0, 0, 1.0), record(1, 1, 0.5), record(2, 2, 0.0)]
    table = ocr_summary(records, "g")
    assert table["accuracy"] == pytest.approx(0.5)
    assert table["normalised_edit_distance"] == pytest.approx(0.5)
    assert table["exact_match"] == pytest.approx(1 / 3)
    # per-prompt means 1, 0.5, 0: sd 0.5, se 0.5 / sqrt(3)
    assert table["accuracy_se"] == pytest.approx(0.5 / math.sqrt(3))


def test_standard_error_is_over_prompts_not_images():
    # two prompts, each with two identical images: 2 clusters with means 0 and 1 -> sd 0.7071, se 0.5
    mean, se = mean_se([0.0, 0.0, 1.0, 1.0], [0, 0, 1, 1])
    assert mean == 0.5 and se == pytest.approx(0.5)
    assert mean_se([3.0], [0]) == (3.0, 0.0)


def test_mean_summary_breaks_down_by_category_and_renders():
    records = [
        SampleRecord(0, 0, 0, "a", 0, {"category": "Colors"}, {"pickscore": 0.2}),
        SampleRecord(1, 1, 0, "b", 0, {"category": "Text"}, {"pickscore": 0.6}),
    ]
    table = summarise(records, "mean", ["pickscore"])
    assert table["scorers"]["pickscore"]["mean"] == pytest.approx(0.4)
    assert table["scorers"]["pickscore"]["categories"] == {"Colors": 0.2, "Text": 0.6}
    text = markdown_table(table)
    assert "| pickscore | 0.4000 |" in text and "| Colors | 0.2000 |" in text
    with pytest.raises(ValueError, match="no evaluated samples"):
        summarise([], "mean", ["pickscore"])
