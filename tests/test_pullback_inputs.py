"""Excitation pullbacks refuse bad inputs with an error that names the input, the problem and the
fix, and never hand back a plain gradient as a pullback without a word."""

import math
import subprocess
import sys

import pytest
import torch
from torch import nn

from intertwine import models
from intertwine.pullback import per_neuron_temperatures, pullback

MYRTLE = {"arch": "myrtle", "width_multiplier": 0.125}


def myrtle():
    torch.manual_seed(0)
    return models.build(MYRTLE).double().eval()


def images(n=2):
    return torch.randn(n, 3, 16, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))


class WhereReLU(nn.Module):
    """A ReLU network whose gates no swap can see: torch.where leaves no kink in the graph."""

    def __init__(self):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 4, 3), nn.Linear(4, 10)

    def forward(self, x):
        z = self.conv(x)
        return self.fc(torch.where(z > 0, z, 0).mean((2, 3)))


def nan_images():
    x = images(3)
    x[1, 0, 2, 2] = math.nan
    return {"model": myrtle(), "images": x, "classes": 0}


def nan_weights():
    model = myrtle()
    with torch.no_grad():
        model.conv2.weight[0, 0, 0, 0] = math.nan
    return {"model": model, "images": images(), "classes": 0}


def nan_weights_per_neuron():
    # The reported case: temperatures measured on a NaN member read "must be >= 0" before.
    return {**nan_weights(), "mode": "per_neuron", "temperatures": {"act1": torch.full((8,), math.nan)}}


def nan_temperatures():
    temperatures = per_neuron_temperatures(myrtle(), images(4))
    temperatures["act2"] = temperatures["act2"] * math.nan
    return {
        "model": myrtle(),
        "images": images(),
        "classes": 0,
        "mode": "per_neuron",
        "temperatures": temperatures,
    }


CASES = {
    "nan_image": (nan_images, r"1 of the 3 images have NaN or infinite values \(the first: index 1\)"),
    "class_-1": (
        lambda: {"model": myrtle(), "images": images(), "classes": [0, -1]},
        r"classes must be integers in \[0, 10\)",
    ),
    "class_10": (
        lambda: {"model": myrtle(), "images": images(), "classes": 10},
        r"classes must be integers in \[0, 10\).*\[10\]",
    ),
    "class_1.7": (
        lambda: {"model": myrtle(), "images": images(), "classes": 1.7},
        r"classes must be integers, got 1\.7",
    ),
    "class_bool": (
        lambda: {"model": myrtle(), "images": images(), "classes": [True, False]},
        "classes must be integers",
    ),
    "unit_out_of_range": (
        lambda: {"model": myrtle(), "images": images(), "classes": None, "site": "act1", "units": 8},
        r"units must be integers in \[0, 8\) \('act1' has 8\)",
    ),
    "where_relu": (
        lambda: {"model": WhereReLU().double(), "images": images(), "classes": 0},
        r"no ReLU, LeakyReLU or max-pool call was found in the forward pass of WhereReLU.*torch\.where",
    ),
    "nan_weights": (nan_weights, r"the model has NaN weights \(1 of 1152 values of 'conv2\.weight'\)"),
    "nan_weights_per_neuron": (nan_weights_per_neuron, "the model has NaN weights"),
    "nan_temperatures": (nan_temperatures, r"temperatures of call site 'act2' are NaN"),
    "no_parameters": (
        lambda: {"model": nn.ReLU(), "images": images(), "classes": 0},
        "the model has no parameters",
    ),
    "functional_option": (
        lambda: {"model": myrtle(), "images": images(), "classes": 0, "functional": "off"},
        r"functional must be one of \('soft', 'hard'\), got 'off'",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_pullback_inputs_are_refused(case):
    make, message = CASES[case]
    arguments = make()
    with pytest.raises(ValueError, match=message):
        pullback(**arguments)
    model = arguments["model"]
    assert not any("forward" in vars(m) or m._forward_hooks or m._forward_pre_hooks for m in model.modules())


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: (myrtle(), images(3).index_fill(0, torch.tensor([2]), math.inf)), "1 of the 3 probe images"),
        (lambda: (nan_weights()["model"], images()), "NaN weights"),
    ],
    ids=["nan_probe", "nan_weights"],
)
def test_bad_temperature_inputs_are_refused(make, message):
    model, probe = make()
    with pytest.raises(ValueError, match=message):
        per_neuron_temperatures(model, probe)


def test_gated_pullbacks_need_no_other_import():
    # intertwine.pullback itself holds a gated network's gates fixed; before, only importing
    # intertwine.workflow.stages.pullback.study registered that, and a bare pullback failed blaming the model.
    script = (
        "import sys, torch\n"
        "from intertwine import models\n"
        "from intertwine.pullback import pullback\n"
        "model = models.build({'arch': 'c4gap', 'width_multiplier': 0.0625, 'gated': {'family': 'dgn'}})\n"
        "g = pullback(model.double().eval(), torch.randn(2, 3, 8, 8, dtype=torch.float64), [0, 1])\n"
        "assert 'intertwine.workflow.stages.pullback.study' not in sys.modules and g.abs().sum() > 0\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
