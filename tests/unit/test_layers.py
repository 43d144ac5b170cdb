"""The import graph: no cycle between files, and packages in a layer order.

Every genalign module (not the build scripts shipped as package data) is parsed with `ast`
(nothing is imported). An import counts wherever it is written, at the top of the file or
inside a function: a function-local import is still a
dependency, it only hides it. Imports under `if TYPE_CHECKING:` are annotations, not
dependencies, and are skipped. The layer list below is mirrored in docs/architecture.md §6.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import genalign

PACKAGE_ROOT = Path(genalign.__file__).resolve().parent

LAYERS: list[tuple[tuple[str, ...], str]] = [
    # bottom first; a package may import its own layer's package and every layer below it
    (("basement",), "config/ composes and type-checks; each package's config.py; atomic, finite, hub, ray_session"),
    (("data",), "prompt manifests, the step sampler, preference pairs: plain files and seeds"),
    (("sampling",), "pure math: schedules, kernels, windows, the denoising loop (torch only)"),
    (("models",), "model families behind FlowPolicy / TokenPolicy; families import no trainer"),
    (("weights",), "what is trained and the copies kept of it: LoRA, float32 shadows, the reference"),
    (("rewards",), "scorers and their runtimes; a reward never imports a model family"),
    (("placement",), "devices, GPU placement, Ray pools, the torchrun launcher"),
    (("runs",), "the run directory, atomic checkpoints, stopping on a signal"),
    (("rollout",), "prompts to trajectories: collectors and the local and Ray engines"),
    (("algorithms",), "advantages, losses, replay and the thin algorithm classes"),
    (("evaluation",), "fixed evaluation and contact sheets"),
    (("tracking",), "metric sinks, trackers, the run log"),
    (("reporting",), "report.html and provenance"),
    (("preflight",), "every check before a run starts: cross-key, files, checkpoint, machine, memory"),
    (("export",), "export folders, model cards, publishing to the hub"),
    (("demo",), "regenerating the shipped CPU-demo model and its judge classifiers"),
    (("training",), "the thin loop: building the parts, one optimizer round, distribution"),
    (("entry",), "cli.py, train.py, __main__.py: commands; api.py and the package's __init__: the Python API"),
]
"""The layer order, bottom first, with why each layer sits where it does."""

BASEMENT_TOP_LEVEL = ("genalign.version", "genalign.atomic", "genalign.finite", "genalign.hub", "genalign.ray_session")
ENTRY_TOP_LEVEL = ("genalign", "genalign.cli", "genalign.train", "genalign.__main__", "genalign.api")
CONFIG_MODULE_NAMES = ("config",)
"""A package's `config.py` holds the dataclasses that config/schema.py composes: it belongs to
the basement, so it may import only the basement (config/, other config modules)."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def importable(path: Path) -> bool:
    """A module of the package: every folder from the package root down to it is a package
    (has an `__init__.py`). The prompt-set build scripts under genalign/datasets/ are package
    data beside their data, run as scripts, never imported."""
    return all(
        (folder / "__init__.py").is_file()
        for folder in [path.parent, *path.parent.parents]
        if folder.is_relative_to(PACKAGE_ROOT)
    )


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE_ROOT.rglob("*.py")) if importable(path)}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """(module, line) for every genalign module `name` imports, function-local ones included."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for stmt in child.orelse:
                    visit_one(stmt)
                continue
            visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:  # `from genalign.training import lora` imports a module
                sub = f"{target}.{alias.name}"
                found.append((sub if sub in modules else target, node.lineno))
        else:
            visit(node)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    result = []
    for target, line in found:
        if not target.startswith("genalign"):
            continue
        while target not in modules and "." in target:
            target = target.rpartition(".")[0]
        if target != name:
            result.append((target, line))
    return result


def layer_unit(name: str) -> str:
    """The layer package a module belongs to (config modules and top-level helpers: basement)."""
    if name in BASEMENT_TOP_LEVEL:
        return "basement"
    if name in ENTRY_TOP_LEVEL:
        return "entry"
    parts = name.split(".")
    if parts[1] == "config" or (len(parts) == 3 and parts[2] in CONFIG_MODULE_NAMES):
        return "basement"
    return parts[1]


def layer_index() -> dict[str, int]:
    return {package: index for index, (packages, _) in enumerate(LAYERS) for package in packages}


def import_graph() -> dict[str, list[tuple[str, int]]]:
    modules = all_modules()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted({t for t, _ in graph[root]})))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted({t for t, _ in graph[child]}))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_graph_sees_function_local_imports_and_skips_type_checking(tmp_path):
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from genalign.models import base\n"
        "def f():\n    from genalign.training import trainer\n"
    )
    file = tmp_path / "probe.py"
    file.write_text(source)
    modules = {"genalign.training.trainer": Path(), "genalign.models.base": Path()}
    assert imported_modules("genalign.probe", file, modules) == [("genalign.training.trainer", 5)]


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": [("b", 1)], "b": [("c", 1)], "c": [("a", 1)], "d": [("a", 1)]}
    assert cycles(graph) == [["a", "b", "c"]]


def test_every_package_has_a_layer():
    known = layer_index()
    missing = sorted({layer_unit(name) for name in all_modules()} - set(known))
    assert not missing, f"packages without a layer in LAYERS: {missing}"


def test_no_import_cycle_between_files():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_package_imports_one_above_it():
    known = layer_index()
    upward = []
    for name, targets in import_graph().items():
        here = layer_unit(name)
        for target, line in targets:
            there = layer_unit(target)
            if here == there:
                continue
            if known.get(there, -1) >= known.get(here, -1):
                upward.append(f"{name}:{line} imports {target} ({here} -> {there})")
    assert not upward, "imports that run up (or sideways) the layers:\n" + "\n".join(upward)


PURE_MATH = (
    "genalign.sampling",
    "genalign.algorithms.advantages",
    "genalign.algorithms.losses",
    "genalign.algorithms.forward_losses",
    "genalign.algorithms.forward_draws",
)
"""Modules (or packages) of pure tensor math: they import torch and the standard library, and of
genalign only other pure-math modules and a package's config module, where the `Literal` of the
choices an argument takes is written (a config module holds plain dataclasses: no state, no torch)."""
_STDLIB = frozenset(sys.stdlib_module_names)


def _pure(name: str) -> bool:
    return any(name == root or name.startswith(root + ".") for root in PURE_MATH)


def _config_module(name: str) -> bool:
    parts = name.split(".")
    return len(parts) == 3 and parts[2] in CONFIG_MODULE_NAMES


def test_the_math_imports_only_torch():
    modules = all_modules()
    allowed_roots = {"torch", "numpy", "__future__"}
    problems = []
    for name, path in modules.items():
        if not _pure(name):
            continue
        problems += [
            f"{name}:{line} imports {target}"
            for target, line in imported_modules(name, path, modules)
            if not _pure(target) and not _config_module(target)
        ]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            roots = (
                [alias.name.split(".")[0] for alias in node.names]
                if isinstance(node, ast.Import)
                else [(node.module or "").split(".")[0]]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            problems += [
                f"{name}:{node.lineno} imports {root}"
                for root in roots
                if root not in allowed_roots and root != "genalign" and root not in _STDLIB
            ]
    assert not problems, "pure math importing more than torch:\n" + "\n".join(problems)
