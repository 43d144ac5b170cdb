"""What every prompt-set build script ends with: write the files, or check they are current."""

from __future__ import annotations

import sys
from pathlib import Path


def write_or_check(outputs: dict[Path, str], check: bool, script: str) -> int:
    """`check`: 1 (and the stale paths on stderr) if a file differs from its fresh text, else 0;
    otherwise write every file and print its line count."""
    if check:
        stale = [str(path) for path, text in outputs.items() if not path.exists() or path.read_bytes() != text.encode()]
        if stale:
            print(f"out of date (run python {script}): {', '.join(stale)}", file=sys.stderr)
            return 1
        return 0
    for path, text in outputs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode())
        print(f"wrote {path} ({text.count(chr(10))} prompts)")
    return 0
