from genalign.evaluation.evaluator import gold_divergence


def test_reward_up_gold_flat_is_flagged():
    assert gold_divergence([0.2, 0.5, 0.9], [0.6, 0.6, 0.55], window=3)


def test_reward_and_gold_up_is_not_flagged():
    assert not gold_divergence([0.2, 0.5, 0.9], [0.3, 0.4, 0.5], window=3)


def test_reward_flat_is_not_flagged_even_if_gold_falls():
    assert not gold_divergence([0.5, 0.5, 0.505], [0.6, 0.5, 0.4], window=3)


def test_too_few_evaluations_is_not_flagged():
    assert not gold_divergence([0.1, 0.9], [0.5, 0.5], window=3)


def test_only_the_last_window_counts():
    # early gold rise does not hide a later divergence
    assert gold_divergence([0.1, 0.2, 0.4, 0.8], [0.1, 0.5, 0.5, 0.5], window=3)
