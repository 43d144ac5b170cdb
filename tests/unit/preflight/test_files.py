"""The offline hub-cache check honours model.revision (a model whose diffusers weights live on
a branch, as Cosmos-Predict2.5's do, is cached under that branch's ref, not main's)."""

from __future__ import annotations

import pytest

from genalign.preflight.files import hub_cached, offline_hub_problems
from genalign.preflight.load import load_config

REPO = "nvidia/Cosmos-Predict2.5-2B"
BRANCH = "diffusers/base/post-trained"


@pytest.fixture
def cache_with_branch(tmp_path, monkeypatch):
    """A Hugging Face cache holding only the BRANCH snapshot of REPO (its model_index.json)."""
    from huggingface_hub import constants

    repo_dir = tmp_path / "models--nvidia--Cosmos-Predict2.5-2B"
    (repo_dir / "refs" / BRANCH).parent.mkdir(parents=True)
    (repo_dir / "refs" / BRANCH).write_text("0" * 40)
    (repo_dir / "snapshots" / ("0" * 40)).mkdir(parents=True)
    (repo_dir / "snapshots" / ("0" * 40) / "model_index.json").write_text("{}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return tmp_path


def test_hub_cached_looks_at_the_asked_revision(cache_with_branch):
    assert hub_cached(REPO, BRANCH)
    assert not hub_cached(REPO)  # main is not cached


def test_offline_check_accepts_the_cached_branch_and_names_the_revision_to_download(cache_with_branch):
    no_scorer_download = ["reward.components.pickscore=0.0", "+reward.components.jpeg_compressibility=1.0"]
    cfg = load_config("experiment/diffusion/cosmos/online_grpo_pickscore", no_scorer_download)
    assert offline_hub_problems(cfg) == []
    cfg.model.revision = "main"
    (problem,) = offline_hub_problems(cfg)
    assert f"model.path='{REPO}' (revision 'main')" in problem and f"hf download {REPO} --revision main" in problem
