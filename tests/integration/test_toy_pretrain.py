"""`genalign pretrain-demo` pieces: deterministic under a seed, loadable output, colour metric."""

from dataclasses import asdict, replace

import numpy as np
import pytest
import torch

from genalign.demo.pretrain import color_accuracy, main
from genalign.models.toy.network import save_toy_model
from genalign.models.toy.policy import ToyPolicy, builtin_dir
from genalign.models.toy.pretrain import PretrainOptions, caption_shapes, draw_sigmas, lr_factor, pretrain_model
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


def test_classifiers_command_writes_loadable_files_under_the_working_directory(tmp_path, monkeypatch, caplog):
    """No --out: ./toy_demo, never the installed package's assets (that takes --out builtin)."""
    shipped = {path.name: path.stat().st_mtime_ns for path in builtin_dir().iterdir()}
    monkeypatch.chdir(tmp_path)
    with caplog.at_level("INFO", logger="genalign"):
        assert main(["--what", "classifiers", "--classifier-steps", "2"]) == 0
    out = tmp_path / "toy_demo"
    assert load_classifier(out, "toy_shape").num_classes == 5  # both have the "none" class
    assert load_classifier(out, "toy_shape_judge").num_classes == 5
    assert {path.name: path.stat().st_mtime_ns for path in builtin_dir().iterdir()} == shipped
    assert "genalign train model.path=toy_demo reward.kwargs.toy_shape.path=toy_demo" in caplog.text


def test_lr_schedule_warms_up_then_decays_to_a_tenth():
    assert lr_factor(0, 1000) == 0.01 and lr_factor(99, 1000) == 1.0
    assert lr_factor(1000, 1000) == 0.1 and 0.1 < lr_factor(500, 1000) < 1.0


def test_color_accuracy_uses_non_background_pixels():
    images = torch.full((3, 3, 4, 4), 128, dtype=torch.uint8)
    images[0, :, :2] = torch.tensor([220, 40, 40], dtype=torch.uint8)[:, None, None]  # red on grey
    images[1, :, :2] = torch.tensor([40, 80, 225], dtype=torch.uint8)[:, None, None]  # blue, prompted red
    assert color_accuracy(images, torch.tensor([0, 0, 0])).tolist() == [1.0, 0.0, 0.0]  # blank counts as wrong


def test_logit_normal_sigmas_centre_on_sigmoid_of_the_mean():
    generator = torch.Generator().manual_seed(0)
    uniform = draw_sigmas(20000, PretrainOptions(sigma_sampling="uniform"), generator)
    logit = draw_sigmas(20000, PretrainOptions(sigma_sampling="logit_normal"), generator)
    assert abs(uniform.mean().item() - 0.5) < 0.01 and abs(uniform.median().item() - 0.5) < 0.01
    # the median of sigmoid(m + s·n) is sigmoid(m); the logit's std is s
    assert logit.median().item() == pytest.approx(torch.sigmoid(torch.tensor(0.8)).item(), abs=0.01)
    assert torch.logit(logit).std().item() == pytest.approx(0.8, abs=0.02)
    assert 0 < logit.min() and logit.max() < 1


def test_caption_noise_keeps_a_caption_right_with_probability_one_minus_three_quarters_of_it():
    rng = np.random.default_rng(0)
    shapes = torch.from_numpy(rng.integers(0, 4, 40000)).long()
    assert caption_shapes(shapes, 0.0, rng) is shapes
    state = rng.bit_generator.state
    captioned = caption_shapes(shapes, 0.6, rng)
    assert (captioned == shapes).float().mean().item() == pytest.approx(1 - 0.6 * 3 / 4, abs=0.01)
    assert rng.bit_generator.state != state  # noisy captions draw from the data stream


def test_default_options_are_the_recipe_of_the_shipped_weights():
    """`genalign pretrain-demo` with no options regenerates what ships: the recorded options and
    step count of genalign/assets/toy are the defaults."""
    import json

    from genalign.models.toy.network import MODEL_RECORD
    from genalign.models.toy.pretrain import DEFAULT_STEPS

    shipped = json.loads((builtin_dir() / MODEL_RECORD).read_text())
    defaults = PretrainOptions()
    assert shipped["options"] == defaults.record() == {**asdict(defaults), "extent": list(defaults.extent)}
    assert shipped["steps"] == shipped["requested_steps"] == DEFAULT_STEPS


def test_every_option_changes_what_is_trained():
    first, _, record = pretrain_model(seed=3, steps=2, log_every=0)
    assert record["options"]["sigma_sampling"] == "logit_normal" and record["options"]["caption_noise"] == 0.6
    for change in (
        {"sigma_sampling": "uniform"},
        {"centre_jitter": None},
        {"extent": (0.45, 0.85)},
        {"caption_noise": 0.0},
    ):
        other, _, other_record = pretrain_model(
            seed=3, steps=2, log_every=0, options=replace(PretrainOptions(), **change)
        )
        a, b = first.state_dict(), other.state_dict()
        assert not all(torch.equal(a[k], b[k]) for k in a), change
        assert other_record["options"][next(iter(change))] == (
            list(change["extent"]) if "extent" in change else next(iter(change.values()))
        )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--caption-noise", "1.5"], "caption_noise 1.5"),
        (["--extent", "0.8", "0.6"], "extent (0.8, 0.6)"),
        (["--centre-jitter", "-0.1"], "centre_jitter -0.1"),
        (["--centre-jitter", "near"], "invalid _centre_jitter value"),
        (["--sigma-sampling", "cosine"], "invalid choice"),
    ],
)
def test_bad_pretraining_options_are_refused_before_training(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as exited:
        main(["--what", "model", "--out", str(tmp_path), *argv])
    assert exited.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "transformer").exists()


def test_the_command_line_can_ask_for_the_previous_recipe(monkeypatch, tmp_path):
    """`--sigma-sampling uniform --extent 0.45 0.85 --centre-jitter none --caption-noise 0` is the
    first shipped model's recipe; the flags reach pretrain_model as options."""
    seen = {}
    monkeypatch.setattr(
        "genalign.demo.pretrain.run_model", lambda out, seed, steps, minutes, options: seen.update(options=options)
    )
    assert (
        main(
            [
                "--what",
                "model",
                "--out",
                str(tmp_path),
                "--sigma-sampling",
                "uniform",
                "--extent",
                "0.45",
                "0.85",
                "--centre-jitter",
                "none",
                "--caption-noise",
                "0",
            ]
        )
        == 0
    )
    assert seen["options"] == PretrainOptions("uniform", extent=(0.45, 0.85), centre_jitter=None, caption_noise=0.0)
