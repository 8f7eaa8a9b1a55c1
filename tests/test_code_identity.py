"""The code identity that decides reruns (intertwine.workflow.code_identity), on a small package of its own."""

import re
import textwrap

import pytest

from intertwine.workflow import code_identity as ci

FILES = {
    "__init__.py": "VERSION = 1\n",
    "jobs/__init__.py": "",
    "jobs/train.py": """
        from intertwine import models
        from intertwine.loop import fit as run_fit

        def train_job(spec):
            return run_fit(models.build(spec))
    """,
    "jobs/probe.py": """
        import intertwine.models as m

        def probe_job(model):
            return m.activations(model)
    """,
    "loop.py": '''
        """The training loop."""
        STEPS = 10

        def fit(model):
            """Fit a model."""
            return _step(model) * STEPS

        def _step(model):
            return model  # one step
    ''',
    "models/__init__.py": """
        from .nets import Net

        ARCHS = {"net": Net}

        def build(spec):
            return ARCHS[spec]()

        def activations(model):
            return model
    """,
    "models/nets.py": """
        class Net:
            width = 4
    """,
}


@pytest.fixture
def package(tmp_path, monkeypatch):
    root = tmp_path / "intertwine"
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    monkeypatch.setattr(ci, "ROOT", root)
    for cached in (ci._module_file, ci._load):
        cached.cache_clear()
    yield root
    for cached in (ci._module_file, ci._load):
        cached.cache_clear()


def identity_after(package, path, old, new, entry="intertwine.jobs.train"):
    before = ci.code_identity([entry])
    file = package / path
    text = file.read_text()
    assert old in text
    file.write_text(text.replace(old, new))
    for cached in (ci._module_file, ci._load):
        cached.cache_clear()
    return before, ci.code_identity([entry])


def test_follows_names_through_imports_aliases_and_registries(package):
    reached = ci.reached(("intertwine.jobs.train",))
    assert reached["intertwine.loop"] == {"fit", "_step", "STEPS"}
    assert reached["intertwine.models"] == {"build", "ARCHS"}  # not activations
    assert reached["intertwine.models.nets"] == {"Net"}  # through the registry and the re-export
    assert "intertwine.jobs" in reached and "intertwine" in reached  # packages run on import


@pytest.mark.parametrize(
    "path, old, new, changes",
    [
        ("loop.py", "return model  # one step", "return model + 0", True),  # a function it calls
        ("loop.py", "STEPS = 10", "STEPS = 11", True),  # a constant it reads
        ("models/nets.py", "width = 4", "width = 5", True),  # a class reached through a registry
        ("loop.py", '"""Fit a model."""', '"""Fit a model, edited."""', False),  # a docstring
        ("loop.py", "# one step", "# one step, edited", False),  # a comment
        ("loop.py", "def _step", "\n\ndef _step", False),  # formatting
        ("models/__init__.py", "return model\n", "return model.eval()\n", False),  # activations: unused
        ("loop.py", "STEPS = 10\n", "STEPS = 10\nUNUSED = 1\n", False),  # a new name nothing reads
        ("loop.py", "STEPS = 10\n", "STEPS = 10\nprint(STEPS)\n", True),  # code run on import
        ("loop.py", "STEPS = 10\n", "import os\nSTEPS = 10\n", False),  # an import nothing reached uses
    ],
)
def test_identity_changes_with_the_code_a_job_runs_only(package, path, old, new, changes):
    before, after = identity_after(package, path, old, new)
    assert (before != after) == changes


def test_a_read_only_helper_is_part_of_the_job_that_uses_it(package):
    before, after = identity_after(
        package, "models/__init__.py", "return model\n", "return model.eval()\n", "intertwine.jobs.probe"
    )
    assert before != after


def test_an_unknown_entry_is_refused(package):
    with pytest.raises(ValueError, match="names no module of the intertwine package"):
        ci.code_identity(["intertwine.jobs.nothing"])


def identity_after_move(package, moves: dict[str, tuple[str, str]], entry="intertwine.jobs.train"):
    """The identity before and after ``moves``: {file: (old text, new text)}, a new file's old text
    empty, a removed file's new text empty."""
    before = ci.code_identity([entry])
    for path, (old, new) in moves.items():
        file = package / path
        if not new:
            file.unlink()
            continue
        text = file.read_text() if file.exists() else ""
        assert old in text
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text.replace(old, new) if old else new)
    for cached in (ci._module_file, ci._load):
        cached.cache_clear()
    return before, ci.code_identity([entry])


def test_moving_code_between_modules_changes_no_identity(package):
    """The training loop moved to a module of another package, the network class to another module
    (their importers following, under the same names): the same code, so nothing reruns."""
    loop = textwrap.dedent(FILES["loop.py"])
    before, after = identity_after_move(
        package,
        {
            "engine/__init__.py": ("", '"""A package of its own."""\n'),
            "engine/loop.py": ("", loop),
            "loop.py": (loop, ""),
            "jobs/train.py": ("from intertwine.loop import", "from intertwine.engine.loop import"),
            "models/layers.py": ("", "class Net:\n    width = 4\n"),
            "models/nets.py": ("class", ""),
            "models/__init__.py": ("from .nets import Net", "from .layers import Net"),
        },
    )
    assert ci.reached(("intertwine.jobs.train",))["intertwine.engine.loop"] == {"fit", "_step", "STEPS"}
    assert before == after


def test_splitting_a_module_that_imports_a_library_changes_no_identity(package):
    """A module split in two, both halves importing the same library (``import math`` twice where it
    was once, ``from math import floor, pi`` as two statements) and the first importing the second:
    the same code, so nothing reruns."""
    loop = textwrap.dedent(FILES["loop.py"])
    uses_math = "import math\nfrom math import floor, pi\n" + loop.replace(
        "return model  # one step", "return math.floor(model) + floor(pi)"
    )
    split = {
        "loop.py": (
            uses_math,
            uses_math.split("def _step")[0].replace(
                "import math\n", "import math\nfrom .steps import _step\n"
            ),
        ),
        "steps.py": (
            "",
            "import math\nfrom math import pi\nfrom math import floor\n\n\n"
            "def _step(model):\n    return math.floor(model) + floor(pi)\n",
        ),
    }
    identity_after_move(package, {"loop.py": (loop, uses_math)})
    before, after = identity_after_move(package, split)
    assert ci.reached(("intertwine.jobs.train",))["intertwine.steps"] == {"_step"}
    assert before == after


@pytest.mark.parametrize(
    "moves",
    [
        # moved, and changed on the way
        {
            "models/layers.py": ("", "class Net:\n    width = 5\n"),
            "models/__init__.py": ("from .nets import Net", "from .layers import Net"),
        },
        # the same local name bound to another definition
        {"jobs/train.py": ("import fit as run_fit", "import _step as run_fit")},
        # a third-party module under the same local name
        {"jobs/train.py": ("from intertwine import models", "import numpy as models")},
    ],
    ids=["moved and changed", "another definition", "another library"],
)
def test_a_move_that_changes_the_code_run_changes_the_identity(package, moves):
    before, after = identity_after_move(package, moves)
    assert before != after


def test_identities_are_kept_while_the_sources_stay_the_same(package, tmp_path, monkeypatch):
    entries = {"train": ["intertwine.jobs.train"], "probe": ["intertwine.jobs.probe"]}
    cache = tmp_path / "cache"
    identities = ci.code_identities(entries, cache)
    assert identities == {stage: ci.code_identity(e) for stage, e in entries.items()}
    assert len(list(cache.glob("code-identity-*.json"))) == 1

    def recomputed(entries):
        raise AssertionError("computed again although nothing changed")

    with monkeypatch.context() as patched:
        patched.setattr(ci, "code_identity", recomputed)
        assert ci.code_identities(entries, cache) == identities  # read back
    (package / "loop.py").write_text((package / "loop.py").read_text().replace("STEPS = 10", "STEPS = 11"))
    for cached in (ci._module_file, ci._load):
        cached.cache_clear()
    changed = ci.code_identities(entries, cache)
    assert changed["train"] != identities["train"] and changed["probe"] == identities["probe"]
    assert len(list(cache.glob("code-identity-*.json"))) == 2  # each source state's
    for steps in range(12, 12 + ci.KEPT_SOURCE_STATES):
        text = (package / "loop.py").read_text()
        (package / "loop.py").write_text(re.sub(r"STEPS = \d+", f"STEPS = {steps}", text))
        ci.code_identities(entries, cache)
    assert len(list(cache.glob("code-identity-*.json"))) == ci.KEPT_SOURCE_STATES  # the oldest go


# A package with a model registry (``ci.REGISTRY``), one module per architecture, a job context
# whose ``model`` method builds through the registry, and outside code dispatching on a class.
ZOO_FILES = {
    "__init__.py": "",
    "models/__init__.py": """
        from .myrtle import Myrtle, myrtle
        from .resnet import resnet
        from .cct import cct

        COMMON = {"width": 1}
        ARCHITECTURES = {
            "myrtle": (myrtle, {**COMMON, "pool": 2}),
            "resnet": (resnet, COMMON),
            "cct": (cct, COMMON),
        }

        def build(spec):
            builder, defaults = ARCHITECTURES[spec["arch"]]
            return builder(**defaults)
    """,
    "models/myrtle.py": """
        import torch

        class Myrtle(torch.nn.Module):
            def forward(self, x):
                return x * 2

        def myrtle(**options):
            return Myrtle()
    """,
    "models/resnet.py": """
        import torch

        def _scaled(width):
            return width * 4

        class ResNet(torch.nn.Module):
            def forward(self, x):
                return x + 1

        def resnet(width):
            return ResNet(_scaled(width))
    """,
    "models/cct.py": """
        from .resnet import _scaled

        def cct(width):
            return _scaled(width)
    """,
    "job.py": """
        from dataclasses import dataclass
        from intertwine.models import build

        @dataclass
        class Job:
            seed: int = 0

            def __post_init__(self):
                self.seed = int(self.seed)

            def split(self, name):
                return name * self.seed

            def model(self, spec):
                return build(spec)

            def stats(self):
                return self.seed

            def _count(self):
                return 1

            count = property(_count)
    """,
    "kernels.py": """
        from intertwine.models.myrtle import Myrtle

        def kernel(model):
            return 2 if isinstance(model, Myrtle) else 1
    """,
    "jobs.py": """
        from intertwine.job import Job
        from intertwine.kernels import kernel

        def train(job: Job, spec):
            return job.model(spec)

        def gram(job: Job):
            return job.split("train")

        def probe(job: Job, spec):
            return kernel(job.model(spec))

        def named(job: Job):
            return getattr(job, "stats")()
    """,
}


@pytest.fixture
def zoo_package(tmp_path, monkeypatch):
    root = tmp_path / "intertwine"
    for name, text in ZOO_FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    monkeypatch.setattr(ci, "ROOT", root)
    monkeypatch.setattr(ci, "REGISTRY", ("intertwine.models", "ARCHITECTURES"))
    for cached in (ci._module_file, ci._load):
        cached.cache_clear()
    yield root
    for cached in (ci._module_file, ci._load):
        cached.cache_clear()


def identities_after(package, path, old, new, cases):
    """{case: (before, after)} of ``ci.code_identity(*case)`` around one edit of ``path``."""
    before = {case: ci.code_identity(*case) for case in cases}
    file = package / path
    text = file.read_text()
    assert old in text
    file.write_text(text.replace(old, new))
    for cached in (ci._module_file, ci._load):
        cached.cache_clear()
    return {case: (before[case], ci.code_identity(*case)) for case in cases}


TRAIN = ("intertwine.jobs:train",)
PROBE = ("intertwine.jobs:probe",)
GRAM = ("intertwine.jobs:gram",)
CASES = {
    "myrtle": (TRAIN, frozenset({"myrtle"})),
    "resnet": (TRAIN, frozenset({"resnet"})),
    "cct": (TRAIN, frozenset({"cct"})),
    "every architecture": (TRAIN, None),
    "probe myrtle": (PROBE, frozenset({"myrtle"})),
    "probe resnet": (PROBE, frozenset({"resnet"})),
    "gram": (GRAM, None),
}


@pytest.mark.parametrize(
    "path, old, new, changed",
    [
        # an architecture's forward: its own jobs, and a job not tied to one architecture
        (
            "models/myrtle.py",
            "return x * 2",
            "x = x + 0\n        return x * 2",
            {"myrtle", "every architecture", "probe myrtle"},
        ),
        (
            "models/resnet.py",
            "return x + 1",
            "return 1 + x",
            {"resnet", "every architecture", "probe resnet"},
        ),
        # a helper of the ResNet module the CCT uses too
        (
            "models/resnet.py",
            "return width * 4",
            "return width * 5",
            {"resnet", "cct", "every architecture", "probe resnet"},
        ),
        # one architecture's registry entry; what every entry shares; the builder of all
        ("models/__init__.py", '"pool": 2', '"pool": 3', {"myrtle", "every architecture", "probe myrtle"}),
        (
            "models/__init__.py",
            'COMMON = {"width": 1}',
            'COMMON = {"width": 2}',
            {"myrtle", "resnet", "cct", "every architecture", "probe myrtle", "probe resnet"},
        ),
        (
            "models/__init__.py",
            "return builder(**defaults)",
            "return builder(**dict(defaults))",
            {"myrtle", "resnet", "cct", "every architecture", "probe myrtle", "probe resnet"},
        ),
        # outside code dispatching on Myrtle: the Myrtle jobs that run it
        ("kernels.py", "else 1", "else 3", {"probe myrtle", "probe resnet"}),
        # the job context: a method only the jobs that call it
        ("job.py", "return build(spec)", "return build(dict(spec))", set(CASES) - {"gram"}),
        ("job.py", "return name * self.seed", "return self.seed * name", {"gram"}),
        ("job.py", "self.seed = int(self.seed)", "self.seed = int(self.seed) + 0", set(CASES)),  # special
    ],
    ids=[
        "Myrtle.forward",
        "ResNet.forward",
        "shared helper",
        "registry entry",
        "registry common",
        "build",
        "dispatch",
        "Job.model",
        "Job.split",
        "Job.__post_init__",
    ],
)
def test_an_edit_changes_the_identities_of_the_architectures_and_methods_it_touches(
    zoo_package, path, old, new, changed
):
    identities = identities_after(zoo_package, path, old, new, list(CASES.values()))
    assert {name for name, case in CASES.items() if identities[case][0] != identities[case][1]} == changed


def test_methods_count_as_the_code_names_them(zoo_package):
    # the special methods, those the job calls, and one the class body names (a property's getter)
    train = ci.reached(TRAIN)["intertwine.job"]
    assert train == {"Job", "Job.__post_init__", "Job._count", "Job.model"}
    assert ci.reached(GRAM)["intertwine.job"] == {"Job", "Job.__post_init__", "Job._count", "Job.split"}
    assert "intertwine.models" not in ci.reached(GRAM)  # the model registry is Job.model's
    assert "Job.stats" in ci.reached(("intertwine.jobs:named",))["intertwine.job"]  # getattr's string
    # a class with bases keeps every method (torch calls forward by name)
    assert ci.reached(TRAIN, frozenset({"myrtle"}))["intertwine.models.myrtle"] == {"Myrtle", "myrtle"}


def test_a_job_on_one_architecture_reaches_its_modules_only(zoo_package):
    assert set(ci.architecture_modules()) == {"myrtle", "resnet", "cct"}
    assert ci.architecture_modules()["cct"] == {"intertwine.models.cct"}
    models = {m for m in ci.reached(PROBE, frozenset({"resnet"})) if m.startswith("intertwine.models.")}
    assert models == {"intertwine.models.resnet"}  # not Myrtle, which the kernel names
    cct = ci.reached(TRAIN, frozenset({"cct"}))
    assert cct["intertwine.models.resnet"] == {"_scaled"}  # the CCT's own code, where it lives
    with pytest.raises(ValueError, match=r"\['vgg'\] are not in intertwine.models.ARCHITECTURES"):
        ci.code_identity(TRAIN, {"vgg"})


def test_a_variants_architectures_include_its_feature_networks():
    variants = {
        "plain": {"arch": "c4gap"},
        "fl": {"arch": "c4gap", "gated": {"family": "dgn", "features_from": "other"}},
        "other": {"arch": "myrtle", "gated": None},
    }
    assert ci.variant_architectures(variants, "plain") == {"c4gap"}
    assert ci.variant_architectures(variants, "fl") == {"c4gap", "gated", "myrtle"}
    assert ci.variant_architectures(variants, "other") == {"myrtle"}  # gated: null is a plain network


def test_identities_per_architecture_are_kept_with_the_stages(zoo_package, tmp_path):
    entries = {"train": list(TRAIN), "gram": list(GRAM)}
    sets = [frozenset({"myrtle"}), frozenset({"cct"})]
    identities = ci.code_identities(entries, tmp_path / "cache", sets)
    for architectures in sets:
        key = ci.architecture_key("train", architectures)
        assert identities[key] == ci.code_identity(TRAIN, architectures)
        assert identities[ci.architecture_key("gram", architectures)] == identities["gram"]  # no model
    assert identities["train"] == ci.code_identity(TRAIN)
    assert ci.code_identities(entries, tmp_path / "cache", sets) == identities  # read back


def edited_method(root, module: str, qualified: str, statement: str = "_edited_by_a_test = 1") -> None:
    """Put ``statement`` first in the body of ``Class.method`` (or a function) of ``module``, after
    its docstring: a behaviour-preserving edit of its code."""
    import ast

    path = root / module
    lines = path.read_text().splitlines(keepends=True)
    node = ast.parse(path.read_text())
    for name in qualified.split("."):
        node = next(n for n in node.body if getattr(n, "name", None) == name)
    first = node.body[1] if ast.get_docstring(node) else node.body[0]
    lines.insert(first.lineno - 1, f"{' ' * first.col_offset}{statement}\n")
    path.write_text("".join(lines))


@pytest.fixture
def package_copy(tmp_path, monkeypatch):
    """A copy of the real package as the one code_identity reads."""
    import shutil

    root = tmp_path / "intertwine"
    shutil.copytree(ci.ROOT, root, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(ci, "ROOT", root)
    for cached in (ci._module_file, ci._load):
        cached.cache_clear()
    yield root
    for cached in (ci._module_file, ci._load):
        cached.cache_clear()


ZOO_JOB = ("intertwine.workflow.stages.zoo.job",)
STITCHING_JOB = ("intertwine.workflow.stages.stitching.job",)
GRAM_JOB = ("intertwine.workflow.stages.deqntk.job:deqntk_gram",)


# Jobs on these variants' architecture sets (``variant_architectures``): a gated network is its
# architecture and the ``gated`` wrapper.
VARIANT_SETS = {
    "myrtle": {"myrtle"},
    "resnet20": {"resnet20"},
    "cct": {"cct"},
    "c4gap": {"c4gap"},
    "convnext": {"convnext"},
    "myrtle-gated": {"myrtle", "gated"},
    "c4gap-gated": {"c4gap", "gated"},
    "resnet110-gated": {"resnet110", "gated"},
}


@pytest.mark.parametrize(
    "module, qualified, changed",
    [
        ("models/myrtle.py", "Myrtle.forward", {"myrtle", "myrtle-gated"}),
        ("models/resnet.py", "BasicBlock.forward", {"resnet20", "resnet110-gated"}),
        ("models/cct.py", "CCT.forward", {"cct"}),
        ("models/gated.py", "GatedNet.forward", {"myrtle-gated", "c4gap-gated", "resnet110-gated"}),
        ("models/gated_resnet.py", "GatedResNet.forward", {"myrtle-gated", "c4gap-gated", "resnet110-gated"}),
    ],
)
def test_an_edit_to_one_model_of_the_package_changes_its_variants_identities_only(
    package_copy, module, qualified, changed
):
    """The zoo's and stitching's jobs per variant; the DEQ-NTK Gram, which builds no model. The
    gated networks' code is theirs: a plain variant's jobs do not rerun for it."""
    cases = [(entries, frozenset(s)) for entries in (ZOO_JOB, STITCHING_JOB) for s in VARIANT_SETS.values()]
    cases += [(GRAM_JOB, None)]
    before = {case: ci.code_identity(*case) for case in cases}
    edited_method(package_copy, module, qualified)
    for cached in (ci._module_file, ci._load):
        cached.cache_clear()
    after = {case: ci.code_identity(*case) for case in cases}
    for entries in (ZOO_JOB, STITCHING_JOB):
        assert {
            name
            for name, architectures in VARIANT_SETS.items()
            if before[entries, frozenset(architectures)] != after[entries, frozenset(architectures)]
        } == changed
    assert before[GRAM_JOB, None] == after[GRAM_JOB, None]
    assert not any(m.startswith("intertwine.models") for m in ci.reached(GRAM_JOB))


def test_the_wrappers_modules_are_the_packages_and_a_plain_job_leaves_them_out():
    for modules in ci.WRAPPERS.values():
        assert all(ci._module_file(module) for module in modules)
    plain = ci.reached(ZOO_JOB, frozenset({"myrtle"}))
    gated = ci.reached(ZOO_JOB, frozenset({"myrtle", "gated"}))
    assert not ci.WRAPPERS["gated"] & set(plain)
    assert ci.WRAPPERS["gated"] <= set(gated)
