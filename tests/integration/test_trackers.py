"""Trackers, train.log and exports on the tiny SD3 pipeline: TensorBoard, W&B (offline) and
MLflow (a local file store) get the rows and the contact sheet, metrics.csv stays
byte-identical to a csv-only run's (and on a resume after a crash), train.log holds the
story, exports carry a model card."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import yaml
from safetensors.torch import load_file
from support import SD3_RECIPE as RECIPE
from support import TIMING_COLUMNS, read_rows, tiny_overrides

from genalign.preflight.load import load_config
from genalign.training.trainer import Trainer

TRACKERS = "trainer.loggers=[csv,tensorboard,wandb,mlflow]"


def exact(rows):
    return [{k: v for k, v in row.items() if k not in TIMING_COLUMNS} for row in rows]


@pytest.fixture(scope="module")
def runs(tiny_sd3_dir, tmp_path_factory):
    """A csv-only run, the same run with every tracker, and that run crashed after checkpoint-1
    (later checkpoints deleted, metrics/events past step 1 left behind) then resumed with auto."""
    root = tmp_path_factory.mktemp("trackers")
    with pytest.MonkeyPatch.context() as env:  # W&B: offline, nothing outside the test's folders
        env.setenv("WANDB_MODE", "offline")
        env.setenv("WANDB_SILENT", "true")
        for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
            env.setenv(name, str(root / "wandb-home" / name.lower()))
        env.delenv("WANDB_API_KEY", raising=False)
        # a launcher's W&B variables apply where the config names no value (W&B's own precedence)
        env.setenv("WANDB_PROJECT", "envproj")
        env.setenv("WANDB_RUN_GROUP", "seed-sweep")
        env.setenv("WANDB_TAGS", "tiny,sd3")
        # MLflow: a file store per run (MLflow 3 asks for the opt-in); the crashed run's store is
        # the tracked run's, copied with it, so its resume finds its MLflow run there
        env.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        env.setenv("MLFLOW_EXPERIMENT_NAME", "tiny-sd3")
        Trainer(load_config(RECIPE, tiny_overrides(tiny_sd3_dir, root / "plain"))).train()
        env.setenv("MLFLOW_TRACKING_URI", f"file:{root / 'mlruns-tracked'}")
        Trainer(load_config(RECIPE, tiny_overrides(tiny_sd3_dir, root / "tracked", TRACKERS))).train()
        shutil.copytree(root / "tracked", root / "crashed")
        shutil.copytree(root / "mlruns-tracked", root / "mlruns-crashed")
        for name in ("checkpoint-2", "checkpoint-final"):
            shutil.rmtree(root / "crashed" / name)
        env.setenv("MLFLOW_TRACKING_URI", f"file:{root / 'mlruns-crashed'}")
        Trainer(
            load_config(RECIPE, tiny_overrides(tiny_sd3_dir, root / "crashed", TRACKERS, "trainer.resume_from=auto"))
        ).train()
    return root


def test_metrics_csv_is_the_same_with_trackers_and_after_a_resume(runs):
    plain = read_rows(runs / "plain" / "metrics.csv")
    assert [r["step"] for r in plain] == ["1", "2", "3"]
    for name in ("tracked", "crashed"):
        assert exact(read_rows(runs / name / "metrics.csv")) == exact(plain), name
        assert exact(read_rows(runs / name / "eval_metrics.csv")) == exact(
            read_rows(runs / "plain" / "eval_metrics.csv")
        ), name
    for checkpoint in ("checkpoint-final/trainable.safetensors", "checkpoint-final/ema.safetensors"):
        a, b = load_file(str(runs / "plain" / checkpoint)), load_file(str(runs / "crashed" / checkpoint))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), checkpoint
    assert not (runs / "plain" / "tensorboard").exists() and not (runs / "plain" / "wandb").exists()


def test_tensorboard_has_every_step_once_and_the_contact_sheets(runs):
    from tensorboard.backend.event_processing.event_accumulator import IMAGES, SCALARS, EventAccumulator

    plain = read_rows(runs / "plain" / "metrics.csv")
    for name in ("tracked", "crashed"):
        events = EventAccumulator(str(runs / name / "tensorboard"), size_guidance={SCALARS: 0, IMAGES: 0})
        events.Reload()
        rewards = events.Scalars("train/reward_mean")
        # the crashed run's steps 2-3 were written twice; purge_step hides the first writes
        assert [e.step for e in rewards] == [1, 2, 3], name
        assert [e.value for e in rewards] == pytest.approx([float(r["reward_mean"]) for r in plain], rel=1e-6)
        assert "eval/eval_reward_mean" in events.Tags()["scalars"]
        sheets = events.Images("eval/contact_sheet")
        assert sorted({e.step for e in sheets}) == [0, 2, 3], name
        assert sheets[0].width > 0 and sheets[0].encoded_image_string.startswith(b"\x89PNG")
        # the rollout sample table at step 1 (trainer.sample_table.every=10): images and a text table
        samples = events.Images("train/rollout_samples/images")
        assert [e.step for e in samples] == [1], name
        assert "train/rollout_samples/text_summary" in events.Tags()["tensors"], name


def test_wandb_offline_run_has_history_and_images_and_one_id_across_resume(runs):
    tracked = sorted((runs / "tracked" / "wandb").glob("offline-run-*"))
    assert len(tracked) == 1
    run_id = tracked[0].name.rsplit("-", 1)[1]
    history = (tracked[0] / f"run-{run_id}.wandb").read_bytes()
    for key in (b"train/reward_mean", b"train/loss", b"eval/eval_reward_mean"):
        assert key in history, key
    assert list((tracked[0] / "files" / "media" / "images" / "eval").glob("contact_sheet_*.png"))
    tables = list((tracked[0] / "files" / "media" / "table" / "train").glob("rollout_samples_*.table.json"))
    assert len(tables) == 1
    table = json.loads(tables[0].read_text())
    assert table["columns"] == ["image", "prompt", "jpeg_compressibility", "total"]  # ocr has weight 0
    assert len(table["data"]) == 4  # rollout.rollout_batch_size 2 x rollout.n 2, under trainer.sample_table.count 8
    for value in (b"envproj", b"seed-sweep", b"tiny", b"sd3"):  # from WANDB_PROJECT / _RUN_GROUP / _TAGS
        assert value in history, value
    state = yaml.safe_load((runs / "tracked" / "checkpoint-final" / "trainer_state.json").read_text())
    assert state["tracker_run_id"] == run_id
    resumed = sorted((runs / "crashed" / "wandb").glob("offline-run-*"))
    assert len(resumed) == 2 and all(path.name.endswith(run_id) for path in resumed)  # the same W&B run


def test_mlflow_file_store_has_every_step_the_sheets_and_one_run_across_resume(runs):
    from mlflow.tracking import MlflowClient

    plain = read_rows(runs / "plain" / "metrics.csv")
    for name in ("tracked", "crashed"):
        client = MlflowClient(tracking_uri=f"file:{runs / f'mlruns-{name}'}")
        experiment = client.get_experiment_by_name("tiny-sd3")  # from $MLFLOW_EXPERIMENT_NAME
        [run] = client.search_runs([experiment.experiment_id])  # the resume reopened the run, no second one
        assert run.info.run_name == "tracked" and run.info.status == "FINISHED"  # the crashed run resumed it
        history = client.get_metric_history(run.info.run_id, "train/reward_mean")
        by_step = {metric.step: metric.value for metric in history}  # a redone step is logged again
        assert sorted(by_step) == [1, 2, 3], name
        assert [by_step[s] for s in (1, 2, 3)] == pytest.approx([float(r["reward_mean"]) for r in plain], rel=1e-6)
        assert "eval/eval_reward_mean" in run.data.metrics and run.data.params["model.family"] == "sd3"
        artifacts = {entry.path for entry in client.list_artifacts(run.info.run_id)}
        assert {"config.yaml", "images", "train"} <= artifacts, artifacts
        images = [entry.path for entry in client.list_artifacts(run.info.run_id, "images")]
        assert any(path.startswith("images/eval~contact_sheet") for path in images), images


def test_train_log_has_the_console_lines_and_is_appended_on_resume(runs):
    tracked = (runs / "tracked" / "train.log").read_text()
    for text in (
        "step sizes:",
        "loading model sd3",
        "loading model sd3 from",
        ": done in",
        "parity preflight",
        "step 3/3, ",
        "eval step 2",
        "saving ",
        "checkpoint-final",
    ):
        assert text in tracked, text
    assert " INFO genalign.training.trainer: " in tracked  # the console's format
    crashed = (runs / "crashed" / "train.log").read_text()
    assert crashed.startswith(tracked) and "resumed from" in crashed[len(tracked) :]


def test_exported_lora_has_a_model_card_whose_snippet_runs_as_printed(runs, tiny_sd3_dir):
    import re

    card = (runs / "tracked" / "checkpoint-final" / "lora" / "README.md").read_text()
    front = yaml.safe_load(card.split("---")[1])
    # the run loaded a local tiny pipeline through the SD3.5 recipe: no Hub id, no SD3.5 licence (never guessed)
    assert "base_model" not in front and "license" not in front and "stabilityai" not in card
    assert front["library_name"] == "diffusers" and front["pipeline_tag"] == "text-to-image"
    assert {"lora", "genalign", "grpo"} <= set(front["tags"])
    assert front["widget"] == [{"text": front["widget"][0]["text"], "output": {"url": "samples_step_3.png"}}]
    # the first and the last evaluation's sheets (steps 0 and 3) beside the card, shown by it
    lora = runs / "tracked" / "checkpoint-final" / "lora"
    for step in (0, 3):
        assert (lora / f"samples_step_{step}.png").read_bytes() == (
            runs / "tracked" / f"eval_epoch_{step}" / "contact_sheet.png"
        ).read_bytes()
        assert f"](samples_step_{step}.png)" in card
    assert not (lora / "samples_step_2.png").exists()
    last_eval = read_rows(runs / "tracked" / "eval_metrics.csv")[-1]
    for text in (
        f"recipe: `{RECIPE}`",
        "`jpeg_compressibility` x 1",
        "steps trained: 3 of 3",
        "EMA (decay",
        f"| eval reward (mean) | {float(last_eval['eval_reward_mean']):.4f} |",
        "load_lora_weights",
    ):
        assert text in card, text
    assert "`ocr`" not in card  # zero-weight rewards are not listed
    # every weight folder has its card: lora_live/ (the trained weights beside the EMA)
    live = (runs / "tracked" / "checkpoint-final" / "lora_live" / "README.md").read_text()
    assert "- weights: live (the trained weights; lora/ holds the EMA)" in live
    # the usage snippet, run exactly as printed: it loads this folder onto the base and samples
    [snippet] = re.findall(r"```python\n(.*?)```", card, re.S)
    assert f"load_lora_weights({str(lora.resolve())!r})" in snippet and "dtype=torch.float32" in snippet
    namespace: dict = {}
    exec(snippet, namespace)  # noqa: S102 - the card's own code, on the test's tiny local pipeline
    image = namespace["image"]
    assert image.size == (64, 64)
    pipe = namespace["pipe"]
    assert any("lora" in name for name, _ in pipe.transformer.named_parameters())


def test_full_finetune_exports_a_transformer_diffusers_loads(tiny_sd3_dir, tmp_path):
    from diffusers import SD3Transformer2DModel, StableDiffusion3Pipeline

    out = tmp_path / "full"
    Trainer(
        load_config(
            RECIPE,
            tiny_overrides(
                tiny_sd3_dir,
                out,
                "model.train_mode=full",
                "actor.lr=1e-4",
                "trainer.num_steps=1",
                "trainer.save_every=0",
                "eval.every=0",
                "eval.at_start=false",
            ),
        )
    ).train()
    exported = out / "checkpoint-final" / "transformer"
    transformer = SD3Transformer2DModel.from_pretrained(exported)
    ema = load_file(str(out / "checkpoint-final" / "ema.safetensors"))  # eval.use_ema: the EMA is exported
    state = transformer.state_dict()
    assert ema.keys() <= state.keys() and all(torch.equal(state[k], ema[k]) for k in ema)
    base = SD3Transformer2DModel.from_pretrained(tiny_sd3_dir, subfolder="transformer")
    assert any(not torch.equal(state[k], v) for k, v in base.state_dict().items())
    pipe = StableDiffusion3Pipeline.from_pretrained(tiny_sd3_dir, transformer=transformer)
    image = pipe(
        "a sign",
        num_inference_steps=2,
        height=64,
        width=64,
        guidance_scale=1.0,
        generator=torch.Generator().manual_seed(0),
        output_type="pt",
    ).images
    assert torch.isfinite(image).all()
    card = (exported / "README.md").read_text()
    assert "transformer=transformer" in card and "steps trained: 1 of 1" in card
    assert not (out / "checkpoint-final" / "lora").exists()


def test_export_pushes_a_real_checkpoints_lora_folder(runs, monkeypatch):
    from huggingface_hub import HfApi

    from genalign.cli import main

    uploaded = []
    monkeypatch.setattr(HfApi, "create_repo", lambda self, repo_id, **kwargs: None)
    monkeypatch.setattr(
        HfApi,
        "create_commit",
        lambda self, repo_id, operations, **kwargs: (
            uploaded.append({op.path_in_repo: op.path_or_fileobj for op in operations}) or "done"
        ),
    )
    assert main(["export", str(runs / "tracked" / "checkpoint-2"), "--push-to-hub", "me/tiny-sd3-lora"]) == 0
    files = uploaded[0]
    folder = runs / "tracked" / "checkpoint-2" / "lora"
    assert files["pytorch_lora_weights.safetensors"] == str(folder / "pytorch_lora_weights.safetensors")
    assert "pipe.load_lora_weights('me/tiny-sd3-lora')" in files["README.md"].decode()
