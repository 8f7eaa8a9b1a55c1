"""Inputs that used to end in a raw torch, pandas or Python error (TypeError, RuntimeError,
StopIteration, IndexError) in the newer stages' library calls: each is now a ValueError that names
the input, the problem and the fix."""

from __future__ import annotations

import pytest
import torch

from intertwine import compare, kernels, measures, models
from intertwine.workflow.claims import scorecard
from intertwine.data import Split
from intertwine.kernels import deq, npk
from intertwine.measures import cca
from intertwine.pullback import per_neuron_temperatures, pullback
from intertwine.workflow.stages.deqntk.plan import gram_layout
from intertwine.workflow.settings import TrainConfig
from intertwine.training import train_pack

F64 = torch.float64


def unit(n=6, d=5):
    x = torch.rand(n, d, generator=torch.Generator().manual_seed(0), dtype=F64)
    return x / x.norm(dim=1, keepdim=True)


SETTING = {"sigma_w2": 0.6, "sigma_u2": 0.4, "sigma_b2": 0.0}
EYE = torch.eye(3, dtype=F64)


def acts(device="cpu"):
    return torch.randn(
        8, 4, 2, 2, device=device, generator=None if device == "meta" else torch.Generator().manual_seed(1)
    )


def c4gap(**gated_block):
    spec = {"arch": "c4gap", "width_multiplier": 0.0625}
    return models.build(spec | ({"gated": gated_block} if gated_block else {}))


def pack(models_, generators, labels):
    split = Split(torch.zeros(16, 3, 16, 16, dtype=torch.uint8), torch.arange(16) % 10)
    return train_pack(
        models_,
        split,
        split,
        TrainConfig(epochs=1),
        generators,
        torch.zeros(3),
        torch.ones(3),
        labels,
        lambda m: None,
    )


def gen(seed):
    return torch.Generator().manual_seed(seed)


CASES = {
    # meta tensors (shapes without data): was "Tensor.item() cannot be called on meta tensors"
    "deq_ntk meta": (lambda: deq.deq_ntk(unit().to("meta"), **SETTING), "X is a meta tensor"),
    "linear_cka meta": (lambda: measures.linear_cka(acts("meta"), acts("meta")), "X is a meta tensor"),
    "svcca meta": (lambda: cca.svcca(acts("meta"), acts("meta")), "X is a meta tensor"),
    "kernel_cka meta": (lambda: measures.kernel_cka(EYE.to("meta"), EYE), "K is a meta tensor"),
    "gate_kernel meta": (lambda: npk.gate_kernel(acts("meta")), "activations is a meta tensor"),
    "site_activations meta model": (
        lambda: models.site_activations(c4gap().to("meta"), torch.randn(2, 3, 16, 16), ["act1"]),
        "site_activations: the model is on the meta device",
    ),
    # float widths and block sizes: were TypeErrors of torch.randn or range
    "finite_deq_ntk float width": (
        lambda: deq.finite_deq_ntk(unit(), width=10.5, **SETTING),
        "width must be an integer >= 1, got 10.5",
    ),
    "deq_ntk float block_rows": (
        lambda: deq.deq_ntk(unit(), **SETTING, block_rows=2.5),
        "block_rows must be an integer >= 1, got 2.5",
    ),
    "conv_deq_ntk float block_pairs": (
        lambda: deq.conv_deq_ntk(
            torch.rand(2, 3, 4, 4, dtype=F64), **SETTING, normalize=True, block_pairs=2.5
        ),
        "block_pairs must be an integer >= 1, got 2.5",
    ),
    "deq_ntk float max_iter": (
        lambda: deq.deq_ntk(unit(), **SETTING, max_iter=10.5),
        "max_iter must be an integer",
    ),
    "deq_ntk tol None": (
        lambda: deq.deq_ntk(unit(), **SETTING, tol=None),
        "tol must be a number > 0, got None",
    ),
    "gram_layout float block_rows": (
        lambda: gram_layout(10, 5, 2.5),
        "block_rows must be an integer of at least 1",
    ),
    "grelu_cka float max_bytes": (
        lambda: measures.grelu_cka(acts(), acts(), max_bytes=1000.5),
        "max_bytes must be an integer number of bytes >= 1, got 1000.5",
    ),
    "unbiased_hsic max_bytes 0": (
        lambda: measures.unbiased_hsic(torch.eye(5), torch.eye(5), max_bytes=0),
        "max_bytes must be an integer number of bytes >= 1, got 0",
    ),
    "kernel_regression float num_classes": (
        lambda: deq.kernel_regression(EYE, [0, 1, 2], EYE, num_classes=3.5),
        "num_classes must be an integer >= 1, got 3.5",
    ),
    # None for a number
    "deq_ntk sigma_w2 None": (
        lambda: deq.deq_ntk(unit(), sigma_w2=None, sigma_u2=0.4, sigma_b2=0.0),
        "sigma_w2 must be a number",
    ),
    "svcca variance None": (
        lambda: cca.svcca(acts(), acts(), variance=None),
        "variance must be a number in",
    ),
    # a model and inputs of different dtypes: was "Input type (double) and bias type (float) ..."
    "site_activations float64 input": (
        lambda: models.site_activations(c4gap(), torch.randn(2, 3, 16, 16, dtype=F64), ["act1"]),
        r"site_activations: the inputs are torch.float64 but the model's parameters are torch.float32; convert",
    ),
    "compare_models float64 input": (
        lambda: compare.compare_models(
            c4gap(), c4gap(), torch.randn(8, 3, 16, 16, dtype=F64), ["linear_cka"], progress=False
        ),
        "the inputs are torch.float64 but the model's parameters are torch.float32",
    ),
    "member_npk float64 input": (
        lambda: kernels.member_npk(c4gap(family="dgn"), torch.randn(3, 3, 16, 16, dtype=F64)),
        "npk_inputs: the inputs are torch.float64 but the model's parameters are torch.float32",
    ),
    # batch sizes
    "compare_models batch_size 0": (
        lambda: compare.compare_models(
            c4gap(), c4gap(), torch.randn(8, 3, 16, 16), ["linear_cka"], batch_size=0, progress=False
        ),
        "batch_size must be an integer of at least 1, got 0",
    ),
    "site_activations float batch_size": (
        lambda: models.site_activations(c4gap(), torch.randn(2, 3, 16, 16), ["act1"], batch_size=1.5),
        r"batch size must be at least 1, got 1.5 \(an integer\)",
    ),
    # a model with no parameters: was a bare StopIteration
    "load_weights no parameters": (
        lambda: __import__("intertwine.workflow.zoo").workflow.zoo.load_weights(torch.nn.ReLU(), "seed0.pt"),
        r"load_weights\(seed0.pt\): the model \(ReLU\) has no parameters or buffers",
    ),
    # train_pack with mismatched members or generators: were vmap's, torch.stack's or IndexErrors
    "train_pack fewer generators": (
        lambda: pack([c4gap(), c4gap()], [gen(0)], ["a", "b"]),
        "train_pack: 2 models, 1 generators and 2 labels; give one generator and one label per member",
    ),
    "train_pack fewer labels": (
        lambda: pack([c4gap(), c4gap()], [gen(0), gen(1)], ["a"]),
        "train_pack: 2 models, 2 generators and 1 labels",
    ),
    "train_pack one generator twice": (
        lambda: (lambda g: pack([c4gap(), c4gap()], [g, g], ["a", "b"]))(gen(0)),
        "one generator is given for two members",
    ),
    "train_pack two architectures": (
        lambda: pack(
            [c4gap(), models.build({"arch": "c4gap", "width_multiplier": 0.125})],
            [gen(0), gen(1)],
            ["a", "b"],
        ),
        r"members 'a' and 'b' have different architectures \('conv1.weight' is \(8, 3, 3, 3\) in the first and \(16, 3, 3, 3\)",
    ),
    "train_pack no models": (lambda: pack([], [], []), "train_pack: no models given"),
    # the scorecard without the run's settings: was a KeyError of one of them
    "scorecard settings": (
        lambda: scorecard({}, {"select_on": "val"}),
        r"the scorecard's settings lack \[.*'myrtle_variants'.*Plan.claims_settings",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_a_clear_error(case):
    call, message = CASES[case]
    with pytest.raises(ValueError, match=message):
        call()


def temperatures(width_factor=1):
    """Per-neuron temperatures of c4gap(), each site's repeated ``width_factor`` times."""
    measured = per_neuron_temperatures(c4gap().eval(), torch.randn(4, 3, 16, 16, generator=gen(2)))
    return {site: t.repeat(width_factor) for site, t in measured.items()}


def pull(**arguments):
    torch.manual_seed(5)  # the same weights at every call
    return pullback(c4gap().eval(), torch.randn(2, 3, 16, 16, generator=gen(3)), 0, **arguments)


# Were raw TypeErrors ("'>' not supported between instances of 'str' and 'int'", "new(): invalid
# data type 'str'"), a RuntimeError ("Input type (unsigned char) and bias type (float)"), or a
# ValueError naming neither the argument nor the call site ("8 channels but 16 temperatures").
ARGUMENT_CASES = {
    "pullback string temperature": (
        lambda: pull(temperature="0.3"),
        TypeError,
        r"pullback: temperature must be one number > 0, got '0.3' \(str\); write it as a float",
    ),
    "pullback temperature None": (
        lambda: pull(temperature=None),
        TypeError,
        "pullback: temperature must be one number > 0, got None",
    ),
    "pullback vector temperature": (
        lambda: pull(temperature=torch.tensor([0.3, 0.2])),
        TypeError,
        "pullback: temperature must be one number > 0, got tensor.* mode='per_neuron'",
    ),
    "pullback infinite temperature": (
        lambda: pull(temperature=float("inf")),
        ValueError,
        "pullback: the temperature must be positive and finite, got inf",
    ),
    "per_neuron_temperatures string temperature": (
        lambda: per_neuron_temperatures(c4gap(), torch.randn(2, 3, 16, 16), temperature="0.3"),
        TypeError,
        "per_neuron_temperatures: temperature must be one number > 0, got '0.3'",
    ),
    "pullback temperatures of another width": (
        lambda: pull(mode="per_neuron", temperatures=temperatures(2)),
        ValueError,
        r"pullback: temperatures\['act1'\] has 16 values but call site 'act1' has 8 channels .* measure "
        "them on this one with per_neuron_temperatures",
    ),
    "pullback string per-neuron temperature": (
        lambda: pull(mode="per_neuron", temperatures=dict.fromkeys(temperatures(), "0.3")),
        TypeError,
        r"pullback: temperatures\['act1'\] must be a 1-d tensor of real numbers, one per channel",
    ),
    "compare_models uint8 images": (
        lambda: compare.compare_models(
            c4gap(),
            c4gap(),
            torch.randint(0, 256, (8, 3, 16, 16), dtype=torch.uint8, generator=gen(4)),
            ["linear_cka"],
            progress=False,
        ),
        TypeError,
        r"compare_models: data gives torch.uint8 tensors, but the models take floating-point inputs.*normalize",
    ),
}


@pytest.mark.parametrize("case", list(ARGUMENT_CASES))
def test_bad_argument_is_a_clear_error_naming_it(case):
    call, error, message = ARGUMENT_CASES[case]
    with pytest.raises(error, match=message):
        call()


def test_per_neuron_temperatures_of_the_right_width_and_one_number_per_site_still_run():
    measured = temperatures()
    assert pull(mode="per_neuron", temperatures=measured).shape == (2, 3, 16, 16)
    uniform = pull(mode="per_neuron", temperatures=dict.fromkeys(measured, 0.3))
    assert torch.equal(uniform, pull(temperature=0.3))
