"""The library apart from the workflow layer (issue 35): importing a library module, in a fresh
interpreter, loads neither pandas nor a workflow module (plans, settings, config, tables, figures,
claims, the papers' numbers, the command line, jobs, code identity, the cluster, the study modules);
and the package's module-level imports have no cycle.

Not covered: ``intertwine.dissection`` (its summaries are pandas tables), ``intertwine.compare``
(``compare_models`` returns pandas tables)."""

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "intertwine"

LIBRARY = (
    "intertwine.measures",
    "intertwine.kernels",
    "intertwine.models",
    "intertwine.data",
    "intertwine.groups",
    "intertwine.stitching",
    "intertwine.training",
    "intertwine.pullback",
    "intertwine.network_alignment",
    "intertwine.mode_connectivity",
    "intertwine.rotation",
    "intertwine.symmetry",
    "intertwine.kernels.deq_regression",
    "intertwine.attribution",
)
WORKFLOW = tuple(
    f"intertwine.{name}"
    for name in (
        "plan",
        "settings",
        "config",
        "tables",
        "figures",
        "claims",
        "paper",
        "cli",
        "jobs",
        "code_identity",
        "cluster",
        "gated",
        "pullback_study",
        "symmetry_study",
        "deqntk",
    )
)
OPTIONAL = {"intertwine.attribution": ("captum", "zennit")}


def test_library_modules_import_no_workflow():
    """One fresh interpreter imports the library modules in turn; each module is charged with the
    pandas and workflow modules its import loaded (a module loaded by an earlier one is charged
    to that one, so the first offender is named)."""
    present = [m for m in LIBRARY if all(importlib.util.find_spec(o) for o in OPTIONAL.get(m, ()))]
    assert len(present) >= len(LIBRARY) - len(OPTIONAL)
    code = (
        "import importlib, json, sys\n"
        f"workflow = {WORKFLOW!r}\n"
        "def loaded():\n"
        "    return {m for m in sys.modules if m.split('.')[0] == 'pandas'\n"
        "            or any(m == w or m.startswith(w + '.') for w in workflow)}\n"
        "charged = {}\n"
        f"for module in {present!r}:\n"
        "    before = loaded()\n"
        "    importlib.import_module(module)\n"
        "    charged[module] = sorted(loaded() - before)\n"
        "print(json.dumps(charged))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    charged = {module: found for module, found in json.loads(out.stdout).items() if found}
    assert not charged, f"library modules load workflow modules or pandas: {charged}"


def _module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level(body: list[ast.stmt]):
    """The statements run on import: the module body, into top-level if/try/with blocks (not an
    ``if TYPE_CHECKING:`` block), not into functions or classes' methods."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            if not _type_checking(node):
                yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                yield from _top_level(block)
        elif isinstance(node, (ast.With, ast.ClassDef)):
            yield from _top_level(node.body)


def module_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """{module: the package's modules it imports at module level}. ``from a import b`` counts as an
    edge to ``a.b`` where that is a module, else to ``a``; importing ``a.b`` also runs ``a``."""
    files = {_module_name(p, package): p for p in package.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        anchor = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in _top_level(ast.parse(path.read_text()).body):
            if isinstance(node, ast.Import):
                edges |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = anchor
                    for _ in range(node.level - 1):
                        up = up.rpartition(".")[0]
                    base = f"{up}.{base}" if base else up
                for alias in node.names:
                    edges.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base)
        graph[name] = {m for m in edges if m in files and m != name and not name.startswith(m + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[str]:
    state, found = {}, []

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                found.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    return found


def test_no_module_level_import_cycle():
    graph = module_graph()
    assert "intertwine.kernels.members" in graph["intertwine.kernels"]  # the graph is read
    found = cycles(graph)
    assert not found, "module-level import cycles:\n" + "\n".join(found)


def test_the_module_level_check_sees_a_cycle(tmp_path):
    fake = tmp_path / "intertwine"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "a.py").write_text("from intertwine import b\n")
    (fake / "b.py").write_text("try:\n    from .a import f\nexcept ImportError:\n    pass\n")
    (fake / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from intertwine import a\n"
    )
    (fake / "d.py").write_text("def f():\n    from intertwine import c\n")
    graph = module_graph(fake)
    assert graph["intertwine.c"] == set() and graph["intertwine.d"] == set()
    assert cycles(graph) == ["intertwine.a -> intertwine.b -> intertwine.a"]
