"""No import circle among the project's modules: the layers' packages, the functions, the local stack, the client,
chaos and bench.

Every import counts, wherever it is written: at the top, under ``TYPE_CHECKING``, or inside a function (a deferred
import is still a dependency, one a first request pays for). Importing ``a.b.c`` (or ``from a.b import c``) depends
on ``a.b.c`` and on the packages ``a`` and ``a.b`` whose ``__init__`` runs first, unless they are packages above the
importer itself, which run before it whatever it imports.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from tests.support import REPO_ROOT

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

# Where each top-level package (or module) lives: the directory that holds it, and its names there.
SOURCES = {
    "layers/chatstream": ("chatstream", "prune_botocore_data.py"),
    "layers/streaming-runtime": ("streaming_runtime",),
    "local": ("chatstream_local",),
    "client": ("chatstream_client",),
    ".": ("chaos", "bench", "functions"),
}


def project_modules() -> dict[str, Path]:
    """Every module of the project by its dotted name (a function's handler is ``functions.<name>.app``)."""
    modules: dict[str, Path] = {}
    for base, names in SOURCES.items():
        root = REPO_ROOT / base
        for name in names:
            path = root / name
            for file in [path] if path.is_file() else sorted(path.rglob("*.py")):
                parts = list(file.relative_to(root).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                modules[".".join(parts)] = file
    return modules


def imported_names(module: str, file: Path) -> Iterator[str]:
    """The dotted names ``file`` imports, anywhere in it; ``from x import y`` yields ``x`` and ``x.y`` (a name or a
    submodule: the caller keeps what is a module)."""
    package = module if file.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"), str(file))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            yield source
            yield from (f"{source}.{alias.name}" for alias in node.names)


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, file in modules.items():
        for imported in imported_names(name, file):
            parts = imported.split(".")
            for end in range(1, len(parts) + 1):  # the module and every package above it
                target = ".".join(parts[:end])
                # A package above the importer is initialized before the importer in any case: an edge to it says
                # nothing (a package's __init__ importing its own modules is no circle).
                if target in modules and target != name and not name.startswith(f"{target}."):
                    graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
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


def test_the_graph_sees_the_project_and_its_imports() -> None:
    # GIVEN the import graph of the project
    graph = import_graph()
    # THEN it holds every part of the project, and the imports written in each
    assert {"chatstream.relay.service", "streaming_runtime.bootstrap", "chatstream_local.stack"} <= graph.keys()
    assert {"chatstream_client.api", "chaos.run", "bench.run", "functions.relay.app"} <= graph.keys()
    assert "chatstream.relay.service" in graph["functions.relay.app"]  # deferred in the handler's init block
    assert "chatstream.relay" in graph["functions.relay.app"]  # the package, whose __init__ runs first
    assert "chatstream.table" in graph["chatstream.relay.exchange"]  # under TYPE_CHECKING


def test_circles_are_found_wherever_the_imports_are() -> None:
    # GIVEN a graph with a circle through three modules, and one without
    # THEN the circle is found, and only it
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_module_of_the_project_imports_itself_through_others() -> None:
    # GIVEN every import of every module, at its top, under TYPE_CHECKING or inside a function
    # THEN no module depends, through the others, on itself
    assert circles(import_graph()) == []
