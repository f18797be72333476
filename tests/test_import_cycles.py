"""No import circle among the product's modules: not across packages, not inside one, not through
an import inside a function, not under `if TYPE_CHECKING:` (CONTRIBUTING.md, "Layers").

import-linter's layers hold between the top-level packages; this test holds inside them. It
reads every module of the product packages with `ast` and counts every import statement
wherever it stands. `from package import name` is an edge to `package.name` when that is a
module, else to the package; importing a module does not count as importing its parent
packages (an `__init__` that re-exports its modules is not a circle).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

from tests.product import PRODUCT, ROOT


def module_files() -> dict[str, Path]:
    """Every module of the product packages by dotted name (a package by its `__init__`)."""
    found: dict[str, Path] = {}
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imported(module: str, path: Path, modules: Mapping[str, Path]) -> set[str]:
    """The product modules `module` imports, from any statement anywhere in its file."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            for alias in node.names:
                submodule = f"{base}.{alias.name}" if base else alias.name
                targets.add(submodule if submodule in modules else base)
    return {target for target in targets if target in modules and target != module}


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    base = ".".join(parts[: len(parts) - node.level + 1])
    return f"{base}.{node.module}" if node.module else base


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {module: imported(module, path, modules) for module, path in modules.items()}


def circles(graph: Mapping[str, set[str]]) -> list[frozenset[str]]:
    """The graph's strongly connected components of more than one module: the modules each
    reaching the other (a few hundred modules: a search from each is quick enough)."""
    reach = {module: reachable(graph, module) for module in graph}
    found: list[frozenset[str]] = []
    for module in sorted(graph):
        component = frozenset(m for m in reach[module] if module in reach[m]) | {module}
        if len(component) > 1 and component not in found:
            found.append(component)
    return found


def reachable(graph: Mapping[str, set[str]], start: str) -> set[str]:
    """The modules `start` imports, directly or not."""
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph[module] - seen)
    return seen


def a_path(graph: Mapping[str, set[str]], component: frozenset[str]) -> list[str]:
    """One circle through the component's first module, as the modules it passes."""
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target in sorted(graph[node] & component):
            if target == start:
                return [*paths[node], start]
            if target not in paths:
                paths[target] = [*paths[node], target]
                queue.append(target)
    return sorted(component)


def test_no_import_circle() -> None:
    """No product module reaches itself through imports."""
    graph = import_graph()
    new = circles(graph)
    assert not new, "import circles:\n" + "\n".join(
        " -> ".join(a_path(graph, component)) for component in new
    )


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    """Imports at the top, inside a function, under TYPE_CHECKING and relative are all edges, and
    a circle through them is found."""
    source = tmp_path / "a.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import p.top\n"
        "from . import sibling\n"
        "if TYPE_CHECKING:\n"
        "    from p.typed import T\n"
        "def f():\n"
        "    from p import late\n"
    )
    modules = dict.fromkeys(["p", "p.a", "p.top", "p.sibling", "p.typed", "p.late"], source)
    assert imported("p.a", source, modules) == {"p.top", "p.sibling", "p.typed", "p.late"}
    fake = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(fake) == [frozenset({"a", "b", "c"})]
    assert a_path(fake, frozenset({"a", "b", "c"})) == ["a", "b", "c", "a"]
