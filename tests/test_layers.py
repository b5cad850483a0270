"""The allowed import directions of ARCHITECTURE.md, read from the code's imports (ast).

What counts as an import: every ``import``/``from … import`` statement of a module, at
its top and inside functions alike (a function-level import is a dependency all the
same). For circles, imports under ``if TYPE_CHECKING:`` count too: a circle through
type hints is still a tangle for the reader (the manager and its threads were one).
For the layers, they do not: a module may name a type of any layer in an annotation
(the fetcher's ``CrawlSettings``), since that import never runs. An import names a
module, not its parent packages: importing ``rccrawler.web.urls`` is an edge to that
module, not to ``rccrawler`` (the public API).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core values", ("rccrawler.exceptions", "rccrawler.records", "rccrawler.loading")),
    ("web", ("rccrawler.web",)),
    ("rules and settings", ("rccrawler.policy", "rccrawler.config")),
    ("storage", ("rccrawler.data",)),
    (
        "the crawl's parts",
        (
            "rccrawler.context",
            "rccrawler.state",
            "rccrawler.memory",
            "rccrawler.cpus",
            "rccrawler.workers",
            "rccrawler.finisher",
            "rccrawler.unloaders",
            "rccrawler.threads",
        ),
    ),
    ("lifecycle", ("rccrawler.manager",)),
    ("ui", ("rccrawler.ui",)),
    ("public API", ("rccrawler",)),
    ("commands", ("rccrawler.commands", "rccrawler.demo")),
    ("entry point", ("rccrawler.__main__",)),
)
"""Bottom to top: a module may import its own layer and the layers below it, never one
above (ARCHITECTURE.md, "Allowed imports")."""


@dataclass(frozen=True)
class Import:
    module: str
    """The importing module (``rccrawler.threads.base``)."""
    target: str
    """The imported module, or ``module.name`` for ``from module import name``."""
    names: tuple[str, ...]
    """The names of a ``from`` import (empty for ``import x``)."""
    line: int


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def python_files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


@functools.cache
def tree_of(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_nodes(tree: ast.AST, *, type_checking: bool = False) -> Iterator[ast.AST]:
    """Every node of ``tree``, without the bodies of ``if TYPE_CHECKING:`` unless
    ``type_checking``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        yield node
        if not type_checking and isinstance(node, ast.If) and is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def imports_of(
    path: Path, module: str | None = None, *, type_checking: bool = False
) -> list[Import]:
    """The imports of the file at ``path`` (module name: from its place in the tree), with
    those under ``if TYPE_CHECKING:`` when ``type_checking``."""
    module = module or module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in runtime_nodes(tree_of(path), type_checking=type_checking):
        if isinstance(node, ast.Import):
            found += [Import(module, alias.name, (), node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = tuple(alias.name for alias in node.names)
            found.append(Import(module, base, names, node.lineno))
    return found


def rccrawler_modules() -> set[str]:
    return {module_name(path) for path in python_files("rccrawler")}


def resolve(target: str, names: tuple[str, ...], modules: set[str]) -> set[str]:
    """The rccrawler modules an import loads: ``from rccrawler.web import urls`` loads
    ``rccrawler.web.urls``, ``from rccrawler.web.urls import host_of`` loads the module."""
    loaded = {f"{target}.{name}" for name in names if f"{target}.{name}" in modules}
    if target in modules and (not names or len(loaded) < len(names)):
        loaded.add(target)
    return loaded


def import_graph(*, type_checking: bool = False) -> dict[str, set[str]]:
    """rccrawler module → the rccrawler modules it imports."""
    modules = rccrawler_modules()
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for path in python_files("rccrawler"):
        for imp in imports_of(path, type_checking=type_checking):
            graph[imp.module] |= resolve(imp.target, imp.names, modules) - {imp.module}
    return graph


def layer_of(module: str) -> int:
    best, index = "", -1
    for i, (_name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
                best, index = prefix, i
    return index


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


# -- the rules ---------------------------------------------------------------------


def test_every_rccrawler_module_has_a_layer():
    assert [m for m in sorted(rccrawler_modules()) if layer_of(m) < 0] == []


def test_no_import_circle_in_rccrawler():
    assert circles(import_graph(type_checking=True)) == []


def test_imports_go_down_the_layers_only():
    upward = [
        f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for module, targets in sorted(import_graph().items())
        for target in sorted(targets)
        if layer_of(target) > layer_of(module)
    ]
    assert upward == []


def test_rccrawler_imports_no_plugin():
    found = [
        f"{imp.module}:{imp.line} imports {imp.target}"
        for path in python_files("rccrawler")
        for imp in imports_of(path)
        if imp.target == "plugins" or imp.target.startswith("plugins.")
    ]
    assert found == []


def test_storage_imports_no_thread_and_no_ui():
    graph = import_graph()
    found = [
        f"{module} imports {target}"
        for module, targets in sorted(graph.items())
        if module.startswith("rccrawler.data")
        for target in sorted(targets)
        if target.startswith(("rccrawler.threads", "rccrawler.ui"))
    ]
    assert found == []


def private_names_of_rccrawler() -> set[str]:
    """Every ``_name`` rccrawler defines: functions, classes, methods, attributes."""
    names = set()
    for path in python_files("rccrawler"):
        for node in ast.walk(tree_of(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def task_files() -> list[Path]:
    """The code written the way a user's task is: the plugins and the tests' own tasks."""
    return [*python_files("plugins"), ROOT / "tests" / "taskplugins.py"]


def private_uses(path: Path, private: set[str]) -> list[str]:
    """Where the file imports a ``_name`` of rccrawler or reads one as an attribute: on
    any object, or on ``self``/``cls`` when the file does not define the name itself
    (then it comes from an rccrawler base class)."""
    tree = tree_of(path)
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    own = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
    } | {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rccrawler"):
            parts = [*(node.module or "").split("."), *(a.name for a in node.names)]
            found += [f"{where}:{node.lineno} imports {p}" for p in parts if p.startswith("_")]
        elif isinstance(node, ast.Import):
            found += [
                f"{where}:{node.lineno} imports {alias.name}"
                for alias in node.names
                if alias.name.startswith("rccrawler")
                and any(part.startswith("_") for part in alias.name.split("."))
            ]
        elif isinstance(node, ast.Attribute) and node.attr in private:
            on_self = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if not (on_self and node.attr in own):
                found.append(f"{where}:{node.lineno} uses .{node.attr}")
    return found


def test_plugins_use_no_private_name_of_rccrawler():
    private = private_names_of_rccrawler()
    assert "_resolve" in private  # the scan sees rccrawler's private names
    assert [use for path in task_files() for use in private_uses(path, private)] == []


# -- the checks check ----------------------------------------------------------------


def test_the_rules_catch_what_they_forbid(tmp_path):
    """Each rule fails on a sample of what it forbids (so a green run means something)."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert layer_of("rccrawler.data.sql") < layer_of("rccrawler.threads.base")
    assert layer_of("rccrawler.web.urls") < layer_of("rccrawler.config")
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from typing import TYPE_CHECKING\n"
        "from rccrawler.data.sqlite import _ROW\n"
        "if TYPE_CHECKING:\n"
        "    import rccrawler.manager\n"
        "def f(data):\n"
        "    import rccrawler.threads.base\n"
        "    return data._resolve\n"
    )
    found = private_uses(sample, {"_resolve"})
    assert [use.split(" ", 1)[1] for use in found] == ["imports _ROW", "uses ._resolve"]
    targets = [imp.target for imp in imports_of(sample, "rccrawler.sample")]
    assert "rccrawler.threads.base" in targets and "rccrawler.manager" not in targets
    every = [imp.target for imp in imports_of(sample, "rccrawler.sample", type_checking=True)]
    assert "rccrawler.manager" in every
