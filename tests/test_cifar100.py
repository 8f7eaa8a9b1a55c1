"""CIFAR-100 beside CIFAR-10: both layouts on tiny fake data, the errors, the config and the cache."""

import copy
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from intertwine.data import build_dataset, load_meta, load_split, write_dataset
from intertwine.workflow.settings import checked_block
from intertwine.data.cifar10 import DataNotFoundError, load_cifar, load_cifar10, load_cifar100

REPO = Path(__file__).resolve().parents[1]
FINE = [f"fine{i:02d}" for i in range(100)]  # CIFAR-100's meta file names 100 fine labels
# Three of CIFAR-100's class names: sorted, as the image folders read them.
FOLDERS = ["apple", "aquarium_fish", "baby"]


def fake_images(n, rng, size):
    return rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def write_cifar100_pickles(root, rng, n_train=12, n_test=5):
    """torchvision's layout: ROOT/cifar-100-python/{train,test,meta}, as in cifar-100-python.tar.gz."""
    base = root / "cifar-100-python"
    base.mkdir(parents=True)
    truth = {}
    for name, n in (("train", n_train), ("test", n_test)):
        images, fine = fake_images(n, rng, 32), rng.integers(0, 100, n).tolist()
        fine[0] = 99  # the largest fine label
        truth[name] = (images, fine)
        entry = {
            "filenames": [f"{i}.png" for i in range(n)],
            "fine_labels": fine,
            "coarse_labels": [label // 5 for label in fine],
            "data": images.transpose(0, 3, 1, 2).reshape(n, -1),
        }
        with open(base / name, "wb") as f:
            pickle.dump(entry, f)
    with open(base / "meta", "wb") as f:
        pickle.dump({"fine_label_names": FINE, "coarse_label_names": [f"c{i}" for i in range(20)]}, f)
    return truth


def write_image_folders(root, rng, sizes=(("train", 4), ("test", 2)), classes=FOLDERS, size=8):
    written = {}
    for split, n in sizes:
        for c, name in enumerate(classes):
            (root / split / name).mkdir(parents=True)
            for i, image in enumerate(fake_images(n, rng, size)):
                Image.fromarray(image).save(root / split / name / f"{i}.png")
                written[(split, c, i)] = image
    return written


@pytest.fixture
def no_md5(monkeypatch):
    """torchvision checks the files' md5 sums, which fake data cannot match; the reading is real."""
    from torchvision.datasets import cifar

    monkeypatch.setattr(cifar, "check_integrity", lambda *a, **k: True)
    monkeypatch.setattr(cifar.CIFAR10, "_check_integrity", lambda self: True)


def test_torchvision_layout_reads_fine_labels_and_class_names(tmp_path, rng, no_md5):
    truth = write_cifar100_pickles(tmp_path, rng)
    data = load_cifar100(tmp_path)
    images, labels = data["train"]
    assert images.shape == (12, 3, 32, 32) and images.dtype == np.uint8
    assert labels.dtype == np.int64 and labels.max() == 99
    np.testing.assert_array_equal(images, truth["train"][0].transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(labels, truth["train"][1])
    np.testing.assert_array_equal(data["test"][1], truth["test"][1])
    assert data["test"][0].shape == (5, 3, 32, 32)
    assert data["classes"] == FINE
    same = load_cifar("cifar100", tmp_path, layout="torchvision")  # the one loader, by name
    assert same["classes"] == FINE
    np.testing.assert_array_equal(same["train"][0], images)


def test_image_folder_layout(tmp_path, rng):
    written = write_image_folders(tmp_path, rng)
    data = load_cifar100(tmp_path)
    images, labels = data["train"]
    assert images.shape == (12, 3, 8, 8) and data["test"][0].shape == (6, 3, 8, 8)
    assert data["classes"] == FOLDERS
    np.testing.assert_array_equal(labels, [0] * 4 + [1] * 4 + [2] * 4)
    np.testing.assert_array_equal(images[5].transpose(1, 2, 0), written[("train", 1, 1)])


def test_cache_holds_the_data_sets_name_classes_and_size(tmp_path, rng, no_md5):
    write_cifar100_pickles(tmp_path / "c100", rng, n_train=20, n_test=6)
    block = {
        "dataset": "cifar100",
        "val_size": 4,
        "cifar100": {"root": str(tmp_path / "c100"), "layout": "auto", "download": False},
    }
    splits, meta = build_dataset(checked_block(block, "data"), seed=0)
    write_dataset(tmp_path / "cache", splits, meta)
    meta = load_meta(tmp_path / "cache")
    assert meta["dataset"] == "cifar100" and meta["classes"] == FINE
    assert meta["image_size"] == [32, 32]
    assert meta["sizes"] == {"test": 6, "train": 16, "val": 4}
    train = load_split(tmp_path / "cache", "train")
    assert train.images.shape == (16, 3, 32, 32) and int(train.labels.max()) < 100
    again, _ = build_dataset(checked_block(block, "data"), seed=0)
    np.testing.assert_array_equal(again["train"]["images"], splits["train"]["images"])


# --- errors: what was looked for, and what to set ------------------------------------------------


def test_missing_root_says_what_was_looked_for_and_what_to_set(tmp_path):
    root = tmp_path / "nowhere"
    with pytest.raises(DataNotFoundError) as info:
        load_cifar100(root)
    message = str(info.value)
    assert message.startswith(f"no CIFAR-100 found: expected CIFAR-100 under {root}")
    assert f"{root}/cifar-100-python/ with train, test and meta" in message
    assert "set data.cifar100.download: true to let torchvision download it there" in message
    assert f"{root}/train/<class>/*.png|jpg" in message
    assert "Point data.cifar100.root in the config at such a directory" in message
    assert "cifar10." not in message and "CIFAR-10 " not in message


def test_download_off_and_incomplete_torchvision_layout(tmp_path):
    """layout torchvision without download: torchvision's "not found" error, ours around it."""
    with pytest.raises(DataNotFoundError, match=r"^CIFAR-100 train split is missing or corrupted") as info:
        load_cifar100(tmp_path, layout="torchvision", download=False)
    assert "data.cifar100.download: true" in str(info.value)
    (tmp_path / "cifar-100-python").mkdir()
    with pytest.raises(DataNotFoundError, match="CIFAR-100 train split is missing or corrupted"):
        load_cifar100(tmp_path)  # auto: the directory is there, its files are not


@pytest.mark.parametrize(
    "present, load, hint",
    [
        ("cifar-10-batches-py", load_cifar100, "which is CIFAR-10, not CIFAR-100: set data.dataset: cifar10"),
        ("cifar-100-python", load_cifar10, "which is CIFAR-100, not CIFAR-10: set data.dataset: cifar100"),
    ],
)
def test_the_other_cifar_at_the_root_is_named(tmp_path, present, load, hint):
    (tmp_path / present).mkdir()
    with pytest.raises(DataNotFoundError, match=r"^no CIFAR-10{1,2} found") as info:
        load(tmp_path)
    assert f"{tmp_path} holds {present}/, {hint}" in str(info.value)


def test_wrong_layout(tmp_path, rng):
    with pytest.raises(ValueError, match=r"data\.cifar100\.layout: 'folders' is not one of"):
        load_cifar100(tmp_path, layout="folders")
    write_image_folders(tmp_path, rng, sizes=(("train", 1),))
    with pytest.raises(DataNotFoundError, match=rf"^{tmp_path}/test does not exist; expected CIFAR-100"):
        load_cifar100(tmp_path, layout="imagefolder")
    with pytest.raises(DataNotFoundError, match="missing or corrupted.*\n.*cifar-100-python"):
        load_cifar100(tmp_path, layout="torchvision")  # image folders read as torchvision's layout
    (tmp_path / "test").mkdir()
    with pytest.raises(DataNotFoundError, match=rf"^{tmp_path}/test: .*expected CIFAR-100"):
        load_cifar100(tmp_path)  # auto: image folders, but test/ holds no class folder
    with pytest.raises(ValueError, match=r"not one of \('cifar10', 'cifar100', 'mnist'\)"):
        load_cifar("cifar1000", tmp_path)


def test_prepare_data_without_cifar100_is_one_clear_error(tmp_path):
    block = {"dataset": "cifar100", "cifar100": {"root": str(tmp_path / "nowhere")}}
    result = subprocess.run(
        [sys.executable, "-m", "intertwine", "prepare-data", "--config", json.dumps(block)]
        + ["--out", str(tmp_path / "cache")],
        check=False,
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "intertwine prepare-data: error: no CIFAR-100 found" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "cache").exists()


# --- the config ----------------------------------------------------------------------------------


def tiny_config(cifar100_root=None):
    """The tiny test config, validated; on CIFAR-100 from ``cifar100_root`` when given."""

    from intertwine.workflow.settings import validate_config

    config = yaml.safe_load((REPO / "tests" / "configs" / "tiny.yaml").read_text())
    if cifar100_root is not None:
        config["data"] = {"dataset": "cifar100", "val_size": 4, "cifar100": {"root": str(cifar100_root)}}
        for spec in config["zoo"]["variants"].values():
            spec["num_classes"] = 100
    validate_config(config)
    return config


def test_config_with_cifar100_validates_and_plans():
    from intertwine.workflow.cli import build_parser
    from intertwine.workflow.plan import Plan
    from intertwine.workflow.settings import checked_block

    config = tiny_config("data/cifar100")
    assert config["data"]["cifar100"] == {"root": "data/cifar100", "layout": "auto", "download": False}
    assert config["data"]["dataset"] == "cifar100"
    # CIFAR-100 adds no plan error to those the tiny config has (none, once its stages agree).
    assert Plan(copy.deepcopy(config)).errors() == Plan(tiny_config()).errors()
    with pytest.raises(ValueError, match=r"config key data\.cifar100: Additional properties.*'roots'"):
        checked_block({"dataset": "cifar100", "cifar100": {"roots": "x"}}, "data")
    with pytest.raises(ValueError, match=r"config key data\.cifar100\.layout: 'pickle' is not one of"):
        checked_block({"dataset": "cifar100", "cifar100": {"layout": "pickle"}}, "data")
    parsers = next(a for a in build_parser()._actions if a.dest == "command").choices
    dataset = next(a for a in parsers["zoo-figure"]._actions if "--dataset" in a.option_strings)
    assert "cifar100" in dataset.choices


def test_gated_cifar100_config_plans_the_ensembles_and_resnet110():
    """config/gated_cifar100.yaml, as config/paper.yaml on CIFAR-10: 16 C1GAPs per budget for
    C1GAP-16-ENS (Table III) and ResNet-110 with its DGN and DLGN (Table II), on Table II's
    recipe, every variant with 100 classes (a plan only: nothing is trained)."""
    from intertwine.workflow.plan import Plan
    from intertwine.workflow.settings import validate_config

    config = yaml.safe_load((REPO / "config" / "gated_cifar100.yaml").read_text())
    validate_config(config)
    plan = Plan(config)
    assert plan.errors() == []
    assert plan.gated_ensembles == [f"results/gated/{v}/ensemble.parquet" for v in ("c1gap", "c1gap_e2000")]
    for variant in ("c1gap", "c1gap_e2000"):
        assert len(plan.zoo_seeds(variant)) == 16 and len(plan.ensemble_checkpoints(variant)) == 16
    resnets = [
        "resnet110",
        "resnet110_dgn_x",
        "resnet110_dgn_ones",
        "resnet110_dlgn_x",
        "resnet110_dlgn_ones",
    ]
    assert set(resnets) <= set(config["gated"]["variants"])
    for variant in resnets:
        assert plan.spec(variant)["arch"] == "resnet110" and plan.spec(variant)["num_classes"] == 100
        assert plan.train_block(variant) == plan.train_block("vgg16")  # Table II's recipe
        assert len(plan.zoo_seeds(variant)) == 5
    assert {spec["num_classes"] for spec in config["zoo"]["variants"].values()} == {100}


def test_zoo_needs_num_classes_100(tmp_path, rng, no_md5):
    """A variant left at the default num_classes (10) stops with the error naming it; 100 trains."""
    from intertwine.workflow.job import Job
    from intertwine.workflow.stages.zoo.job import train_member

    write_cifar100_pickles(tmp_path / "c100", rng, n_train=24, n_test=8)
    block = {"dataset": "cifar100", "val_size": 8, "cifar100": {"root": str(tmp_path / "c100")}}
    write_dataset(tmp_path / "cache", *build_dataset(checked_block(block, "data"), seed=0))
    spec = {"arch": "myrtle", "width_multiplier": 0.125}
    training = {"epochs": 1, "batch_size": 8}
    with pytest.raises(ValueError, match=r"num_classes 10 but the data set has 100 classes; set num_classes"):
        train_member(Job("cpu", tmp_path / "cache"), "m", 0, spec, training)
    checkpoint, metrics = train_member(
        Job("cpu", tmp_path / "cache"), "m", 0, spec | {"num_classes": 100}, training
    )
    assert checkpoint["state_dict"]["fc.weight"].shape[0] == 100 and len(metrics) == 1


@pytest.mark.workflow
def test_workflow_data_rule_writes_results_data_cifar100(tmp_path, rng):
    # every one of CIFAR-100's classes (the plan refuses a copy that lacks one), an image each
    classes = [f"class{c:03d}" for c in range(100)]
    write_image_folders(tmp_path / "c100", rng, sizes=(("train", 1), ("test", 1)), classes=classes)
    config = tmp_path / "config.yaml"
    # Only what the data rule reads; every other block takes the schema's defaults (a whole
    # config: not merged onto config/config.yaml, whose variants have 10 classes), the symmetry
    # check's images within the copy's 100 test images.
    data = {"dataset": "cifar100", "val_size": 4, "cifar100": {"root": str(tmp_path / "c100")}}
    myrtle = {"arch": "myrtle", "width_multiplier": 0.125, "num_classes": 100}
    whole = {
        "replaces_default": True,
        "device": "cpu",
        "data": data,
        "zoo": {"variants": {"myrtle": myrtle}},
        "symmetry": {"images": 64},
    }
    config.write_text(yaml.safe_dump(whole))
    env = os.environ | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(REPO / "workflow" / "Snakefile"),
            "-d",
            str(tmp_path / "run"),
        ]
        + ["--configfile", str(config), "--cores", "1", "prepare_data"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    meta = load_meta(tmp_path / "run" / "results" / "data" / "cifar100")
    assert meta["dataset"] == "cifar100" and meta["classes"] == classes
    assert meta["sizes"] == {"test": 100, "train": 96, "val": 4}
    assert (tmp_path / "run" / "results" / "logs" / "data" / "cifar100.log").exists()
