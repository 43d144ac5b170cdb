"""Function-local imports of genalign's own modules carry their reason.

An import of a genalign module belongs at the top of the file, where the reader sees what the
module depends on. One written inside a function must say why on its first line, with a
trailing `# lazy: ...` comment: the CLI's start-up (`genalign --help` imports no torch), the
package's `__init__` (`import genalign` stays light), a heavy optional library imported only
when it is used. The files are parsed with `ast` (nothing is imported); the scripts shipped as
package data (genalign/datasets/) are scanned too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import genalign

PACKAGE_ROOT = Path(genalign.__file__).resolve().parent
MARK = "# lazy:"


def _own_module(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "genalign"
    return any(alias.name.split(".")[0] == "genalign" for alias in node.names)


def unmarked_local_imports(path: Path, root: Path) -> list[str]:
    """`file:line` of each import of a genalign module inside a function whose first line has
    no trailing `# lazy:` reason."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    found: list[str] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)) and _own_module(child):
                line = lines[child.lineno - 1]  # an import line holds no string, so the mark is its comment
                if MARK not in line:
                    found.append(f"{path.relative_to(root).as_posix()}:{child.lineno}: {line.strip()}")
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(source, filename=str(path)), False)
    return found


def test_every_function_local_import_of_our_modules_says_why():
    found = [
        problem for path in sorted(PACKAGE_ROOT.rglob("*.py")) for problem in unmarked_local_imports(path, PACKAGE_ROOT)
    ]
    assert not found, (
        "function-local imports of genalign modules without a reason: move each to the top of the "
        "file, or end its line with `# lazy: <why>` (CLI start-up, a heavy optional library):\n" + "\n".join(found)
    )


def test_the_scan_finds_an_unmarked_import_and_accepts_a_marked_one(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from genalign.config.errors import UserError\n"  # top level: not local
        "def f():\n"
        "    from genalign.models.spec import family_spec\n"  # line 3: unmarked
        "    import json\n"  # not ours
        "    from genalign.hub import HUB_ID  # lazy: a reason\n"
        "    from . import sibling  # a comment, but no reason\n"  # line 6: relative, unmarked
        "class C:\n"
        "    def method(self):\n"
        "        import genalign.version\n"  # line 9: in a method
        "        x = 1  # lazy: on another line does not count\n"
        "    async def run(self):\n"
        "        from genalign.hub import (  # lazy: on the first line of a long import\n"
        "            HUB_ID,\n"
        "        )\n"
    )
    found = unmarked_local_imports(probe, tmp_path)
    assert [entry.split(": ")[0] for entry in found] == ["probe.py:3", "probe.py:6", "probe.py:9"]
