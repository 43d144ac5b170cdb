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


def write_or_check_files(files: dict[str, bytes], folder: Path, check: bool, script: str) -> int:
    """The same for a built set of binary files (an image dataset): `files` maps a path relative
    to `folder` to its bytes; a PNG under `folder/images/` that `files` does not name is stale
    too (check: reported; write: removed)."""
    on_disk = {str(path.relative_to(folder)) for path in (folder / "images").glob("*.png")}
    if check:
        differ = sorted(
            name
            for name in files.keys() | on_disk
            if not (folder / name).is_file() or files.get(name) != (folder / name).read_bytes()
        )
        if differ:
            print(f"out of date (run python {script}): {', '.join(differ[:5])}", file=sys.stderr)
            return 1
        return 0
    (folder / "images").mkdir(exist_ok=True)
    for stale in on_disk - files.keys():
        (folder / stale).unlink()
    for name, content in files.items():
        (folder / name).write_bytes(content)
    print(f"wrote {len(files)} files under {folder} ({sum(map(len, files.values())) / 1024:.0f} KB)")
    return 0
