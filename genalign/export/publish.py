"""`genalign export CHECKPOINT [--push-to-hub REPO_ID]`: the folder of a checkpoint that other
tools load, and its upload to the Hugging Face Hub.

Where it fits: every checkpoint of a LoRA run on a diffusers or transformers family holds
`lora/` (the adapter, its model card and the before/after evaluation sheets; see
`export/folder.py`), and the final checkpoint of a full fine-tune holds `transformer/`.
Publishing is that folder as it is, uploaded with huggingface_hub (`create_repo` with
exist_ok, then one `create_commit` of its files), the way diffusers' training scripts end with
`--push_to_hub`; the card's usage snippet, which names the folder's local path, names the
repository instead in the uploaded copy. The token is huggingface_hub's own (`hf auth login`
or $HF_TOKEN). `trainer.push_to_hub` uploads the same way during training (`export/hub_push.py`).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from genalign.config.errors import UserError
from genalign.hub import HUB_ID

EXPORT_FOLDERS = ("lora", "transformer", "model")
"""The checkpoint subfolders other tools load, in the order they are looked for."""


def export_folder(checkpoint: Path | str) -> Path:
    """`checkpoint/lora`, `checkpoint/transformer` or `checkpoint/model` (whichever holds a model
    card); a UserError saying why when the checkpoint has none."""
    checkpoint = Path(checkpoint)
    if not checkpoint.is_dir():
        raise UserError(f"{checkpoint}: no such checkpoint directory")
    for name in EXPORT_FOLDERS:
        if (checkpoint / name / "README.md").is_file():
            return checkpoint / name
    raise UserError(
        f"{checkpoint} holds no exported model (lora/, transformer/ or model/ with a README.md): LoRA runs on "
        "a diffusers or transformers family export one in every checkpoint, full fine-tunes and families "
        "exported in their own layout in checkpoint-final only, and the toy demo family exports none"
    )


def push_to_hub(folder: Path, repo_id: str, private: bool = False, commit_message: str | None = None, api=None) -> str:
    """Upload `folder` to the model repository `repo_id` (created when missing); returns the
    commit URL. `api` is an `huggingface_hub.HfApi` (injectable for tests)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    if not HUB_ID.match(repo_id):
        raise UserError(f"--push-to-hub {repo_id!r} is not a Hub repository id; use <user or org>/<name>")
    api = api or HfApi()
    message = commit_message or f"Upload {folder.parent.name}/{folder.name} (genalign)"
    try:
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        info = api.create_commit(repo_id, folder_operations(folder, repo_id), commit_message=message, repo_type="model")
    except HfHubHTTPError as err:  # no token, no write access, a name taken by another type of repo, ...
        raise UserError(
            f"--push-to-hub {repo_id}: the Hub refused the upload: {err}",
            hint="log in with `hf auth login` (or set HF_TOKEN) with a token that may write there",
        ) from err
    except OfflineModeIsEnabled:
        raise UserError(
            f"--push-to-hub {repo_id}: HF_HUB_OFFLINE is set, and uploading needs the network; unset it "
            f"on a machine that can reach the Hub (the folder is {folder})"
        ) from None
    except _network_errors() as err:  # no route, DNS, a proxy, a timeout: the folder stays as it is
        raise UserError(
            f"--push-to-hub {repo_id}: cannot reach the Hub ({type(err).__name__}: {err}); nothing was "
            f"uploaded: rerun where the network reaches it (the folder is {folder})"
        ) from None
    return str(getattr(info, "commit_url", info))


LOCAL_EXPORT = re.compile(r"'[^'\n]*/checkpoint-[^/'\n]+/(?:lora|lora_live|transformer|model)'")
"""How a card's usage snippet names the export folder it was written in (its absolute path)."""


def card_for_repo(card: str, repo_id: str, subfolder: str = "") -> str:
    """The card as uploaded: its snippet loads from `repo_id` (and `subfolder` in it) instead
    of the local folder it was written in."""
    where = repr(repo_id) + (f", subfolder={subfolder!r}" if subfolder else "")
    return LOCAL_EXPORT.sub(lambda _: where, card)


def folder_operations(folder: Path, repo_id: str, path_in_repo: str = "") -> list:
    """One `CommitOperationAdd` per file under `folder`, at `path_in_repo/<relative path>`;
    each model card (`README.md`) rewritten by `card_for_repo` for where it lands."""
    from huggingface_hub import CommitOperationAdd

    operations = []
    for file in sorted(path for path in Path(folder).rglob("*") if path.is_file()):
        relative = file.relative_to(folder).as_posix()
        target = f"{path_in_repo}/{relative}" if path_in_repo else relative
        if file.name == "README.md":
            subfolder = target.rsplit("/", 1)[0] if "/" in target else ""
            content = card_for_repo(file.read_text(encoding="utf-8"), repo_id, subfolder).encode("utf-8")
            operations.append(CommitOperationAdd(path_in_repo=target, path_or_fileobj=content))
        else:
            operations.append(CommitOperationAdd(path_in_repo=target, path_or_fileobj=str(file)))
    return operations


def _network_errors() -> tuple[type[BaseException], ...]:
    """A failed connection, as raised by whichever HTTP library this huggingface_hub uses (httpx2
    from 2.x, httpx before; both subclass their TransportError), or an OSError."""
    errors: list[type[BaseException]] = [OSError]
    for module in ("httpx2", "httpx"):
        try:
            errors.append(importlib.import_module(module).TransportError)
        except (ImportError, AttributeError):
            continue
    return tuple(errors)
