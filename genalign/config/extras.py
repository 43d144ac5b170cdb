"""Optional dependencies: the pip extra that brings the package a config choice imports.

Where it fits: heavy rewards and trackers are extras (`pip install 'genalign[ocr]'`,
`genalign[text-similarity]`, `genalign[trackers]`, ...; pyproject.toml lists them). `validate`
asks `missing_package_problem` for each selected one, so a run that picks a reward or tracker
whose package is absent stops with a config error naming the extra, before any model loads,
instead of an ImportError minutes into the run. A reward declares what it needs with a
`required_package()` method on its options dataclass (it may depend on the options: OCR's
tesseract engine needs no wheel).
"""

from __future__ import annotations

import importlib.util


def is_installed(module: str) -> bool:
    """Whether `module` can be imported here (found on the path; nothing is imported)."""
    return importlib.util.find_spec(module) is not None


def install_hint(extra: str) -> str:
    return f"pip install 'genalign[{extra}]'"


def missing_package_problem(key: str, module: str, extra: str, alternative: str = "") -> str | None:
    """`key: needs the <module> package ...; pip install 'genalign[<extra>]'` when `module` is
    not installed, else None. `alternative` is appended as another way out (e.g. "or remove it")."""
    if is_installed(module):
        return None
    return f"{key} needs the {module} package, which is not installed; {install_hint(extra)}" + (
        f" {alternative}" if alternative else ""
    )
