"""Prove the carried wheels complete the GPU machine's image: run the tiny GPU suite in a Python
that can import only what that image has, plus `.whl/` (what `prepare_gpu.sh` prepared).

    python benchmarks/check_carried.py [--image torch transformers peft accelerate] [--out DIR]

The image (Python 3.12, torch, transformers, peft, accelerate, no diffusers) is imitated from
this environment: a folder of links to the installed top-level modules of those distributions
and of everything they require (read from the installed metadata, recursively), and nothing
else; Python starts without its site-packages (`-S`). The carried pure-Python wheels are
installed into a second folder as the device command installs them (`--no-index --no-deps
--target`); a binary wheel (built for CPython 3.12) stands for the same version installed
here, which must match. Then `gpu_suite.py --tiny` runs, its children too, with only those
on the path: a module the image lacks and no wheel carries fails an item, and this fails.
`prepare_gpu.sh` runs it last.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMAGE = ("torch", "transformers", "peft", "accelerate")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots: list[str]) -> set[str]:
    """The installed distributions `roots` need, recursively (extras left out; a requirement
    whose environment marker does not hold here, or that is not installed, is skipped)."""
    from packaging.requirements import Requirement

    seen, todo = set(), [_canonical(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen.add(name)
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(_canonical(requirement.name))
    return seen


def image_view(distributions: set[str], view: Path) -> None:
    """Links in `view` to every top-level module and dist-info of `distributions`."""
    top_levels = metadata.packages_distributions()
    for dist in metadata.distributions():
        if _canonical(dist.metadata["Name"]) not in distributions:
            continue
        site = Path(dist.locate_file(""))
        info = Path(str(dist._path))  # the .dist-info folder: importlib.metadata.version() reads it
        (view / info.name).symlink_to(info)
        for module, owners in top_levels.items():
            if dist.metadata["Name"] in owners:
                for found in site.glob(f"{module}*"):
                    if (found.name == module or found.name.startswith(module + ".")) and not (
                        view / found.name
                    ).exists():
                        (view / found.name).symlink_to(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", nargs="+", default=list(IMAGE), help="distributions the image has")
    parser.add_argument("--wheels", type=Path, default=REPO / ".whl")
    parser.add_argument("--out", type=Path, default=None, help="where the tiny suite writes (default: a temp dir)")
    args = parser.parse_args(argv)
    wheels = sorted(args.wheels.glob("*.whl"))
    if not wheels:
        parser.error(f"{args.wheels}: no wheels (run benchmarks/prepare_gpu.sh)")
    pure = [w for w in wheels if w.name.endswith("-py3-none-any.whl")]
    binary, unchecked = {}, []
    for wheel in (w for w in wheels if w not in pure):  # built for CPython 3.12: the same version here stands in
        name, version = _canonical(wheel.name.split("-")[0]), wheel.name.split("-")[1]
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = None
        if installed is None:  # e.g. torchvision, built against the image's torch: nothing here stands in
            unchecked.append(wheel.name)
        elif installed != version:
            parser.error(f"{name} {version} is carried but {installed} is installed here")
        else:
            binary[name] = version
    with tempfile.TemporaryDirectory() as tmp:
        view, site = Path(tmp) / "image", Path(tmp) / "site"
        view.mkdir()
        image = closure(args.image) | set(binary)
        image_view(image, view)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-index",
                "--no-deps",
                "--no-compile",
                "--target",
                str(site),
                *map(str, pure),
            ],
            check=True,
        )
        out = args.out or Path(tmp) / "out"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(view), str(REPO)])}
        run = subprocess.run(
            [
                sys.executable,
                "-S",
                str(REPO / "benchmarks" / "gpu_suite.py"),
                "--tiny",
                "--out",
                str(out),
                "--budget-s",
                "3000",
            ],
            env=env,
            capture_output=True,
            text=True,
        )
        print(run.stdout[-3000:], run.stderr[-3000:] if run.returncode else "", sep="\n")
        report = json.loads((out / "gpu_suite.json").read_text()) if (out / "gpu_suite.json").is_file() else None
        broken = [f"{i['key']}: {i.get('reason')}" for i in (report or {}).get("items", []) if i["status"] == "failed"]
        print(f"image: {', '.join(sorted(image))}\ncarried: {', '.join(w.name for w in wheels)}")
        if unchecked:
            print(f"not installed here, so not part of this check: {', '.join(unchecked)}")
        if run.returncode or report is None or broken:
            print("the carried set is NOT complete:\n  " + "\n  ".join(broken or ["the suite did not finish"]))
            return 1
        print("the carried set is complete: every item of the tiny suite ran with only the image and the wheels")
        return 0


if __name__ == "__main__":
    sys.exit(main())
