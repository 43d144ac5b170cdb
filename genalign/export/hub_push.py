"""`trainer.push_to_hub=<repo>`: each saved checkpoint uploaded to the Hub while training goes on.

Where it fits: a training callback (`training/callbacks.py`) on rank 0. After each checkpoint
save it hard-links the checkpoint's files into a staging folder beside it (so pruning with
`trainer.keep_last` cannot pull files from under an upload) and hands them to one background
thread, which uploads with huggingface_hub in one commit. The strategies are transformers'
`hub_strategy`:

- `every_save` (default): the export folder (`lora/`, or `transformer/` in the final
  checkpoint; with its model card, whose snippet then names the repository) at the
  repository's root, after every save;
- `checkpoint`: that, and the whole checkpoint in `last-checkpoint/` (what
  `trainer.resume_from=hf://<repo>/last-checkpoint` resumes from);
- `all_checkpoints`: that, with each checkpoint in its own `checkpoint-<step>/`;
- `end`: the final checkpoint's export only.

As in transformers, a save while the previous upload is still running is not queued (the
next save supersedes it); the final checkpoint's upload always happens, and the end of the run
waits for it. A failed upload is a logged warning naming the checkpoint and the command that
retries it; it never stops training.
"""

from __future__ import annotations

import logging
import os
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from genalign.export.publish import EXPORT_FOLDERS, folder_operations
from genalign.training.config import HUB_STRATEGIES

log = logging.getLogger(__name__)

STAGING_PREFIX = ".hub-upload-"
"""Staging folders beside the checkpoints (`runs/run_dir.py` removes one a crash left)."""


def stage(checkpoint: Path, staging: Path) -> Path:
    """A snapshot of `checkpoint`'s files at `staging`: hard links (instant, and they outlive
    the checkpoint's removal), a copy where the filesystem has none."""
    for source in sorted(path for path in checkpoint.rglob("*") if path.is_file()):
        target = staging / source.relative_to(checkpoint)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)
    return staging


def upload_operations(staged: Path, repo_id: str, strategy: str, checkpoint_name: str) -> tuple[list, str | None]:
    """(the commit's add operations, the repository folder the whole checkpoint goes to or None)."""
    operations = []
    export = next((staged / name for name in EXPORT_FOLDERS if (staged / name / "README.md").is_file()), None)
    if export is not None:
        operations += folder_operations(export, repo_id)
    folder = {"checkpoint": "last-checkpoint", "all_checkpoints": checkpoint_name}.get(strategy)
    if folder is not None:
        operations += folder_operations(staged, repo_id, folder)
    return operations, folder


class HubPusher:
    """The uploads of one run to `repo_id` (created on the first upload when missing)."""

    def __init__(self, repo_id: str, strategy: str = "every_save", private: bool = False, api=None):
        if strategy not in HUB_STRATEGIES:
            raise ValueError(f"trainer.hub_strategy={strategy!r}: choose one of {', '.join(HUB_STRATEGIES)}")
        self.repo_id, self.strategy, self.private = repo_id, strategy, private
        self._api = api
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="genalign-hub-push")
        self._pending: Future | None = None
        self._repo_ready = False
        self.uploaded: list[str] = []
        """Checkpoints whose upload finished (for the log and the tests)."""

    @property
    def api(self):
        if self._api is None:
            from huggingface_hub import HfApi

            self._api = HfApi()
        return self._api

    def on_save(self, step: int, path: Path) -> None:
        """After `path` (a complete checkpoint) is written: stage it and upload it in the background."""
        final = path.name == "checkpoint-final"
        if self.strategy == "end" and not final:
            return
        if self._pending is not None and not self._pending.done():
            if not final:
                log.info(
                    "trainer.push_to_hub: the previous upload is still running; %s is not uploaded (a later "
                    "save supersedes it)",
                    path.name,
                )
                return
            self._pending.result()  # the final checkpoint waits its turn; errors were logged by the task
        staging = path.parent / f"{STAGING_PREFIX}{os.getpid()}-{path.name}"
        shutil.rmtree(staging, ignore_errors=True)
        stage(path, staging)
        self._pending = self._pool.submit(self._upload, staging, path.name, step)

    def _upload(self, staged: Path, checkpoint_name: str, step: int) -> None:
        try:
            operations, folder = upload_operations(staged, self.repo_id, self.strategy, checkpoint_name)
            if not operations:
                log.warning(
                    "trainer.push_to_hub: %s has no export folder to upload (this family exports none; "
                    "trainer.hub_strategy=checkpoint uploads whole checkpoints)",
                    checkpoint_name,
                )
                return
            if not self._repo_ready:
                self.api.create_repo(self.repo_id, repo_type="model", private=self.private, exist_ok=True)
                self._repo_ready = True
            operations += self._stale_files(folder, {op.path_in_repo for op in operations})
            info = self.api.create_commit(
                self.repo_id, operations, repo_type="model", commit_message=f"{checkpoint_name} (step {step}, genalign)"
            )
            self.uploaded.append(checkpoint_name)
            log.info(
                "trainer.push_to_hub: uploaded %s to %s (%s)",
                checkpoint_name,
                self.repo_id,
                getattr(info, "commit_url", info),
            )
        except Exception as exc:  # noqa: BLE001 - an upload is never a reason to stop training
            log.warning(
                "trainer.push_to_hub: uploading %s to %s failed (%s: %s); training goes on. Retry with: "
                "genalign export <output_dir>/%s --push-to-hub %s",
                checkpoint_name,
                self.repo_id,
                type(exc).__name__,
                str(exc).splitlines()[0] if str(exc) else "",
                checkpoint_name,
                self.repo_id,
            )
        finally:
            shutil.rmtree(staged, ignore_errors=True)

    def _stale_files(self, folder: str | None, uploading: set[str]) -> list:
        """Deletions of what an earlier upload left that this one replaces: the root's sample
        sheets of other steps (the card shows the first and the latest), and in
        last-checkpoint/ every file this checkpoint does not have, so it holds one checkpoint."""
        from huggingface_hub import CommitOperationDelete

        def stale(name: str) -> bool:
            if name in uploading:
                return False
            if folder == "last-checkpoint" and name.startswith("last-checkpoint/"):
                return True
            return "/" not in name and name.startswith("samples_step_") and name.endswith(".png")

        existing = self.api.list_repo_files(self.repo_id, repo_type="model")
        return [CommitOperationDelete(path_in_repo=name) for name in existing if stale(name)]

    def on_train_end(self) -> None:
        """Wait for the upload in progress (the final checkpoint's), then stop the thread."""
        if self._pending is not None and not self._pending.done():
            log.info("trainer.push_to_hub: waiting for the upload to %s to finish ...", self.repo_id)
        self._pool.shutdown(wait=True)
