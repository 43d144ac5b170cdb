"""`genalign export CHECKPOINT [--push-to-hub REPO_ID]`: the folder of a checkpoint that other
tools load, and its upload to the Hugging Face Hub.

Where it fits: every checkpoint of a LoRA run on a diffusers or transformers family holds
`lora/` (the adapter, its model card and the before/after evaluation sheets; see
`export/folder.py`), and the final checkpoint of a full fine-tune holds `transformer/`.
Publishing is that folder as it is, uploaded with huggingface_hub (`create_repo` with
exist_ok, then `upload_folder`), the way diffusers' training scripts end with
`--push_to_hub`. The token is huggingface_hub's own (`hf auth login` or $HF_TOKEN).
"""

from __future__ import annotations

import importlib
from pathlib import Path

from genalign.config.errors import UserError

EXPORT_FOLDERS = ("lora", "transformer")
"""The checkpoint subfolders other tools load, in the order they are looked for."""


def export_folder(checkpoint: Path | str) -> Path:
    """`checkpoint/lora` or `checkpoint/transformer` (whichever holds a model card); a
    UserError saying why when the checkpoint has neither."""
    checkpoint = Path(checkpoint)
    if not checkpoint.is_dir():
        raise UserError(f"{checkpoint}: no such checkpoint directory")
    for name in EXPORT_FOLDERS:
        if (checkpoint / name / "README.md").is_file():
            return checkpoint / name
    raise UserError(f"{checkpoint} holds no exported model (lora/ or transformer/ with a README.md): LoRA runs on a "
                    "diffusers or transformers family export one in every checkpoint, full fine-tunes in "
                    "checkpoint-final only, and the toy demo family exports none")


def push_to_hub(folder: Path, repo_id: str, private: bool = False, commit_message: str | None = None,
                api=None) -> str:
    """Upload `folder` to the model repository `repo_id` (created when missing); returns the
    commit URL. `api` is an `huggingface_hub.HfApi` (injectable for tests)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    from genalign.hub import HUB_ID

    if not HUB_ID.match(repo_id):
        raise UserError(f"--push-to-hub {repo_id!r} is not a Hub repository id; use <user or org>/<name>")
    api = api or HfApi()
    message = commit_message or f"Upload {folder.parent.name}/{folder.name} (genalign)"
    try:
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        info = api.upload_folder(repo_id=repo_id, folder_path=str(folder), repo_type="model", commit_message=message)
    except HfHubHTTPError as err:  # no token, no write access, a name taken by another type of repo, ...
        raise UserError(f"--push-to-hub {repo_id}: the Hub refused the upload: {err}",
                        hint="log in with `hf auth login` (or set HF_TOKEN) with a token that may write there") from err
    except OfflineModeIsEnabled:
        raise UserError(f"--push-to-hub {repo_id}: HF_HUB_OFFLINE is set, and uploading needs the network; unset it "
                        f"on a machine that can reach the Hub (the folder is {folder})") from None
    except _network_errors() as err:  # no route, DNS, a proxy, a timeout: the folder stays as it is
        raise UserError(f"--push-to-hub {repo_id}: cannot reach the Hub ({type(err).__name__}: {err}); nothing was "
                        f"uploaded: rerun where the network reaches it (the folder is {folder})") from None
    return str(getattr(info, "commit_url", info))


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
