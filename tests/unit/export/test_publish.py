"""`genalign export CHECKPOINT --push-to-hub REPO_ID`: the folder it finds and the upload it asks
huggingface_hub for (the upload itself replaced: no network in tests)."""

from __future__ import annotations

import pytest
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError

from genalign.cli import main
from genalign.config.errors import UserError
from genalign.export.publish import export_folder, push_to_hub


@pytest.fixture
def checkpoint(tmp_path):
    lora = tmp_path / "run" / "checkpoint-final" / "lora"
    lora.mkdir(parents=True)
    (lora / "README.md").write_text(f"---\nbase_model: org/base\n---\n\npipe.load_lora_weights({str(lora)!r})\n")
    (lora / "pytorch_lora_weights.safetensors").write_bytes(b"weights")
    (lora / "samples_step_0.png").write_bytes(b"png")
    return lora.parent


@pytest.fixture
def hub(monkeypatch):
    """HfApi with create_repo/create_commit recorded instead of sent."""
    calls = []

    def create_repo(self, repo_id, **kwargs):
        calls.append(("create_repo", repo_id, kwargs))

    def create_commit(self, repo_id, operations, **kwargs):
        calls.append(("create_commit", repo_id, {**kwargs, "operations": list(operations)}))
        return type("CommitInfo", (), {"commit_url": f"https://huggingface.co/{repo_id}/commit/abc"})()

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "create_commit", create_commit)
    return calls


def test_export_lists_the_folder_without_uploading(checkpoint, hub, capsys):
    assert main(["export", str(checkpoint)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        str(checkpoint / "lora"),
        "  README.md",
        "  pytorch_lora_weights.safetensors",
        "  samples_step_0.png",
    ]
    assert hub == []


def test_push_to_hub_creates_the_repo_and_uploads_the_lora_folder(checkpoint, hub, capsys):
    assert main(["export", str(checkpoint), "--push-to-hub", "me/my-lora", "--private"]) == 0
    assert hub[0] == ("create_repo", "me/my-lora", {"repo_type": "model", "private": True, "exist_ok": True})
    name, repo, kwargs = hub[1]
    assert (name, repo) == ("create_commit", "me/my-lora") and kwargs["repo_type"] == "model"
    assert kwargs["commit_message"] == "Upload checkpoint-final/lora (genalign)"
    files = {op.path_in_repo: op.path_or_fileobj for op in kwargs["operations"]}
    assert sorted(files) == ["README.md", "pytorch_lora_weights.safetensors", "samples_step_0.png"]
    assert files["pytorch_lora_weights.safetensors"] == str(checkpoint / "lora" / "pytorch_lora_weights.safetensors")
    # the uploaded card's snippet loads from the repository, not from this machine's folder
    assert files["README.md"].decode().endswith("pipe.load_lora_weights('me/my-lora')\n")
    assert capsys.readouterr().out.splitlines()[-1] == "https://huggingface.co/me/my-lora/commit/abc"


def test_a_full_fine_tune_exports_its_transformer(tmp_path):
    (tmp_path / "transformer").mkdir()
    (tmp_path / "transformer" / "README.md").write_text("card")
    assert export_folder(tmp_path) == tmp_path / "transformer"


def test_a_checkpoint_without_an_export_says_why(tmp_path, capsys):
    assert main(["export", str(tmp_path)]) == 2
    assert "holds no exported model (lora/, transformer/ or model/ with a README.md)" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "missing")]) == 2


def test_a_bad_repo_id_is_refused_before_any_request(checkpoint, hub):
    with pytest.raises(UserError, match="is not a Hub repository id"):
        push_to_hub(checkpoint / "lora", "not a repo")
    assert hub == []


def test_a_refused_upload_is_a_user_error_with_a_hint(checkpoint, monkeypatch, capsys):
    def refuse(self, repo_id, **kwargs):
        import httpx

        request = httpx.Request("POST", "https://huggingface.co/api/repos/create")
        raise HfHubHTTPError("401 Client Error: Unauthorized", response=httpx.Response(401, request=request))

    monkeypatch.setattr(HfApi, "create_repo", refuse)
    assert main(["export", str(checkpoint), "--push-to-hub", "me/my-lora"]) == 2
    err = capsys.readouterr().err
    assert "--push-to-hub me/my-lora: the Hub refused the upload: 401 Client Error" in err
    assert "hint: log in with `hf auth login`" in err


def test_no_network_is_one_line_and_uploads_nothing(checkpoint, tmp_path):
    """A real HfApi against an endpoint where nothing listens (no route to the Hub), in a process
    of its own: huggingface_hub reads HF_ENDPOINT and HF_HUB_OFFLINE when it is imported."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9", "HF_TOKEN": "hf_test"}
    result = subprocess.run(
        [sys.executable, "-m", "genalign", "export", str(checkpoint), "--push-to-hub", "me/my-lora"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("genalign: error:")]
    assert "--push-to-hub me/my-lora: cannot reach the Hub" in line and "nothing was uploaded" in line
