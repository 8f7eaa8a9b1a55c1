"""The package's layout: no import cycle (imports inside functions included), the library packages
apart from the workflow layer (they import no pandas, plotting or workflow module: only each
other), and the deprecated module names still working (issue 35)."""

import ast
import importlib.util
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "intertwine"

#: Library packages: tensors and modules in, numbers out. They import neither pandas nor the
#: workflow layer (plans, jobs, tables, claims, the papers' numbers) nor plotting.
LIBRARY = (
    "intertwine.measures",
    "intertwine.kernels",
    "intertwine.models",
    "intertwine.data",
    "intertwine.groups",
    "intertwine.birkhoff",
    "intertwine.geodesics",
    "intertwine.symmetry",
    "intertwine.stitching",
    "intertwine.stitch_methods",
    "intertwine.training",
    "intertwine.training_steps",
    "intertwine.packed_training",
    "intertwine.pullback",
    "intertwine.rotation",
    "intertwine.dissection_iou",
    "intertwine.network_alignment",
    "intertwine.mode_connectivity",
    "intertwine.attribution",
    "intertwine.utils",
    "intertwine._memory",
)
FORBIDDEN = ("pandas", "pyarrow", "matplotlib", "snakemake")
#: Third-party packages an optional adapter's own dependencies bring (Captum imports matplotlib).
ALLOWED = {"intertwine.attribution": ("matplotlib",)}
OPTIONAL = {"intertwine.attribution": ("captum", "zennit")}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports anywhere (top level or inside functions)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in out if m in modules and m != name}


def test_no_import_cycle():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_cycle_check_sees_a_cycle(tmp_path, monkeypatch):
    # The check above would pass on a graph it cannot read: it must find a planted cycle.
    fake = tmp_path / "intertwine"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "a.py").write_text("def f():\n    from intertwine import b\n")
    (fake / "b.py").write_text("from intertwine.a import f\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    with pytest.raises(AssertionError, match="intertwine.a -> intertwine.b -> intertwine.a"):
        test_no_import_cycle()


def test_library_imports_no_workflow():
    """One fresh interpreter imports the library packages in turn; each is charged with the
    forbidden packages and non-library modules of the package its import loaded (what an earlier
    one loaded is charged to that one, so the first offender is named)."""
    present = [m for m in LIBRARY if all(importlib.util.find_spec(o) for o in OPTIONAL.get(m, ()))]
    assert len(present) >= len(LIBRARY) - len(OPTIONAL)
    code = (
        "import importlib, json, sys\n"
        "def loaded(allowed):\n"
        "    return {m for m in sys.modules if (m.split('.')[0] in "
        f"{FORBIDDEN!r} and m.split('.')[0] not in allowed)\n"
        f"            or (m.startswith('intertwine.') and not m.startswith({LIBRARY!r}))}}\n"
        "charged = {}\n"
        f"for module in {present!r}:\n"
        f"    allowed = {ALLOWED!r}.get(module, ())\n"
        "    before = loaded(allowed)\n"
        "    importlib.import_module(module)\n"
        "    charged[module] = sorted(loaded(allowed) - before)\n"
        "print(json.dumps(charged))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    charged = {module: found for module, found in json.loads(out.stdout).items() if found}
    assert not charged, f"library packages load workflow modules or {FORBIDDEN}: {charged}"


def test_old_module_names_warn_and_reexport():
    import intertwine.compare
    import intertwine.measures
    from intertwine.measures import cca, layerwise, shape

    for name in ("intertwine.similarity", "intertwine.alignment"):
        sys.modules.pop(name, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import intertwine.alignment as alignment
        import intertwine.similarity as similarity
    messages = [str(w.message) for w in caught if w.category is DeprecationWarning]
    assert any("intertwine.similarity is deprecated" in m for m in messages)
    assert any("intertwine.alignment is deprecated" in m for m in messages)
    for name in intertwine.measures.__all__:
        assert getattr(similarity, name) is getattr(intertwine.measures, name)
    assert similarity.compare_models is intertwine.compare.compare_models
    assert alignment.svcca is cca.svcca and alignment.shape_metric is shape.shape_metric
    assert alignment.PREPARED is layerwise.PREPARED


def test_gated_moved_names_warn_and_reexport():
    import intertwine.gated as gated
    import intertwine.kernels as kernels

    from intertwine.workflow.stages.gated import study

    for name in gated._TO_KERNELS:
        with pytest.warns(DeprecationWarning, match=f"intertwine.gated.{name} is deprecated"):
            assert getattr(gated, name) is getattr(kernels, name)
    for name in ("kernel_checks", "study_table", "ensemble_table", "findings", "RECOVERS"):
        with pytest.warns(DeprecationWarning, match="from intertwine.workflow.stages.gated.study"):
            assert getattr(gated, name) is getattr(study, name)
    with pytest.raises(AttributeError):
        gated.no_such_name  # noqa: B018


def sizes(text: str) -> tuple[int, dict[str, int]]:
    """A module's lines and each function's (by qualified line), every line counted: docstrings
    too, so a public function's Parameters/Returns sections stay short."""
    functions = {
        f"{node.name} (line {node.lineno})": node.end_lineno - node.lineno + 1
        for node in ast.walk(ast.parse(text))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    return len(text.splitlines()), functions


def test_no_module_over_600_lines_nor_function_over_80():
    """Issue 35: every module of the package (library and workflow) is at most 600 lines and every
    function at most 80, docstrings counted. (stitching, pullback and symmetry were modules of
    832, 824 and 671 lines, claims.py 1,358, Plan.errors 279, generate_shapes 205.)"""
    long_modules, long_functions = {}, {}
    for path in PACKAGE.rglob("*.py"):
        name = path.relative_to(PACKAGE).as_posix()
        lines, functions = sizes(path.read_text())
        if lines > 600:
            long_modules[name] = lines
        long_functions |= {f"{name}: {f}": n for f, n in functions.items() if n > 80}
    assert not long_modules, long_modules
    assert not long_functions, long_functions


def test_sizes_count_every_line():
    text = 'def f():\n    """One.\n\n    Two.\n    """\n    return 1\n'
    assert sizes(text) == (6, {"f (line 1)": 6})
    assert sizes("def g():\n" + "    x = 1\n" * 81)[1] == {"g (line 1)": 82}


def test_moved_symmetry_check_warns_and_reexports():
    import intertwine.symmetry as symmetry
    from intertwine.workflow.stages.symmetry import study

    for name in ("check_symmetry", "checked_group", "summarize"):
        with pytest.warns(DeprecationWarning, match=f"intertwine.symmetry.{name} is deprecated"):
            assert getattr(symmetry, name) is getattr(study, name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from intertwine.symmetry import act_on_weights  # noqa: F401  (the library warns for nothing)
    with pytest.raises(AttributeError):
        symmetry.no_such_name  # noqa: B018


@pytest.mark.parametrize(
    "old, homes",
    [
        ("symmetry_study", ["intertwine.workflow.stages.symmetry.study"]),
        ("pullback_study", ["intertwine.pullback.measurements", "intertwine.workflow.stages.pullback.study"]),
    ],
)
def test_old_study_modules_warn_and_reexport_where_the_code_went(old, homes):
    """Issue 35: a stage's study code lives in its folder, the pullbacks' measurements (tensors in,
    numbers out) in the library; the old modules warn and re-export every name defined there."""
    sys.modules.pop(f"intertwine.{old}", None)
    with pytest.warns(DeprecationWarning, match=f"intertwine.{old} is deprecated"):
        module = importlib.import_module(f"intertwine.{old}")
    for home in map(importlib.import_module, homes):
        defined = [
            name
            for name, value in vars(home).items()
            if not name.startswith("_") and getattr(value, "__module__", None) == home.__name__
        ]
        assert defined and all(getattr(module, name) is getattr(home, name) for name in defined)


def test_zoo_table_moved_to_the_zoo_stage_warns():
    import intertwine.zoo as zoo
    from intertwine.workflow.stages.zoo.study import zoo_table

    with pytest.warns(DeprecationWarning, match="intertwine.zoo.zoo_table is deprecated"):
        assert zoo.zoo_table is zoo_table


def test_old_deqntk_module_warns_and_reexports():
    import intertwine.workflow.stages.deqntk.job as jobs
    import intertwine.settings as settings
    from intertwine.kernels import deq_regression

    sys.modules.pop("intertwine.deqntk", None)
    with pytest.warns(DeprecationWarning, match="intertwine.deqntk is deprecated"):
        import intertwine.deqntk as deqntk
    for name in deqntk.__all__:
        home = next(m for m in (deq_regression, jobs, settings) if hasattr(m, name))
        assert getattr(deqntk, name) is getattr(home, name), name
    assert {"save_block", "load_block", "check_blocks"} <= set(deqntk.__all__)
    assert set(deq_regression.__all__) <= set(deqntk.__all__)


def test_old_figures_module_warns_and_finds_each_stages_figures():
    from intertwine.workflow import plotting
    from intertwine.workflow.stages.pullback import figures as pullback_figures

    sys.modules.pop("intertwine.figures", None)
    with pytest.warns(DeprecationWarning, match="intertwine.figures is deprecated"):
        import intertwine.figures as figures
    assert figures.pullback_grid is pullback_figures.pullback_grid
    assert figures.mean_ci is plotting.mean_ci and figures.save_figure is plotting.save_figure
    with pytest.raises(AttributeError):
        figures.no_such_figure  # noqa: B018


def test_every_stage_folder_is_registered_and_its_figures_stay_small():
    """The registry names every folder of workflow/stages (and nothing else); no stage's figures
    module reaches the 600 lines the one figures.py had passed three times over."""
    from intertwine.workflow import stages

    folders = {p.parent.name for p in (PACKAGE / "workflow" / "stages").glob("*/__init__.py")}
    assert folders == set(stages.STAGES)
    with_figures = stages.with_part("figures")
    assert {"zoo", "stitching", "pullback"} <= set(with_figures) and "symmetry" not in with_figures
    for stage in with_figures:
        lines = len(Path(stages.part(stage, "figures").__file__).read_text().splitlines())
        assert lines <= 600, (stage, lines)
    with pytest.raises(ValueError, match="unknown stage 'stiching': the stages are zoo"):
        stages.module_name("stiching", "figures")


def test_old_jobs_package_warns_and_finds_each_stages_jobs():
    from intertwine.workflow.job import Job
    from intertwine.workflow.stages.zoo import job as zoo_job

    for name in [m for m in sys.modules if m == "intertwine.jobs" or m.startswith("intertwine.jobs.")]:
        sys.modules.pop(name)
    with pytest.warns(DeprecationWarning, match="intertwine.jobs is deprecated"):
        import intertwine.jobs.zoo as old_zoo
    import intertwine.jobs as old

    assert old.Job is Job and old_zoo is zoo_job and old_zoo.train_member is zoo_job.train_member
