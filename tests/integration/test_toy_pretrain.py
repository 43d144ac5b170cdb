"""`genalign pretrain-demo` pieces: deterministic under a seed, loadable output, colour metric."""

import torch

from genalign.models.toy.network import save_toy_model
from genalign.models.toy.policy import ToyPolicy
from genalign.models.toy.pretrain import color_accuracy, lr_factor, main, pretrain_model
from genalign.rewards.toy_classifier import JUDGE_SPEC, load_classifier, train_classifier


def test_model_pretraining_is_deterministic_under_the_seed(tmp_path):
    first, encoder, record = pretrain_model(seed=3, steps=3, log_every=0)
    second, _, _ = pretrain_model(seed=3, steps=3, log_every=0)
    other, _, _ = pretrain_model(seed=4, steps=3, log_every=0)
    a, b, c = first.state_dict(), second.state_dict(), other.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)
    assert record["steps"] == 3
    save_toy_model(tmp_path / "m", first, encoder, record)
    loaded = ToyPolicy.from_pretrained(tmp_path / "m")
    assert sum(p.numel() for p in loaded.transformer.parameters()) == sum(p.numel() for p in first.parameters())


def test_classifier_training_is_deterministic_and_judge_has_a_none_class():
    first, record = train_classifier(JUDGE_SPEC, steps=3, log_every=0)
    second, _ = train_classifier(JUDGE_SPEC, steps=3, log_every=0)
    assert first.num_classes == 5 and record["steps"] == 3
    assert all(torch.equal(x, y) for x, y in zip(first.state_dict().values(), second.state_dict().values()))


def test_classifiers_command_writes_loadable_files(tmp_path):
    assert main(["--what", "classifiers", "--out", str(tmp_path), "--classifier-steps", "2"]) == 0
    assert load_classifier(tmp_path, "toy_shape").num_classes == 5  # both have the "none" class
    assert load_classifier(tmp_path, "toy_shape_judge").num_classes == 5


def test_lr_schedule_warms_up_then_decays_to_a_tenth():
    assert lr_factor(0, 1000) == 0.01 and lr_factor(99, 1000) == 1.0
    assert lr_factor(1000, 1000) == 0.1 and 0.1 < lr_factor(500, 1000) < 1.0


def test_color_accuracy_uses_non_background_pixels():
    images = torch.full((3, 3, 4, 4), 128, dtype=torch.uint8)
    images[0, :, :2] = torch.tensor([220, 40, 40], dtype=torch.uint8)[:, None, None]  # red on grey
    images[1, :, :2] = torch.tensor([40, 80, 225], dtype=torch.uint8)[:, None, None]  # blue, prompted red
    assert color_accuracy(images, torch.tensor([0, 0, 0])).tolist() == [1.0, 0.0, 0.0]  # blank counts as wrong
