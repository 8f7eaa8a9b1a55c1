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

Two narrowings make a rerun as wide as the change, not as wide as the module:

- Methods. A class without bases (a plain class, a dataclass such as ``workflow.job.Job``) counts
  with its special methods (``__init__``, ...) and those of its methods whose name the code reached
  uses, as an attribute (``job.model(...)``) or a string (``getattr(job, "model")``), or its own
  body names (``count = property(_count)``); the rest are left out until something reached names
  them. A job that never asks its ``Job`` for a model
  does not run ``Job.model``, nor the model registry behind it. A class with bases keeps all its
  methods: its base (``nn.Module``: ``forward``) may call any of them by name.
- Architectures. ``code_identity(entries, architectures)`` is the identity of a job that builds
  zoo models of those architectures only (keys of ``REGISTRY``, the model registry): the
  registry's other entries are left out, and so is every definition in another architecture's
  module (``architecture_modules()``: the module of an entry's builder) that code outside those
  modules refers to (``kernels.members`` dispatching on ``Myrtle``), so editing Myrtle reruns the
  Myrtle members and what reads them, not a ResNet's jobs. An architecture's own code is followed
  wherever it leads (the CCT's ``_scaled`` helper lives in the ResNet module: the CCT has it).
  A model option that wraps an architecture in code of its own (``WRAPPERS``: ``gated``) counts
  the same way, as a name in ``architectures``: a plain Myrtle's jobs leave the gated networks'
  modules out. With ``architectures=None`` (a job not tied to one variant) everything counts.
"""

from __future__ import annotations

import ast
import copy
import functools
import hashlib
import json
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

from intertwine.utils import atomic_path

PACKAGE = "intertwine"
ROOT = Path(__file__).resolve().parents[1]  # the package: intertwine/
# The model registry (module, name): a mapping from an architecture's name (a spec's ``arch``) to
# its builder; the one place that names every architecture.
REGISTRY = ("intertwine.models", "ARCHITECTURES")
# The model options that wrap an architecture in code of their own, and that code's modules: a
# spec's ``gated`` makes a Myrtle, a plain stack or a ResNet a GatedNet or a GatedResNet (built on
# GatedNet's classes). Their modules count, like an architecture's, only for the jobs of the
# variants that set the option.
WRAPPERS = {"gated": frozenset({"intertwine.models.gated", "intertwine.models.gated_resnet"})}


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


def _is_method(node: ast.AST) -> bool:
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))


def _special(name: str) -> bool:
    """A special method (``__init__``, ``__post_init__``, ...): Python calls it, not a name in the code."""
    return name.startswith("__") and name.endswith("__")


def _class_with_methods(node: ast.ClassDef, methods: frozenset[str]) -> ast.ClassDef:
    """A copy of a class keeping of its methods those named ``methods``."""
    narrowed = copy.copy(node)
    narrowed.body = [sub for sub in node.body if not _is_method(sub) or sub.name in methods] or [ast.Pass()]
    return narrowed


def _registry_dict(node: ast.AST) -> ast.Dict:
    """The registry's mapping literal: the first dict in its definition whose keys are all strings."""
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Dict)
            and sub.keys
            and all(isinstance(key, ast.Constant) and isinstance(key.value, str) for key in sub.keys)
        ):
            return sub
    module, name = REGISTRY
    raise ValueError(f"code identity: {module}.{name} holds no mapping literal from architecture names")


def _registry_entries(node: ast.AST) -> dict[str, ast.AST]:
    """{architecture name: its entry's value} of the registry's definition."""
    mapping = _registry_dict(node)
    return {key.value: value for key, value in zip(mapping.keys, mapping.values)}


def _registry_with_entries(node: ast.AST, architectures: frozenset[str]) -> ast.AST:
    """A copy of the registry's definition keeping the entries of ``architectures``."""
    narrowed = copy.deepcopy(node)
    mapping = _registry_dict(narrowed)
    kept = [(key, value) for key, value in zip(mapping.keys, mapping.values) if key.value in architectures]
    mapping.keys, mapping.values = [key for key, _ in kept], [value for _, value in kept]
    return narrowed


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
        # class name -> its methods, for a top-level class without bases bound once (see the
        # module's docstring: its methods count as the code reached names them)
        self.methods: dict[str, dict[str, ast.AST]] = {
            node.name: {sub.name: sub for sub in node.body if _is_method(sub)}
            for node in tree.body
            if isinstance(node, ast.ClassDef)
            and not node.bases
            and not node.keywords
            and len(self.definitions[node.name]) == 1
        }
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
        self._attributes: dict[int, set[str]] = {}
        # narrowed copies of definitions (a class with some methods, the registry with some
        # entries), kept so that the caches above, keyed by id, stay valid for them
        self._views: dict[tuple[str, frozenset[str]], ast.AST] = {}

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

    def attributes(self, node: ast.AST) -> set[str]:
        """The attribute names a statement uses (``x.name``) and the strings it holds that could
        be one (``getattr(x, "name")``): the methods it may call."""
        if id(node) not in self._attributes:
            self._attributes[id(node)] = {
                sub.attr for sub in ast.walk(node) if isinstance(sub, ast.Attribute)
            } | {
                sub.value
                for sub in ast.walk(node)
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value.isidentifier()
            }
        return self._attributes[id(node)]

    def followed(self, name: str, architectures: frozenset[str] | None) -> list[ast.AST]:
        """What is followed when ``name`` is reached: a method (``"Class.method"``) of a class whose
        methods count one by one; such a class's decorators and statements other than methods;
        the registry's entries for ``architectures`` (None: all of it); else its definitions."""
        owner, _, method = name.partition(".")
        if method:
            return [self.methods[owner][method]]
        if name in self.methods:
            (node,) = self.definitions[name]
            return [*node.decorator_list, *(sub for sub in node.body if not _is_method(sub))]
        return self.hashed(name, (), architectures)

    def hashed(
        self, name: str, reached: Collection[str], architectures: frozenset[str] | None
    ) -> list[ast.AST]:
        """What is hashed of a definition: a class whose methods count one by one with the methods
        ``reached`` names (``"Class.method"``), the registry with the entries of ``architectures``
        (None: all), any other definition whole."""
        if name in self.methods:
            kept = frozenset(method for method in self.methods[name] if f"{name}.{method}" in reached)
            if kept == set(self.methods[name]):
                return self.definitions[name]
            return [self._view(name, kept, _class_with_methods)]
        if (self.name, name) == REGISTRY and architectures is not None:
            return [self._view(name, architectures, _registry_with_entries)]
        return self.definitions[name]

    def _view(self, name: str, kept: frozenset[str], narrow) -> ast.AST:
        if (name, kept) not in self._views:
            (node,) = self.definitions[name]
            self._views[(name, kept)] = narrow(node, kept)
        return self._views[(name, kept)]

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


def architecture_modules() -> dict[str, frozenset[str]]:
    """{architecture: the modules of the package its registry entry's builder comes from} (from the
    registry's source: ``"myrtle": Architecture(myrtle, ...)`` with ``from .myrtle import myrtle``
    gives ``intertwine.models.myrtle``)."""
    module, name = REGISTRY
    source = _load(module)
    (node,) = source.definitions[name]
    return {
        architecture: frozenset(found for found, _ in source.references(value) if found != module)
        for architecture, value in _registry_entries(node).items()
    }


def narrowed_modules() -> dict[str, frozenset[str]]:
    """{architecture or wrapper: its modules}: what a job that does not build it leaves out
    (``architecture_modules()`` and ``WRAPPERS``)."""
    return architecture_modules() | WRAPPERS


def reached(entries: tuple[str, ...], architectures: frozenset[str] | None = None) -> dict[str, set[str]]:
    """{module: the top-level definitions reached} from entry points
    'intertwine.workflow.stages.zoo.job' (the whole module) or
    'intertwine.workflow.stages.deqntk.job:deqntk_gram' (one definition and what it uses).
    A method of a class whose methods count one by one is named ``"Class.method"``. With
    ``architectures`` (registry keys), the code of a job building those architectures only (see
    the module's docstring)."""
    seen: dict[str, set[str]] = {}
    todo: list[tuple[str, str | None]] = []
    for entry in entries:
        module, _, name = entry.partition(":")
        if _module_file(module) is None:
            raise ValueError(f"code identity: {entry!r} names no module of the {PACKAGE} package")
        todo.append((module, name or None))
    left_out: frozenset[str] = frozenset()  # modules of the other architectures
    own: frozenset[str] = frozenset()  # modules of every architecture: their references all count
    if architectures is not None:
        modules = narrowed_modules()
        unknown = sorted(set(architectures) - set(modules))
        if unknown:
            raise ValueError(
                f"code identity: architecture(s) {unknown} are not in {'.'.join(REGISTRY)} "
                f"(known: {', '.join(modules)}); a zoo variant's arch must be one of them"
            )
        own = frozenset().union(*modules.values())
        left_out = own - frozenset().union(*(modules[name] for name in architectures))
    attributes: set[str] = set()  # the attribute names the code reached uses
    waiting: dict[str, list[tuple[str, str]]] = {}  # attribute -> methods not reached until it is used

    def follow(source: _Module, node: ast.AST) -> None:
        references = source.references(node)
        if left_out and source.name not in own:
            references = {(module, name) for module, name in references if module not in left_out}
        todo.extend(references)
        new = source.attributes(node) - attributes
        attributes.update(new)
        for attribute in new:
            todo.extend(waiting.pop(attribute, []))

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
                follow(source, statement)
        owner, _, method = (name or "").partition(".")
        if name is None:
            wanted = set(source.definitions) - names
        elif name in source.definitions or (method and method in source.methods.get(owner, {})):
            wanted = {name} - names
        elif name in source.imports:  # a name the module re-exports
            todo.append(source.imports[name])
            wanted = set()
        else:
            wanted = set()
        names |= wanted
        for definition in wanted:
            followed = source.followed(definition, architectures)
            for node in followed:
                follow(source, node)
            # a class body names its methods plainly (``count = property(_count)``)
            in_body = set().union(*(source.names(node) for node in followed))
            for method in source.methods.get(definition, ()):
                member = (module, f"{definition}.{method}")
                if _special(method) or method in attributes or method in in_body:
                    todo.append(member)
                else:
                    waiting.setdefault(method, []).append(member)
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


def code_identity(
    entries: list[str] | tuple[str, ...], architectures: list[str] | frozenset[str] | None = None
) -> str:
    """A 12-digit hash of the code the entry points run (see the module's docstring); with
    ``architectures``, of a job that builds models of those architectures only.

    The code, not where it lives: what is hashed is the (sorted) syntax trees reached, without the
    modules' names or the package paths their imports name, so moving a definition to another
    module (its callers importing it from there under the same name) changes no identity, and a
    reorganisation of the package reruns nothing."""
    architectures = None if architectures is None else frozenset(architectures)
    pieces = []
    for module, names in reached(tuple(entries), architectures).items():
        source = _load(module)
        imports = [s for s in source.statements if isinstance(s, (ast.Import, ast.ImportFrom))]
        code = [s for s in source.statements if s not in imports]
        code += [
            node
            for name in names
            if "." not in name  # a method: hashed within its class
            for node in source.hashed(name, names, architectures)
        ]
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


def variant_architectures(variants: Mapping[str, Mapping], variant: str) -> frozenset[str]:
    """The architectures a job on zoo variant ``variant`` (a key of ``zoo.variants``) builds: its
    spec's ``arch`` and the wrappers it sets (``WRAPPERS``: ``gated``), and those of the variant its
    gated feature network comes from (``gated.features_from``)."""
    spec = variants[variant]
    gated = spec.get("gated") or {}
    source = gated.get("features_from")
    own = frozenset({spec["arch"]}) | {option for option in WRAPPERS if spec.get(option)}
    return own | (variant_architectures(variants, source) if source else frozenset())


def factory_identity(variants: Mapping[str, Mapping], variant: str) -> str:
    """What a job on zoo variant ``variant`` adds to its code identity for the user's own code: for
    each ``custom`` architecture it builds (its own, its feature network's), ``+`` and a hash of the
    factory's source file, so that editing the file reruns its jobs; "" for the zoo's
    architectures (their code is the package's, in the identity already)."""
    from intertwine.models.factory import factory_source

    spec = variants[variant]
    gated = spec.get("gated") or {}
    source = gated.get("features_from")
    own = ""
    if spec.get("arch") == "custom":
        path = factory_source(spec["factory"])
        own = "+" + hashlib.sha256(path.read_bytes() if path else spec["factory"].encode()).hexdigest()[:12]
    return own + (factory_identity(variants, source) if source else "")


def architecture_key(stage: str, architectures: frozenset[str]) -> str:
    """The key of a stage's identity for jobs building ``architectures`` in ``code_identities``."""
    return f"{stage}[{'+'.join(sorted(architectures))}]"


def _builds_models(entries: list[str]) -> bool:
    """Whether the code of ``entries`` reaches the registry or an architecture's module: else its
    identity is the same for every architecture."""
    modules = set().union(*narrowed_modules().values())
    found = reached(tuple(entries))
    return bool(modules & set(found)) or REGISTRY[1] in found.get(REGISTRY[0], ())


KEPT_SOURCE_STATES = 4


def code_identities(
    entries: dict[str, list[str]],
    cache: str | Path,
    architecture_sets: Iterable[frozenset[str]] = (),
) -> dict[str, str]:
    """``code_identity`` of each stage's entries, and of each stage's jobs building each set of
    ``architecture_sets`` (``architecture_key(stage, architectures)``; for a stage whose code builds
    no model, its identity), kept in the folder ``cache``: a file named by the hash of the
    package's sources, of ``entries`` and of the sets, so it is read back only while none has
    changed. Snakemake parses the workflow for every dry run and every cluster job, and following
    the package's source for every stage took a few seconds each time."""
    architecture_sets = sorted({frozenset(architectures) for architectures in architecture_sets}, key=sorted)
    key = hashlib.sha256(
        json.dumps([entries, [sorted(a) for a in architecture_sets]], sort_keys=True).encode()
    )
    for path in sorted(ROOT.rglob("*.py")):
        key.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    cache = Path(cache)
    file = cache / f"code-identity-{key.hexdigest()[:16]}.json"
    try:
        return json.loads(file.read_text())
    except (OSError, ValueError):
        pass
    identities = {stage: code_identity(stage_entries) for stage, stage_entries in entries.items()}
    for stage, stage_entries in entries.items():
        builds_models = bool(architecture_sets) and _builds_models(stage_entries)
        for architectures in architecture_sets:
            identities[architecture_key(stage, architectures)] = (
                code_identity(stage_entries, architectures) if builds_models else identities[stage]
            )
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
