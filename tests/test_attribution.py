"""The pullback through Captum, Zennit and Quantus (the optional `attribution` extra): Captum's
class is the pullback; Zennit's ReLUBetaSmooth at beta = 1/T with our soft max-pool rule is the
global-T pullback, computed by another library's hooks; Quantus scores it beside the gradient."""

import numpy as np
import pytest
import quantus
import torch

from intertwine import models
from intertwine.attribution import ExcitationPullback, pullback_composite
from intertwine.pullback import pullback


def network(spec, seed=0):
    torch.manual_seed(seed)
    model = models.build(spec).double().eval()
    with torch.no_grad():  # batch norms away from the identity, so that every unit matters
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5), module.bias.normal_(0, 0.3)
    return model


SPECS = {
    "c4gap": {"arch": "c4gap", "width_multiplier": 0.125},  # no max-pool
    "myrtle": {"arch": "myrtle", "width_multiplier": 0.125},  # max-pools
    "resnet20": {"arch": "resnet20", "width_multiplier": 0.25},  # a ReLU after the residual sum
}


def test_captums_class_is_the_pullback():
    model = network(SPECS["myrtle"])
    x = torch.randn(4, 3, 32, 32, dtype=torch.float64)
    classes = [1, 3, 5, 7]
    captum = ExcitationPullback(model, temperature=0.5).attribute(x, target=classes)
    assert torch.allclose(captum, pullback(model, x, classes, 0.5), atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="give target"):
        ExcitationPullback(model).attribute(x)


@pytest.mark.parametrize("name", list(SPECS))
def test_zennits_hooks_give_the_global_temperature_pullback(name):
    model = network(SPECS[name])
    x = torch.randn(3, 3, 32, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    classes = torch.tensor([0, 4, 9])
    ours = pullback(model, x, classes, 0.3)
    with pullback_composite(0.3).context(model) as hooked:
        inputs = x.clone().requires_grad_(True)
        logits = hooked(inputs)
        (theirs,) = torch.autograd.grad(logits[torch.arange(3), classes].sum(), inputs)
    assert torch.allclose(theirs, ours, atol=1e-6 * ours.abs().max(), rtol=0)
    # and not the plain gradient: the soft gates change it
    plain = pullback(model, x, classes, mode="gradient")
    assert not torch.allclose(plain, ours, atol=1e-3 * ours.abs().max(), rtol=0)


def test_quantus_scores_pullback_and_gradient_on_a_member():
    model = network(SPECS["c4gap"]).float()
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(6, 3, 16, 16, generator=generator)
    y = model(x).argmax(1)

    def explain(mode):
        def explain_func(model, inputs, targets, **kwargs):
            inputs = torch.as_tensor(inputs, dtype=torch.float32)
            v = pullback(model, inputs, torch.as_tensor(targets), 0.3, mode=mode)
            return v.detach().numpy()

        return explain_func

    metric = quantus.FaithfulnessCorrelation(
        nr_runs=10,
        subset_size=32,
        perturb_baseline="black",
        abs=False,
        normalise=False,
        return_aggregate=False,
        disable_warnings=True,
    )
    scores = {}
    for mode in ("global", "gradient"):
        scores[mode] = metric(
            model=model,
            x_batch=x.numpy(),
            y_batch=y.numpy(),
            a_batch=None,
            explain_func=explain(mode),
            device="cpu",
        )
        assert len(scores[mode]) == 6 and np.all(np.abs(scores[mode]) <= 1)
