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
