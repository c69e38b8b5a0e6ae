"""The tree's shape, checked: no import cycle between Relay's modules, and no source module
over 400 lines (tests and migrations aside): a module that grows past it is taken apart by
what it holds (docs/architecture.md says where each concern lives)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 400


def _modules() -> dict[str, Path]:
    """Every first-party module by its dotted name (the libraries, the services, bench)."""
    found: dict[str, Path] = {}
    for source in [*ROOT.glob("libs/*/src"), *ROOT.glob("services/*/src"), ROOT]:
        files = source.rglob("*.py") if source != ROOT else (ROOT / "bench").rglob("*.py")
        for path in files:
            parts = list(path.relative_to(source).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The first-party modules ``path`` imports, at run time (wherever the import statement
    is: a function's own imports count; those under ``if TYPE_CHECKING`` do not)."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if submodule in modules:
                    found.add(submodule)
                elif node.module in modules:
                    found.add(node.module)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_through_others() -> None:
    modules = _modules()
    graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
    assert _cycles(graph) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_source_module_is_over_400_lines() -> None:
    too_long = {}
    for path in _modules().values():
        relative = path.relative_to(ROOT).as_posix()
        if "/migrations/" in relative:
            continue
        lines = len(path.read_text().splitlines())
        if lines > LIMIT:
            too_long[relative] = lines
    assert too_long == {}, f"over {LIMIT} lines: take them apart by what they hold"
