"""GenEval's rules (detection selection, position, colour and count clauses) on hand-made
detections, with the numbers worked out by hand from the reference definitions."""

from __future__ import annotations

import pytest
import torch

from genalign.rewards.geneval import (
    Detection,
    GenEvalOptions,
    box_iou,
    check_metadata,
    detector_input_size,
    flow_grpo_reward,
    geneval_correct,
    mask2former_instances,
    mask_boxes,
    relative_position,
    select_detections,
)

MASK = torch.zeros(4, 4, dtype=torch.bool)


def det(box, score=0.9):
    return Detection(tuple(float(v) for v in box), score, MASK)


def colors(table):
    """A colour function that names objects by their box's x0 (a fake CLIP)."""
    return lambda name, dets: [table[d.box[0]] for d in dets]


def test_relative_position_shrinks_the_offset_by_the_box_sizes():
    a, b = (0, 0, 10, 10), (100, 0, 110, 10)  # centres 5 and 105: offset (-100, 0), sizes 20 -> shrink 2
    assert relative_position(a, b, 0.1) == {"left of"}
    assert relative_position(b, a, 0.1) == {"right of"}
    assert relative_position((0, 0, 10, 10), (0, 50, 10, 60), 0.1) == {"above"}
    # a diagonal: offset (-40, -40) -> revised (-38, -38) / 56.6 = -0.67 on both axes -> both relations
    assert relative_position((0, 0, 10, 10), (40, 40, 50, 50), 0.1) == {"left of", "above"}
    # overlapping boxes: |offset| 4 < 0.1 * 2 * 40 = 8 on x, 0 on y -> no relation at all
    assert relative_position((0, 0, 40, 40), (4, 0, 44, 40), 0.1) == set()
    # mostly horizontal: offset (-30, -10), revised (-28, -8) / 31.6 -> dx -0.89, dy -0.25
    assert relative_position((0, 0, 10, 10), (30, 10, 40, 20), 0.1) == {"left of"}


def test_selection_thresholds_orders_caps_and_optionally_suppresses():
    found = [det((0, 0, 10, 10), 0.5), det((1, 1, 11, 11), 0.95), det((50, 50, 60, 60), 0.2), det((0, 0, 9, 9), 0.8)]
    assert [d.score for d in select_detections(found, 0.3, 16, 1.0)] == [0.95, 0.8, 0.5]
    assert [d.score for d in select_detections(found, 0.9, 16, 1.0)] == [0.95]
    assert [d.score for d in select_detections(found, 0.3, 2, 1.0)] == [0.95, 0.8]
    # IoU of (1,1,11,11) with (0,0,10,10): 100 / (121 + 121 - 100) = 0.704
    assert box_iou((1, 1, 11, 11), (0, 0, 10, 10)) == pytest.approx(100 / 142)
    assert [d.score for d in select_detections(found, 0.3, 16, 0.5)] == [0.95]


def test_flow_grpo_partial_credit_and_strict_correctness():
    counting = {"tag": "counting", "include": [{"class": "cup", "count": 2}], "exclude": [{"class": "cup", "count": 3}]}
    three = {"cup": [det((0, 0, 1, 1)), det((5, 0, 6, 1)), det((9, 0, 10, 1))]}
    assert flow_grpo_reward(three, counting, colors({}), 0.1) == (False, 0.5)  # 1 - |2 - 3| / 2
    assert geneval_correct(three, counting, colors({}), 0.1) is False  # the exclude clause
    two = {"cup": three["cup"][:2]}
    assert flow_grpo_reward(two, counting, colors({}), 0.1) == (True, 1.0)
    assert geneval_correct(two, counting, colors({}), 0.1) is True

    attr = {
        "tag": "color_attr",
        "include": [{"class": "cup", "count": 1, "color": "red"}, {"class": "dog", "count": 1, "color": "blue"}],
    }
    found = {"cup": [det((0, 0, 1, 1))], "dog": [det((5, 0, 6, 1))]}
    assert flow_grpo_reward(found, attr, colors({0: "red", 5: "blue"}), 0.1) == (True, 1.0)
    # dog is green: parts [1, 1, 1, 0] -> 0.75
    assert flow_grpo_reward(found, attr, colors({0: "red", 5: "green"}), 0.1) == (False, 0.75)
    assert geneval_correct(found, attr, colors({0: "red", 5: "green"}), 0.1) is False
    # no dog: cup parts [1, 1], dog parts [0 (count), 0 (colour)] -> 0.5
    assert flow_grpo_reward({"cup": found["cup"]}, attr, colors({0: "red"}), 0.1) == (False, 0.5)


def test_position_clause_including_the_reference_quirk():
    meta = {
        "tag": "position",
        "include": [{"class": "couch", "count": 1}, {"class": "bird", "count": 1, "position": ["left of", 0]}],
    }
    left = {"couch": [det((100, 0, 110, 10))], "bird": [det((0, 0, 10, 10))]}
    right = {"couch": [det((0, 0, 10, 10))], "bird": [det((100, 0, 110, 10))]}
    assert flow_grpo_reward(left, meta, colors({}), 0.1) == (True, 1.0)  # parts [1, 1, 1]
    assert flow_grpo_reward(right, meta, colors({}), 0.1) == (False, 0.75)  # [1, 1, 0, 1] as the reference
    assert geneval_correct(left, meta, colors({}), 0.1) is True
    assert geneval_correct(right, meta, colors({}), 0.1) is False
    no_couch = {"bird": left["bird"]}  # couch parts [0]; bird [1, 0 (no target)] -> 1/3
    assert flow_grpo_reward(no_couch, meta, colors({}), 0.1) == (False, pytest.approx(1 / 3))


def test_accuracy_checks_only_the_most_confident_count_objects():
    meta = {"tag": "colors", "include": [{"class": "cup", "count": 1, "color": "red"}]}
    found = {"cup": [det((0, 0, 1, 1), 0.9), det((5, 0, 6, 1), 0.8)]}  # selection order: most confident first
    assert geneval_correct(found, meta, colors({0: "red", 5: "blue"}), 0.1) is True
    assert geneval_correct(found, meta, colors({0: "blue", 5: "red"}), 0.1) is False
    # the training reward wants exactly one cup: two found -> count part 0, colour part 0 -> not strict
    assert flow_grpo_reward(found, meta, colors({0: "red", 5: "blue"}), 0.1) == (False, 0.0)


def test_mask2former_instance_scores_and_boxes():
    class_logits = torch.tensor([[2.0, 0.0, 1.0], [0.0, 3.0, 0.0]])  # 2 queries, 2 classes + no-object
    mask_logits = torch.full((2, 4, 4), -5.0)
    mask_logits[0, 1:3, 0:2] = 2.0  # query 0: a 2x2 block
    mask_logits[1, 0, 3] = 1.0  # query 1: one pixel
    labels, scores, masks = mask2former_instances(class_logits, mask_logits, max_per_image=2)
    probs = class_logits.softmax(-1)[:, :2]
    order = sorted(range(2), key=lambda i: -[probs[0, 0], probs[1, 1]][i])
    got = dict(zip(labels.tolist(), scores.tolist()))
    assert set(got) == {0, 1} and order == [1, 0]  # the two best (query, class) pairs: q1/class1, q0/class0
    # class prob x the mean sigmoid over the mask's n pixels, whose mean divides by n + 1e-6: a
    # relative 1e-6 / n that the default rel=1e-6 of pytest.approx would leave no room for rounding
    assert got[0] == pytest.approx((probs[0, 0] * torch.sigmoid(torch.tensor(2.0))).item() * 4 / (4 + 1e-6))
    assert got[1] == pytest.approx((probs[1, 1] * torch.sigmoid(torch.tensor(1.0))).item() * 1 / (1 + 1e-6))
    boxes = mask_boxes(masks)
    assert {tuple(b) for b in boxes.tolist()} == {(0.0, 1.0, 2.0, 3.0), (3.0, 0.0, 4.0, 1.0)}


def test_detector_input_size_is_mmcv_keep_ratio_rescale():
    # mmcv rescale_size into (1333, 800): f = min(1333 / long, 800 / short), sides int(x * f + 0.5)
    assert detector_input_size(512, 512) == (800, 800)
    assert detector_input_size(480, 832) == (769, 1333)  # f = 1333 / 832: 480 f = 769.04
    assert detector_input_size(832, 480) == (1333, 769)
    assert detector_input_size(512, 1024) == (667, 1333)  # 512 * 1333 / 1024 = 666.5 -> 667 (half up)
    assert detector_input_size(1000, 1200) == (800, 960)  # near square: the short edge binds (f = 0.8)


def test_metadata_errors_name_the_sample():
    names = {"cup", "dog"}
    check_metadata({"tag": "single_object", "include": [{"class": "cup", "count": 1}]}, 0, "a cup", names)
    with pytest.raises(ValueError, match=r"sample 3 \(prompt 'a cat'\) has no GenEval metadata"):
        check_metadata({}, 3, "a cat", names)
    with pytest.raises(ValueError, match=r"needs one of GenEval's 2 classes"):
        check_metadata({"tag": "single_object", "include": [{"class": "cat", "count": 1}]}, 0, "a cat", names)
    with pytest.raises(ValueError, match=r"colour 'teal'"):
        check_metadata({"tag": "colors", "include": [{"class": "cup", "count": 1, "color": "teal"}]}, 0, "p", names)
    with pytest.raises(ValueError, match="reward.kwargs.geneval.score='best'"):
        GenEvalOptions(score="best")
