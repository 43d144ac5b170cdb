"""`DataConfig`: which prompt manifests feed training and evaluation."""

from __future__ import annotations

from dataclasses import dataclass

from genalign.config.checks import empty_path_problems


@dataclass
class DataConfig:
    manifest: str = "datasets/ocr/train.txt"
    """Training prompts: .txt (one prompt a line) or .jsonl/.json rows with a "prompt" field
    (other fields are metadata the rewards see), or a Hub dataset
    hf://datasets/<owner>/<name>[@revision][:split] (split default train; a "prompt" column,
    the others metadata; needs `pip install 'genalign[hub]'`). Relative paths resolve against
    the working directory, then $GENALIGN_DATA_ROOT, then the package's prompt sets."""
    eval_manifest: str = "datasets/ocr/test.txt"
    """Fixed evaluation prompts (same formats; a Hub dataset's eval split: hf://datasets/<owner>/<name>:test)."""
    preference_manifest: str | None = None
    """Offline Flow-DPO pairs (algorithm.dpo.source=offline): a .jsonl of {"prompt", "chosen",
    "rejected"} rows, image paths relative to the file (docs/preference_data.md). Each training
    step draws rollout.rollout_batch_size pairs in a seeded epoch order (data.shuffle)."""
    image_manifest: str | None = None
    """Flow-matching SFT image–prompt pairs (algorithm.name=sft, algorithm.sft.source=dataset):
    a .jsonl of {"prompt", "image"} rows, image paths relative to the file (docs/preference_data.md).
    Each training step draws rollout.rollout_batch_size rows in a seeded epoch order (data.shuffle)."""
    shuffle: bool = True
    """Draw training prompts in a seeded random order (epoch-wise permutation)."""

    def problems(self) -> list[str]:
        """Whether each manifest exists is preflight/files.py's (a check of this machine's files)."""
        return empty_path_problems({"data.manifest": self.manifest, "data.eval_manifest": self.eval_manifest})
