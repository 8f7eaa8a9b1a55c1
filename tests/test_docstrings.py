"""The public library API documents itself (issue 35): every public function of a library package
has a numpy-style docstring with a Parameters and a Returns section, as scikit-learn's and netrep's
do. The public API is what a package exports: its ``__all__``, or for a module without one its
names that do not start with an underscore (functions imported from outside ``intertwine``, such as
``dataclass``, excepted)."""

import importlib
import inspect
import re

import pytest

#: Packages whose public functions are documented; add a package here once its docstrings are.
DOCUMENTED = (
    "intertwine.kernels",
    "intertwine.measures",
    "intertwine.groups",
    "intertwine.compare",
    "intertwine.network_alignment",
    "intertwine.mode_connectivity",
    "intertwine.data",
    "intertwine.dissection",
    "intertwine.dissection_iou",
    "intertwine.stitching",
    "intertwine.training",
    "intertwine.training_steps",
    "intertwine.packed_training",
    "intertwine.models",
    "intertwine.pullback",
    "intertwine.symmetry",
    "intertwine.rotation",
    "intertwine.gates",
)

#: A numpy-style section: its name on a line of its own, underlined by dashes.
SECTIONS = ("Parameters", "Returns")


def public_functions(package: str) -> dict[str, object]:
    """The functions a package exports (``__all__``, else its names without a leading underscore)
    that are defined in ``intertwine``."""
    module = importlib.import_module(package)
    names = getattr(module, "__all__", [n for n in vars(module) if not n.startswith("_")])
    found = {}
    for name in names:
        obj = getattr(module, name, None)
        if not inspect.isfunction(obj):
            continue
        defined = inspect.unwrap(obj)  # through torch.no_grad, contextlib.contextmanager, ...
        if defined.__module__ == "intertwine" or defined.__module__.startswith("intertwine."):
            found[name] = obj
    return found


def missing_sections(function) -> list[str]:
    doc = inspect.getdoc(function) or ""
    return [s for s in SECTIONS if not re.search(rf"^{s}\n-{{{len(s)}}}$", doc, re.MULTILINE)]


@pytest.mark.parametrize("package", DOCUMENTED)
def test_public_functions_have_parameters_and_returns(package):
    functions = public_functions(package)
    assert functions, f"{package} exports no function"
    lacking = {
        f"{name} ({inspect.getsourcefile(f)})": missing
        for name, f in functions.items()
        if (missing := missing_sections(f))
    }
    assert not lacking, f"{package}: public functions whose docstring lacks a section: {lacking}"


def test_the_check_sees_a_missing_section():
    def documented(x):
        """One line.

        Parameters
        ----------
        x : int
            A number.

        Returns
        -------
        int
            The same number.
        """
        return x

    def prose(x):
        """Returns x; its Parameters are obvious."""
        return x

    assert missing_sections(documented) == []
    assert missing_sections(prose) == ["Parameters", "Returns"]
