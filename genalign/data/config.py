"""`DataConfig`: which prompt manifests feed training and evaluation."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DataConfig:
    manifest: str = "datasets/ocr/train.txt"
    """Training prompts: .txt (one prompt a line) or .jsonl/.json rows with a "prompt" field.
    Relative paths resolve against the working directory, then the project root."""
    eval_manifest: str = "datasets/ocr/test.txt"
    """Fixed evaluation prompts (same formats)."""
    shuffle: bool = True
    """Draw training prompts in a seeded random order (epoch-wise permutation)."""
