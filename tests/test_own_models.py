"""Your own models, data and zoo (docs/own-models.md): an architecture from a factory, an image-folder
data set, and a folder of checkpoints trained elsewhere, each checked on its own and run through
the workflow (the example of examples/own_models)."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from PIL import Image
from torch import nn

from intertwine import models
from intertwine.data.image_folder import load_split_folders, split_folders_problem
from intertwine.models.factory import check_sites
from intertwine.workflow.code_identity import factory_identity
from intertwine.workflow.config import check_config
from intertwine.workflow.plan import Plan
from intertwine.workflow.zoo import CHECKPOINT_FORMAT, CheckpointError, fit_weights, foreign_state_dict

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "own_models"
SMALL = {"arch": "custom", "factory": "mynets:small_cnn", "options": {"width": 4}, "num_classes": 3}


@pytest.fixture(autouse=True)
def _factories_importable(monkeypatch, tmp_path):
    """The example's mynets and this test's own factories (owntest_nets) on the import path."""
    (tmp_path / "owntest_nets.py").write_text(OWN_NETS)
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("owntest_nets", None)


OWN_NETS = '''
import torch.nn.functional as F
from torch import nn


class Functional(nn.Module):
    """A ReLU called as a function, a marker module after it, and an nn.ReLU module."""

    def __init__(self, num_classes):
        super().__init__()
        self.conv = nn.Conv2d(3, 5, 3, padding=1)
        self.mark = nn.Identity()
        self.conv2 = nn.Conv2d(5, 6, 3, padding=1)
        self.act = nn.ReLU()
        self.fc = nn.Linear(6, num_classes)

    def forward(self, x):
        x = self.mark(F.relu(self.conv(x)))
        return self.fc(self.act(self.conv2(x)).mean((2, 3)))


class Twice(nn.Module):
    """One nn.ReLU module called twice."""

    def __init__(self, num_classes):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 4, 1), nn.Conv2d(4, 4, 1)
        self.relu = nn.ReLU()
        self.fc = nn.Linear(4, num_classes)

    def forward(self, x):
        return self.fc(self.relu(self.conv2(self.relu(self.conv1(x)))).mean((2, 3)))


def functional(num_classes):
    return Functional(num_classes)


def twice(num_classes):
    return Twice(num_classes)


def only_functional(num_classes):
    return nn.Sequential(nn.Conv2d(3, 4, 1), nn.Identity())


def no_classes():
    return nn.Linear(3, 3)


def leaky(num_classes):
    return nn.Sequential(nn.Conv2d(3, 4, 1), nn.LeakyReLU(0.2), nn.Flatten(), nn.LazyLinear(num_classes))
'''


# --- the architecture ---------------------------------------------------------------------------


def test_a_factory_models_sites_are_its_relu_modules_with_their_channels():
    model = models.build(SMALL)
    assert [(s.name, s.channels) for s in models.sites(model)] == [("2", 4), ("6", 8)]
    images = torch.randint(0, 256, (5, 3, 16, 16), dtype=torch.uint8)
    acts = models.site_activations(model, images, mean=torch.zeros(3), std=torch.ones(3))
    assert acts["2"].shape == (5, 4, 16, 16) and acts["6"].shape == (5, 8, 8, 8)
    assert (acts["2"] >= 0).all()  # a ReLU's output
    assert models.sites(copy.deepcopy(model)) == models.sites(model)
    assert models.normalize_spec(SMALL) == models.normalize_spec(models.normalize_spec(SMALL))
    check_sites(model, torch.randn(2, 3, 16, 16), "small")


def test_a_functional_relu_is_named_not_found():
    with pytest.raises(ValueError, match=r"no ReLU module.*F\.relu.*`sites`"):
        models.build({"arch": "custom", "factory": "owntest_nets:only_functional"})
    # Found by module: the nn.ReLU `act`, but the F.relu call before it is no site: refused, named.
    found = models.build({"arch": "custom", "factory": "owntest_nets:functional", "num_classes": 2})
    assert [s.name for s in models.sites(found)] == ["act"]
    with pytest.raises(ValueError, match=r"as a function at \['relu\(\)'\]"):
        check_sites(found, torch.randn(2, 3, 8, 8), "zoo.variants.f")
    # Named: the marker after the call and the module; the call is then left unread.
    named = models.build(
        {"arch": "custom", "factory": "owntest_nets:functional", "num_classes": 2, "sites": ["mark", "act"]}
    )
    assert [(s.name, s.channels) for s in models.sites(named)] == [("mark", 5), ("act", 6)]
    check_sites(named, torch.randn(2, 3, 8, 8), "zoo.variants.f")


def test_a_module_run_twice_is_no_site():
    model = models.build({"arch": "custom", "factory": "owntest_nets:twice", "num_classes": 2})
    with pytest.raises(ValueError, match=r"site 'relu' runs 2 times"):
        check_sites(model, torch.randn(2, 3, 8, 8), "zoo.variants.t")


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"arch": "custom"}, r"'factory': arch 'custom' needs factory"),
        (
            {"arch": "custom", "factory": "no_such_module_xyz:net"},
            r"cannot import module 'no_such_module_xyz'.*PYTHONPATH",
        ),
        ({"arch": "custom", "factory": "mynets:no_such"}, r"has no function 'no_such'"),
        ({"arch": "custom", "factory": "mynets small"}, r"'package\.module:function'"),
        ({"arch": "custom", "factory": "owntest_nets:no_classes"}, r"must take num_classes"),
        (SMALL | {"options": {"depth": 3}}, r"unexpected keyword argument 'depth'"),
        (SMALL | {"sites": ["2", "nine"]}, r"\['nine'\] are not modules"),
        (SMALL | {"width_multiplier": 2}, r"unknown model option 'width_multiplier' for arch 'custom'"),
        (
            {
                "arch": "custom",
                "factory": "owntest_nets:leaky",
                "activation": "leaky_relu",
                "negative_slope": 0.1,
            },
            r"site '1' of owntest_nets:leaky has slope 0\.2; set negative_slope: 0\.2",
        ),
    ],
)
def test_a_bad_factory_spec_names_the_option_and_the_fix(spec, message):
    with pytest.raises(ValueError, match=message):
        models.build(spec)


def test_an_edit_to_the_factory_file_changes_the_variants_code_identity(tmp_path):
    variants = {"mine": {"arch": "custom", "factory": "owntest_nets:twice"}, "m": {"arch": "myrtle"}}
    before = factory_identity(variants, "mine")
    assert re.fullmatch(r"\+[0-9a-f]{12}", before) and factory_identity(variants, "m") == ""
    (tmp_path / "owntest_nets.py").write_text(OWN_NETS + "\nWIDTH = 3\n")
    assert factory_identity(variants, "mine") != before


# --- checkpoints trained elsewhere ----------------------------------------------------------------


def test_the_checkpoint_formats_read_the_same_weights(tmp_path):
    torch.manual_seed(0)
    net = models.build(SMALL)
    state = net.state_dict()
    files = {
        "bare.pt": state,
        "loop.pth": {"model_state_dict": state, "epoch": 3, "optimizer": {"lr": 0.1}},
        "parallel.ckpt": {"state_dict": {f"module.{k}": v for k, v in state.items()}},
        "ours.pt": {"format": CHECKPOINT_FORMAT, "state_dict": state, "spec": SMALL},
        "whole.pt": net,
    }
    for name, content in files.items():
        torch.save(content, tmp_path / name)
    for name in files:
        whole = name == "whole.pt"
        read = foreign_state_dict(tmp_path / name, whole_modules=whole, key="zoo.checkpoints.v")
        assert read.keys() == state.keys() and all(torch.equal(read[k], state[k]) for k in state), name
    with pytest.raises(
        CheckpointError, match=r"whole.pt holds Python objects.*zoo\.checkpoints\.v\.whole_modules: true"
    ):
        foreign_state_dict(tmp_path / "whole.pt", whole_modules=False, key="zoo.checkpoints.v")
    torch.save({"epoch": 3, "note": "no weights"}, tmp_path / "empty.pt")
    with pytest.raises(CheckpointError, match=r"empty.pt holds no state dict.*\['epoch', 'note'\]"):
        foreign_state_dict(tmp_path / "empty.pt", whole_modules=False, key="zoo.checkpoints.v")
    (tmp_path / "torn.pt").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(CheckpointError, match=r"torn.pt is not a readable torch file"):
        foreign_state_dict(tmp_path / "torn.pt", whole_modules=False, key="zoo.checkpoints.v")


def test_a_checkpoint_that_does_not_fit_names_the_file_and_the_keys(tmp_path):
    wider = models.build(SMALL | {"options": {"width": 6}}).state_dict()
    model = models.build(SMALL)
    with pytest.raises(
        ValueError,
        match=r"w6\.pt does not fit zoo\.variants\.v.*other shapes \['0\.weight: \(6, 3, 3, 3\) in the file, \(4, 3, 3, 3\)",
    ):
        fit_weights(model, wider, tmp_path / "w6.pt", "zoo.variants.v")
    fewer = {k: v for k, v in model.state_dict().items() if not k.startswith("9.")}
    with pytest.raises(ValueError, match=r"missing keys \['9\.weight', '9\.bias'\]"):
        fit_weights(model, fewer | {"head.weight": torch.zeros(1)}, "x.pt", "zoo.variants.v")


# --- the image-folder data set ----------------------------------------------------------------------


def _write_folder(root: Path, classes: dict[str, int], sizes=(12, 10)) -> None:
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for name, count in classes.items():
            (root / split / name).mkdir(parents=True, exist_ok=True)
            for i in range(count):
                side = sizes[i % len(sizes)]
                pixels = rng.integers(0, 256, (side, side + 2, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / name / f"{i}.png")


def test_an_image_folder_has_any_classes_and_sizes(tmp_path):
    _write_folder(tmp_path, {"zebra": 3, "apple": 2, "mango": 4})
    data = load_split_folders(tmp_path, image_size=8)
    assert data["classes"] == ["apple", "mango", "zebra"]
    images, labels = data["train"]
    assert images.shape == (9, 3, 8, 8) and images.dtype == np.uint8
    assert labels.tolist() == [0, 0, 1, 1, 1, 1, 2, 2, 2]
    with pytest.raises(ValueError, match=r"set config key data\.image_folder\.image_size"):
        load_split_folders(tmp_path, image_size=None)
    (tmp_path / "test" / "zebra").rename(tmp_path / "test" / "zebu")
    assert re.search(
        r"different classes \(only in one: \['zebra', 'zebu'\]\)", split_folders_problem(tmp_path)
    )
    assert "is not a folder" in split_folders_problem(tmp_path / "nowhere")


# --- the plan's checks ------------------------------------------------------------------------------


def _config(tmp_path, **zoo) -> dict:
    _write_folder(tmp_path / "images", {"a": 2, "b": 2, "c": 2})
    return {
        "replaces_default": True,
        "data": {
            "dataset": "image_folder",
            "val_size": 2,
            "image_folder": {"root": str(tmp_path / "images")},
        },
        "zoo": {"seeds": 2, "variants": {"mine": SMALL}} | zoo,
        "symmetry": {"seeds": 0},
    }


def test_the_plan_names_what_a_config_of_your_own_gets_wrong(tmp_path):
    (tmp_path / "ckpts").mkdir()
    config = _config(
        tmp_path,
        variants={"mine": SMALL | {"num_classes": 10}, "theirs": SMALL},
        checkpoints={"theirs": str(tmp_path / "ckpts"), "ghost": "x"},
        seeds_per_variant={"theirs": 3},
    )
    config["stitching"] = {"variants": ["mine"], "pairs": 1}
    errors = "\n".join(check_config(config))
    assert "config key zoo.variants.mine.num_classes: 10, but data.image_folder.root" in errors
    assert "has 3 classes (a, b, c); set num_classes: 3" in errors
    assert "config key zoo.checkpoints: ['ghost'] must be among zoo.variants" in errors
    config["zoo"]["checkpoints"].pop("ghost")
    errors = "\n".join(
        check_config(
            _config(tmp_path, **{k: v for k, v in config["zoo"].items()}) | {"stitching": config["stitching"]}
        )
    )
    assert f"config key zoo.checkpoints.theirs: {tmp_path / 'ckpts'} holds no checkpoint files" in errors
    assert "config key zoo.seeds_per_variant.theirs: 'theirs' is taken from checkpoints" in errors
    assert (
        "config key stitching.variants: 'mine' is your own architecture (mynets:small_cnn), which lacks cut points"
        in errors
    )


def test_a_factory_model_plans_for_every_stage_that_applies_and_is_refused_by_the_others(tmp_path):
    config = _config(tmp_path)
    config["symmetry"] = {"seeds": 1, "images": 6}
    config["similarity"] = {"variants": ["mine"], "procrustes_pairs": 1, "cka_pairs": 1, "samples": 6}
    config["dissection"] = {"variants": ["mine"], "seeds": 1, "probe": {"images": 6}}
    config["deqntk"] = {"reference": {"variants": ["mine"], "samples": 6}}
    assert check_config(config) == []
    plan = Plan(config)
    outputs = plan.all_outputs
    assert "results/tables/similarity.parquet" in outputs and "results/tables/dissection.parquet" in outputs
    assert "results/tables/kernel_reference.parquet" in outputs
    assert plan.symmetry_checks == []  # no weight wiring: skipped
    refused = {
        "rotation": ({"variants": {"mine": ["grelu"]}}, "cut points"),
        "stitching": ({"variants": ["mine"], "pairs": 1}, "cut points"),
        "connectivity": ({"variants": ["mine"], "pairs": 1}, "conv, norm and activation layer names"),
        "pullback": ({"variants": ["mine"], "seeds": 1, "pairs": 1}, "conv, norm and activation layer names"),
    }
    for stage, (block, lacks) in refused.items():
        errors = check_config(_config(tmp_path) | {stage: block})
        assert any(
            e.startswith(f"config key {stage}.variants: 'mine' is your own") and lacks in e for e in errors
        ), (
            stage,
            errors,
        )


def test_the_pages_config_is_the_examples():
    """docs/own-models.md quotes the example's config: each of its lines is the file's."""
    page = (REPO / "docs" / "own-models.md").read_text()
    quoted = re.search(r"```yaml\n(.*?)```", page, re.S)[1].splitlines()
    example = (EXAMPLE / "config.yaml").read_text().splitlines()
    assert quoted and all(line in example for line in quoted), [
        line for line in quoted if line not in example
    ]


# --- the workflow ------------------------------------------------------------------------------------


@pytest.mark.workflow
def test_the_example_runs_through_the_workflow(tmp_path):
    """A factory model trained, a 3-class image folder of two image sizes, and two foreign
    checkpoints taken as members, through the zoo and the similarity stage; an edit to the factory's
    file then reruns the jobs of its variants."""
    work = tmp_path / "run"
    (work / "nets").mkdir(parents=True)
    (work / "nets" / "mynets.py").write_text((EXAMPLE / "mynets.py").read_text())
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(work / "nets")]),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    subprocess.run([sys.executable, str(EXAMPLE / "make_inputs.py"), str(work)], env=env, check=True)

    def snakemake(*args):
        command = [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(REPO / "workflow" / "Snakefile"),
            "-d",
            str(work),
        ]
        run = subprocess.run(
            [*command, "--configfile", str(EXAMPLE / "config.yaml"), "--cores", "2", *args],
            env=env,
            capture_output=True,
            text=True,
        )
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        return run.stdout + run.stderr

    snakemake()
    zoo = pd.read_parquet(work / "results" / "tables" / "zoo.parquet").set_index(["variant", "seed"])
    assert sorted(zoo.index) == [("mine", 0), ("mine", 1), ("theirs", 0), ("theirs", 1)]
    assert (zoo.loc["theirs", "epochs"] == 0).all() and (zoo.loc["mine", "epochs"] == 1).all()
    assert zoo["test_acc"].between(0, 1).all()
    member = torch.load(work / "results/zoo/theirs/seed1.pt", weights_only=True)
    saved = torch.load(work / "checkpoints/member1.pt", weights_only=True)["model_state_dict"]
    assert member["imported_from"].endswith("member1.pt")
    assert all(torch.equal(member["state_dict"][k], saved[k]) for k in saved)
    similarity = pd.read_parquet(work / "results" / "tables" / "similarity.parquet")
    assert set(similarity["variant"]) == {"mine", "theirs"}
    with open(work / "results" / "data" / "image_folder" / "meta.json") as f:
        meta = yaml.safe_load(f)
    assert meta["classes"] == ["circle", "square", "triangle"] and meta["image_size"] == [16, 16]

    with open(work / "nets" / "mynets.py", "a") as f:
        f.write("\n# an edit\n")
    planned = snakemake("-n", "--quiet", "rules")
    assert re.search(r"^train_member\s+2$", planned, re.M) and re.search(
        r"^import_member\s+2$", planned, re.M
    )
