"""docs/architecture.md says where each concept lives and which module may do what; these tests
hold it to the code where a claim can be read mechanically:
* every module, folder or file the package table (§3) names in backticks exists, and a named
  attribute (`load.py:load_config`) is defined in its module;
* every package of genalign/ has a row, and every module of a package is named in it;
* every module opens with a docstring;
* every `package/module.py` (or `package/module.py:name`) the page mentions, in prose or in
  its diagrams, exists (and defines the name);
* only `training/distributed.py` touches process groups (§5): no other module calls into
  `torch.distributed`, except the launcher and the torch objects the doc names;
* nothing outside `algorithms/` asks which algorithm runs or reads an option an algorithm owns (§4);
* each engine has every member of the `RolloutEngine` protocol (§4)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "genalign"
DOC = ROOT / "docs" / "architecture.md"
NAMED = re.compile(r"^(?P<path>[\w./-]+?(?:\.py|\.json|/))(?::(?P<attr>\w+))?$")
"""A backticked name that is a module, data file or folder, with an optional `:attribute`."""


def section(title: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def package_rows() -> list[tuple[list[str], str]]:
    """(the packages a row of §3's table is about, the row's description)."""
    rows = []
    for line in section("3. Where each concept lives").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not line.startswith("|") or set(cells[0]) <= {"-", " "} or cells[0] == "package":
            continue
        packages = re.findall(r"`([\w]+)/`", cells[0]) or ([""] if cells[0] == "top level" else [])
        assert packages, f"a table row names no package: {line[:80]}"
        rows.append((packages, cells[1]))
    return rows


def named(description: str) -> list[tuple[str, str | None]]:
    """The module / file / folder names (and attributes) a description puts in backticks."""
    found = []
    for token in re.findall(r"`([^`]+)`", description):
        match = NAMED.match(token)
        if match and "://" not in token:
            found.append((match["path"], match["attr"]))
    return found


def resolve(package: str, path: str) -> Path | None:
    """`path` inside the package (or inside one of its subfolders, e.g. a family's folder), or
    relative to genalign/ when it names another package (`models/config.py`)."""
    base = PACKAGE / package if package else PACKAGE
    folder = path.endswith("/")
    for candidate in (base / path, PACKAGE / path):
        if candidate.is_dir() if folder else candidate.is_file():
            return candidate
    if "/" not in path.rstrip("/"):
        name = path.rstrip("/")
        hits = [p for p in base.rglob(name) if (p.is_dir() if folder else p.is_file())]
        if hits:
            return hits[0]
    return None


def defines(module: Path, name: str) -> bool:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            return True
    return False


def test_every_module_the_package_table_names_exists():
    rows = package_rows()
    assert len(rows) >= 15, rows
    missing = []
    for packages, description in rows:
        for path, attr in named(description):
            found = next((hit for hit in (resolve(p, path) for p in packages) if hit is not None), None)
            if found is None:
                missing.append(f"{'/'.join(packages) or 'top level'}: {path}")
            elif attr and not defines(found, attr):
                missing.append(f"{found.relative_to(ROOT)} defines no {attr}")
    assert not missing, missing


def test_every_package_has_a_row_and_every_module_is_named():
    """Each package of genalign/ has a row, and each module directly in a package (not in a
    family's folder, not a package's config.py, which the config/ row covers as a kind) is
    named in some row."""
    rows = package_rows()
    described = {package for packages, _ in rows for package in packages}
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert packages <= described, sorted(packages - described)
    covered = {
        hit
        for packages_of_row, description in rows
        for path, _ in named(description)
        for hit in (resolve(p, path) for p in packages_of_row)
        if hit is not None
    }
    config_row = next(description for packages_of_row, description in rows if packages_of_row == ["config"])
    assert "each package's `<package>/config.py`" in config_row
    unnamed = []
    for package in sorted(described):
        for module in sorted((PACKAGE / package if package else PACKAGE).glob("*.py")):
            if module.name not in ("__init__.py", "config.py") and module not in covered:
                unnamed.append(str(module.relative_to(PACKAGE)))
    assert not unnamed, unnamed


def test_every_module_path_on_the_page_exists():
    text = DOC.read_text(encoding="utf-8")
    mentions = set(re.findall(r"(?<![\w./])((?:[a-z_]+/)+[a-z_]+\.py)(?::([A-Za-z_]\w*))?", text))
    assert len(mentions) > 30, mentions
    wrong = []
    for path, attr in sorted(mentions):
        module = PACKAGE / path if not path.startswith(("tests/", "benchmarks/")) else ROOT / path
        if not module.is_file():
            wrong.append(path)
        elif attr and not defines(module, attr):
            wrong.append(f"{path}:{attr}")
    assert not wrong, wrong


def test_every_module_opens_with_a_docstring():
    assert "Each module opens with a docstring" in section("3. Where each concept lives")
    bare = [rel for rel, tree in modules() if not ast.get_docstring(tree)]
    assert not bare, bare


def modules(exclude: tuple[str, ...] = ()) -> list[tuple[str, ast.Module]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if not rel.startswith(exclude):
            found.append((rel, ast.parse(path.read_text(encoding="utf-8"))))
    return found


TORCH_DISTRIBUTED_USERS = {
    # module: the torch.distributed submodules it may import, and why (docs/architecture.md §5)
    "training/distributed.py": None,  # the process groups, DDP/FSDP2 and every collective
    "placement/launch.py": ("torch.distributed.run", "torch.distributed.elastic"),  # starts torchrun's launcher
    "weights/sharded.py": ("torch.distributed.tensor",),  # writes into the DTensor shards distributed.py made
    "training/precision.py": ("torch.distributed.fsdp",),  # FSDP2's loss scaler (its all-reduce is torch's)
}


def test_only_training_distributed_touches_process_groups():
    """No module but those the doc names imports torch.distributed or reaches it as
    `torch.distributed.<name>`; runs/stopping.py is handed its all-reduce."""
    text = section("5. Distributed")
    assert "`training/distributed.py`, the only" in text
    offenders = []
    for rel, tree in modules():
        allowed = TORCH_DISTRIBUTED_USERS.get(rel, ())
        if allowed is None:
            continue
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                if name.startswith("torch.distributed") and not name.startswith(allowed):
                    offenders.append(f"{rel}:{node.lineno} imports {name}")
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "distributed"
                and isinstance(node.value.value, ast.Name)
                and node.value.value.id == "torch"
            ):
                offenders.append(f"{rel}:{node.lineno} calls torch.distributed.{node.attr}")
    assert not offenders, offenders
    for rel in TORCH_DISTRIBUTED_USERS:
        if rel != "training/distributed.py":
            assert f"`{rel}`" in text or rel.split("/")[-1] in text, f"§5 does not name {rel}"


def algorithm_option_reads(tree: ast.Module, owned: set[str]) -> list[int]:
    """Lines reading `<x>.algorithm.<option>` for an option an algorithm owns, or comparing
    `<x>.algorithm.name` with a literal."""
    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in owned
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "algorithm"
        ):
            lines.append(node.lineno)
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            is_name = any(
                isinstance(s, ast.Attribute)
                and s.attr == "name"
                and isinstance(s.value, ast.Attribute)
                and s.value.attr == "algorithm"
                for s in sides
            )
            literal = any(
                isinstance(s, ast.Constant)
                and isinstance(s.value, str)
                or isinstance(s, (ast.Tuple, ast.List, ast.Set))
                for s in sides
            )
            if is_name and literal:
                lines.append(node.lineno)
    return lines


def test_nothing_outside_algorithms_asks_which_algorithm_runs():
    from genalign.algorithms.registry import registered_algorithms

    assert "nothing outside `algorithms/` asks for an algorithm by name" in section("4. Contracts")
    owned = {option for cls in registered_algorithms().values() for option in cls.owned_options}
    assert owned  # the check below looks for something
    offenders = [
        f"{rel}:{line}"
        for rel, tree in modules(exclude=("algorithms/",))
        for line in algorithm_option_reads(tree, owned)
    ]
    assert not offenders, offenders


def test_the_option_check_finds_a_read_by_name():
    """The scan above can fail: it finds both kinds of read."""
    tree = ast.parse("if cfg.algorithm.name == 'dpo':\n    x = cfg.algorithm.token_log_prob\n")
    assert algorithm_option_reads(tree, {"token_log_prob"}) == [1, 2]


@pytest.mark.parametrize(
    "engine", ["genalign.rollout.engine:LocalRolloutEngine", "genalign.rollout.ray_engine:RayRolloutEngine"]
)
def test_both_engines_have_the_whole_rollout_engine_protocol(engine):
    import importlib

    from genalign.rollout.engine import RolloutEngine

    module, name = engine.split(":")
    cls = getattr(importlib.import_module(module), name)
    members = {m for m in vars(RolloutEngine) if not m.startswith("_")} | set(RolloutEngine.__annotations__)
    assert {"generate", "generate_chunks", "needs_sync", "sync", "close"} <= members
    assert all(hasattr(cls, member) for member in members), sorted(m for m in members if not hasattr(cls, m))
