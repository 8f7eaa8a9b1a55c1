"""The identity of the code a job runs, for reruns: what changes it is what changes the job's result.

A stage names its entry points (a job module, or functions of one). From them the package's
source is followed statically, name by name: the top-level definitions (functions, classes,
assignments such as constants and registries) an entry refers to, those they refer to, across
modules through imports (also imports inside functions), and every other top-level statement of
a module reached (imports, code run on import). The
identity is a hash of those definitions' syntax trees without their docstrings: comments,
docstrings, formatting and definitions nothing reaches do not change it, so editing them reruns
nothing; editing a function a job calls, or anything it calls, reruns that job. Nor does where the
code lives: the modules' names and the package's own imports are not hashed (only the definitions
they bind, where they are defined), and each piece counts once (two modules' ``import torch``
are one), so moving code between modules, or splitting one in two, reruns nothing.

Static and conservative: a name counts as a reference wherever it appears in a definition (a
local variable of the same name over-includes, never under-includes). What it cannot see: code
reached by a string (``getattr(module, name)``: the package's code never does), and
what importing a module does beyond defining names (a registration as a side
effect: none in the package; the importing code uses the module's names, which are followed).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
from pathlib import Path

from intertwine.utils import atomic_path

PACKAGE = "intertwine"
ROOT = Path(__file__).resolve().parents[1]  # the package: intertwine/


@functools.cache
def _module_file(module: str) -> Path | None:
    """The source file of a module of the package, or None when ``module`` is not one."""
    if module != PACKAGE and not module.startswith(PACKAGE + "."):
        return None
    path = ROOT.joinpath(*module.split(".")[1:])
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(getattr(body[0], "value", None), ast.Constant)
            ):
                if isinstance(body[0].value.value, str):
                    node.body = body[1:] or [ast.Pass()]
    return tree


def _bound_names(node: ast.AST) -> list[str]:
    """The names a top-level statement defines: a def or class, or an assignment to plain names."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = [t.id for target in targets for t in ast.walk(target) if isinstance(t, ast.Name)]
        if all(
            isinstance(t, (ast.Name, ast.Tuple, ast.List, ast.Starred))
            for target in targets
            for t in [target]
        ):
            return names
    return []


class _Module:
    """One module of the package: its top-level definitions, other statements and imports."""

    def __init__(self, name: str, path: Path):
        self.name = name
        self.is_package = path.name == "__init__.py"
        tree = _strip_docstrings(ast.parse(path.read_text(), str(path)))
        # name -> the top-level statements that bind it (a def, a class, an assignment to a name)
        self.definitions: dict[str, list[ast.AST]] = {}
        self.statements: list[ast.AST] = []  # every other top-level statement: run on import
        for node in tree.body:
            for name in _bound_names(node):
                self.definitions.setdefault(name, []).append(node)
            if not _bound_names(node) and not isinstance(
                node, ast.Pass
            ):  # what a docstring-only module keeps
                self.statements.append(node)
        # local name -> (module, attribute or None for the module itself), from every import
        self.imports: dict[str, tuple[str, str | None]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.imports[alias.asname] = (alias.name, None)
                    else:
                        top = alias.name.split(".")[0]
                        self.imports[top] = (top, None)
            elif isinstance(node, ast.ImportFrom):
                base = self._absolute(node)
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    target = (submodule, None) if _module_file(submodule) else (base, alias.name)
                    self.imports[alias.asname or alias.name] = target
        _blank_package_paths(tree)  # from here on the tree is what is hashed
        self._dumps: dict[int, str] = {}
        self._names: dict[int, set[str]] = {}
        self._references: dict[int, set[tuple[str, str | None]]] = {}

    def dump(self, node: ast.AST) -> str:
        """A statement's hashed form (its syntax tree, the package paths of its imports blanked)."""
        if id(node) not in self._dumps:
            self._dumps[id(node)] = ast.dump(node)
        return self._dumps[id(node)]

    def names(self, node: ast.AST) -> set[str]:
        """The plain names a statement uses."""
        if id(node) not in self._names:
            self._names[id(node)] = {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name)}
        return self._names[id(node)]

    def _absolute(self, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        parts = self.name.split(".")
        package = parts if self.is_package else parts[:-1]
        base = package[: len(package) - node.level + 1]
        return ".".join(base + ([node.module] if node.module else []))

    def references(self, node: ast.AST) -> set[tuple[str, str | None]]:
        """The (module, name) pairs a piece of this module's code refers to; (module, None): all of it."""
        if id(node) not in self._references:  # every stage's identity asks again
            self._references[id(node)] = self._referenced(node)
        return self._references[id(node)]

    def _referenced(self, node: ast.AST) -> set[tuple[str, str | None]]:
        found: set[tuple[str, str | None]] = set()
        attribute_bases = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
                target = self.imports.get(sub.value.id)
                if target and target[1] is None and _module_file(target[0]):
                    attribute_bases.add(id(sub.value))
                    submodule = f"{target[0]}.{sub.attr}"
                    found.add((submodule, None) if _module_file(submodule) else (target[0], sub.attr))
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and id(sub) not in attribute_bases:
                if sub.id in self.definitions:
                    found.add((self.name, sub.id))
                elif sub.id in self.imports:
                    found.add(self.imports[sub.id])
        return {(module, name) for module, name in found if _module_file(module)}


@functools.cache
def _load(module: str) -> _Module:
    return _Module(module, _module_file(module))


def reached(entries: tuple[str, ...]) -> dict[str, set[str]]:
    """{module: the top-level definitions reached} from entry points
    'intertwine.workflow.stages.zoo.job' (the whole module) or
    'intertwine.workflow.stages.deqntk.job:deqntk_gram' (one definition and what it uses)."""
    seen: dict[str, set[str]] = {}
    todo: list[tuple[str, str | None]] = []
    for entry in entries:
        module, _, name = entry.partition(":")
        if _module_file(module) is None:
            raise ValueError(f"code identity: {entry!r} names no module of the {PACKAGE} package")
        todo.append((module, name or None))
    while todo:
        module, name = todo.pop()
        source = _load(module)
        first_visit = module not in seen
        names = seen.setdefault(module, set())
        if first_visit:
            # Importing a module runs its package's __init__ and its own top-level statements.
            parent = module.rpartition(".")[0]
            if parent:
                todo.append((parent, ""))
            for statement in source.statements:
                todo.extend(source.references(statement))
        if name is None:
            wanted = set(source.definitions) - names
        elif name in source.definitions:
            wanted = {name} - names
        elif name in source.imports:  # a name the module re-exports
            todo.append(source.imports[name])
            wanted = set()
        else:
            wanted = set()
        names |= wanted
        for definition in wanted:
            for node in source.definitions[definition]:
                todo.extend(source.references(node))
    return seen


def _imported_names(node: ast.Import | ast.ImportFrom) -> set[str]:
    """The local names an import statement binds."""
    return {alias.asname or alias.name.split(".")[0] for alias in node.names}


def _one_name_each(node: ast.Import | ast.ImportFrom) -> list[ast.Import | ast.ImportFrom]:
    """``node`` as one import statement per name it binds."""
    if isinstance(node, ast.Import):
        return [ast.Import(names=[alias]) for alias in node.names]
    return [ast.ImportFrom(module=node.module, names=[alias], level=node.level) for alias in node.names]


def _package_import(node: ast.Import | ast.ImportFrom) -> bool:
    """Whether ``node`` imports from the package itself (relative, ``intertwine...``, or already
    blanked by ``_blank_package_paths``)."""
    if isinstance(node, ast.ImportFrom):
        return node.module is None or bool(node.level or _module_file(node.module))
    return all(alias.name == "" or _module_file(alias.name) for alias in node.names)


def _blank_package_paths(tree: ast.AST) -> None:
    """Blank, in place, the module paths of the package's imports in ``tree``: such an import only
    binds names, whose definitions are hashed where they are defined."""
    for sub in ast.walk(tree):
        if isinstance(sub, ast.ImportFrom) and (sub.level or _module_file(sub.module or "")):
            sub.module, sub.level = None, 0
        elif isinstance(sub, ast.Import):
            for alias in sub.names:
                if _module_file(alias.name) and alias.asname:
                    alias.name = ""


def code_identity(entries: list[str] | tuple[str, ...]) -> str:
    """A 12-digit hash of the code the entry points run (see the module's docstring).

    The code, not where it lives: what is hashed is the (sorted) syntax trees reached, without the
    modules' names or the package paths their imports name, so moving a definition to another
    module (its callers importing it from there under the same name) changes no identity, and a
    reorganisation of the package reruns nothing."""
    pieces = []
    for module, names in reached(tuple(entries)).items():
        source = _load(module)
        imports = [s for s in source.statements if isinstance(s, (ast.Import, ast.ImportFrom))]
        code = [s for s in source.statements if s not in imports]
        code += [node for name in names for node in source.definitions[name]]
        used = set().union(*(source.names(node) for node in code))
        # A third-party import counts, name by name, where the code reached uses the name it binds
        # (a registry's importlib, an unused helper's are not this code; ``from typing import A, B``
        # is ``from typing import A`` and ``from typing import B``); the package's own imports only
        # bind names, whose definitions are followed and hashed where they live.
        pieces += [source.dump(node) for node in code]
        pieces += [
            ast.dump(one)
            for statement in imports
            if not _package_import(statement)
            for one in _one_name_each(statement)
            if _imported_names(one) & used
        ]
    digest = hashlib.sha256()
    # Each piece once: a module split in two imports torch twice, and the code is the same.
    for piece in sorted(set(pieces)):
        digest.update(piece.encode())
    return digest.hexdigest()[:12]


KEPT_SOURCE_STATES = 4


def code_identities(entries: dict[str, list[str]], cache: str | Path) -> dict[str, str]:
    """``code_identity`` of each stage's entries, kept in the folder ``cache``: a file named by the
    hash of the package's sources and of ``entries``, so it is read back only while neither has
    changed. Snakemake parses the workflow for every dry run and every cluster job, and following
    the package's source for every stage took a few seconds each time."""
    key = hashlib.sha256(json.dumps(entries, sort_keys=True).encode())
    for path in sorted(ROOT.rglob("*.py")):
        key.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    cache = Path(cache)
    file = cache / f"code-identity-{key.hexdigest()[:16]}.json"
    try:
        return json.loads(file.read_text())
    except (OSError, ValueError):
        pass
    identities = {stage: code_identity(stage_entries) for stage, stage_entries in entries.items()}
    try:
        cache.mkdir(parents=True, exist_ok=True)
        kept = sorted(cache.glob("code-identity-*.json"), key=lambda f: f.stat().st_mtime, reverse=True)
        for old in kept[KEPT_SOURCE_STATES - 1 :]:  # a few, for a checkout switched back and forth
            old.unlink(missing_ok=True)
        with atomic_path(file) as tmp:
            Path(tmp).write_text(json.dumps(identities, sort_keys=True))
    except OSError:
        pass  # a read-only working directory: computed again next time
    return identities
