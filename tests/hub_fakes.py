"""A Hugging Face Hub in a local folder, for tests that must not touch the network.

`FakeHub.install(monkeypatch)` replaces huggingface_hub's `HfApi` (create_repo, create_commit,
list_repo_files), `snapshot_download` and `datasets.load_dataset` with versions that read and
write `root/<repo id>/...` and datasets registered with `add_dataset`. The operations are
huggingface_hub's own `CommitOperationAdd` / `CommitOperationDelete`, applied as the Hub would.
"""

from __future__ import annotations

import fnmatch
import shutil
from pathlib import Path


class FakeHub:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.commits: list[tuple[str, str, list[str]]] = []
        """(repo id, commit message, paths added or deleted) per commit."""
        self.created: list[tuple[str, bool]] = []
        self.datasets: dict[tuple[str, str], list[dict]] = {}
        self.fail_commits = 0
        """Make the next this many commits raise (a refused upload)."""

    # ------------------------------------------------------------------ HfApi
    def api_class(hub):
        class FakeHfApi:
            def __init__(self, *args, **kwargs):
                pass

            def create_repo(self, repo_id, repo_type="model", private=False, exist_ok=False, **kwargs):
                hub.created.append((repo_id, private))
                (hub.root / repo_id).mkdir(parents=True, exist_ok=True)

            def create_commit(self, repo_id, operations, commit_message="", repo_type="model", **kwargs):
                from huggingface_hub import CommitOperationAdd, CommitOperationDelete

                if hub.fail_commits:
                    hub.fail_commits -= 1
                    raise OSError("connection reset by peer")
                repo = hub.root / repo_id
                touched = []
                for op in operations:
                    target = repo / op.path_in_repo
                    if isinstance(op, CommitOperationDelete):
                        target.unlink()
                    elif isinstance(op, CommitOperationAdd):
                        target.parent.mkdir(parents=True, exist_ok=True)
                        if isinstance(op.path_or_fileobj, bytes):
                            target.write_bytes(op.path_or_fileobj)
                        else:
                            shutil.copyfile(op.path_or_fileobj, target)
                    touched.append(op.path_in_repo)
                hub.commits.append((repo_id, commit_message, touched))
                return type(
                    "CommitInfo", (), {"commit_url": f"https://huggingface.co/{repo_id}/commit/{len(hub.commits)}"}
                )()

            def list_repo_files(self, repo_id, repo_type="model", **kwargs):
                repo = hub.root / repo_id
                return sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file())

        return FakeHfApi

    def snapshot_download(self, repo_id, repo_type="model", revision=None, allow_patterns=None, **kwargs):
        repo = self.root / repo_id
        if not repo.is_dir():
            raise FileNotFoundError(f"404 Client Error: Repository Not Found for url: https://huggingface.co/{repo_id}")
        snapshot = self.root / ".cache" / repo_id.replace("/", "--") / (revision or "main")
        for file in repo.rglob("*"):
            relative = file.relative_to(repo).as_posix()
            if file.is_file() and (not allow_patterns or any(fnmatch.fnmatch(relative, p) for p in allow_patterns)):
                (snapshot / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(file, snapshot / relative)
        snapshot.mkdir(parents=True, exist_ok=True)
        return str(snapshot)

    # ------------------------------------------------------------------ datasets
    def add_dataset(self, repo_id: str, split: str, rows: list[dict]) -> None:
        self.datasets[(repo_id, split)] = rows

    def load_dataset(self, path, split=None, revision=None, **kwargs):
        from datasets import Dataset

        if (path, split) not in self.datasets:
            raise FileNotFoundError(f"Dataset '{path}' doesn't exist on the Hub or cannot be accessed.")
        return Dataset.from_list(self.datasets[(path, split)])

    def install(self, monkeypatch) -> "FakeHub":
        import huggingface_hub

        import datasets
        from genalign.data import hub_prompts

        monkeypatch.setattr(huggingface_hub, "HfApi", self.api_class())
        monkeypatch.setattr(huggingface_hub, "snapshot_download", self.snapshot_download)
        monkeypatch.setattr(datasets, "load_dataset", self.load_dataset)
        hub_prompts._rows.cache_clear()
        monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # genalign refuses to plan an upload offline
        return self
