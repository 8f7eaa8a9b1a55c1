"""The excitation-pullback paper's own experiment, on fakes: torchvision models with random weights
saved to a local file, an image folder in Imagenette's layout, small images."""

import math

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from intertwine.pullback import measurements as study
from intertwine.workflow.job import Job
from intertwine.models import imagenet
from intertwine.workflow.stages.pullback.tables import PULLBACK_EXTERNAL
from intertwine.workflow.tables import to_table

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
WNIDS = list(imagenet.IMAGENETTE_CLASSES)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Imagenette's layout: four WordNet-id folders of two random RGB images each (odd sizes)."""
    root = tmp_path_factory.mktemp("imagenette") / "val"
    rng = np.random.default_rng(0)
    for wnid in WNIDS[:4]:
        (root / wnid).mkdir(parents=True)
        for k in range(2):
            pixels = rng.integers(0, 256, (40 + k, 52, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / wnid / f"img{k}.png")
    return root


def _weights(tmp_path, arch):
    torch.manual_seed(0)
    path = tmp_path / f"{arch}.pth"
    torch.save(imagenet.build_imagenet_model(arch).state_dict(), path)
    return str(path)


def test_densenet_release_key_names_are_read(tmp_path):
    """torchvision's DenseNet121 release file names a layer's parts norm.1, conv.1, ...: they load."""
    torch.manual_seed(0)
    state = imagenet.build_imagenet_model("densenet121").state_dict()
    old = {
        k.replace("norm1.", "norm.1.").replace("conv2.", "conv.2."): v
        for k, v in state.items()
        if not k.endswith("num_batches_tracked")  # the 2017 release files have no counter
    }
    assert old != dict(state)
    torch.save(old, tmp_path / "densenet121.pth")
    model = imagenet.load_imagenet_model("densenet121", tmp_path / "densenet121.pth")
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


def test_the_papers_grid_on_a_fake_imagenette(tmp_path, folder):
    from intertwine.workflow.stages.pullback.figures import pullback_external as figure
    from intertwine.workflow.stages.pullback.job import pullback_external

    torch.set_num_threads(1)
    entry = {
        "images": str(folder),
        "classes": 2,
        "per_class": 1,
        "extra_targets": 1,
        "size": 32,
        "resize": 36,
    }
    block = {"pgd": {"steps": 2}, "temperature": 0.3, "functional": "soft", "pool_padding": "zeros"}
    job = Job("cpu", None, 0, lambda message: None)
    table, arrays = pullback_external(job, "fake", "resnet18", _weights(tmp_path, "resnet18"), entry, block)
    to_table(table, PULLBACK_EXTERNAL)
    # 4 folders, 2 chosen (0 and 2, spread), each toward both classes and one random other
    chosen = [imagenet.IMAGENETTE_CLASSES[WNIDS[0]], imagenet.IMAGENETTE_CLASSES[WNIDS[2]]]
    assert sorted(set(table["label"])) == sorted(chosen)
    targets = list(dict.fromkeys(table["target"]))
    assert targets[:2] == chosen and len(targets) == 3 and targets[2] not in chosen
    assert len(table) == len(study.MODES) * 2 * 3
    assert table[["target_prob_before", "target_prob"]].stack().between(0, 1).all()
    assert all(len(steps) == 2 for steps in table["target_prob_by_step"])
    assert table["pgd_epsilon"].iloc[0] == pytest.approx(100 * math.sqrt(32 * 32 * 3 / 150528))
    assert arrays["images"].shape == (2, 3, 32, 32) and arrays["targets"][0] == "tench"
    for mode, moved in arrays["perturbed"].items():
        assert moved.shape == (2, 3, 3, 32, 32)
        # each perturbation stays in the PGD ball (images in [-1, 1]: twice the [0, 1] difference)
        change = 2 * (moved - arrays["images"][:, None]).reshape(6, -1)
        assert (np.linalg.norm(change, axis=1) <= table["pgd_epsilon"].iloc[0] + 1e-4).all(), mode
        assert np.abs(change).max() > 0
    # the modes differ: the pullbacks are not the gradient
    assert not np.allclose(arrays["perturbed"]["gradient"], arrays["perturbed"]["global"])
    assert len(figure(arrays).axes) == 3 * 2 * 4 and len(figure(arrays, perturbed=True).axes) == 24
    # the paper's Figure 2: each (image, target)'s raw pullback at the clean image, per mode
    for mode, raw in arrays["pullbacks"].items():
        assert raw.shape == (2, 3, 3, 32, 32) and np.isfinite(raw).all() and np.abs(raw).max() > 0, mode
    assert not np.allclose(arrays["pullbacks"]["gradient"], arrays["pullbacks"]["global"])
    assert len(figure(arrays, pullbacks=True).axes) == 24


def test_the_papers_draw_seeds_the_loaders_permutation(folder):
    """draw_seed: the first image of each class in torch.randperm's order of every image (classes
    and files sorted, as ImageFolder), with the generator seeded as the paper seeds its loader;
    None: the first by file name."""
    from intertwine.data.image_folder import load_folder_images

    every = [(wnid, f"img{k}.png") for wnid in WNIDS[:4] for k in range(2)]
    order = torch.randperm(len(every), generator=torch.Generator().manual_seed(314)).tolist()
    shuffled = [every[k] for k in order]
    chosen = [WNIDS[0], WNIDS[2]]
    expected = [next(name for folder, name in shuffled if folder == wnid) for wnid in chosen]
    _, owners, files = load_folder_images(folder, chosen, 1, 32, 36, draw_seed=314)
    assert owners == chosen and files == expected
    _, _, first = load_folder_images(folder, chosen, 1, 32, 36)
    assert first == ["img0.png", "img0.png"]
    draws = {tuple(load_folder_images(folder, chosen, 1, 32, 36, draw_seed=s)[2]) for s in range(8)}
    assert len(draws) > 1  # the seed matters


@pytest.mark.parametrize("arch", ["vgg11_bn", "densenet121"])
def test_the_papers_other_architectures_run(tmp_path, folder, arch):
    """VGG11_BN (max-pools) and DenseNet121 (a functional ReLU, left hard as the released code
    leaves it) with random weights, one class, one step."""
    from intertwine.workflow.stages.pullback.job import pullback_external

    torch.set_num_threads(1)
    entry = {"images": str(folder), "classes": 1, "extra_targets": 1, "size": 32, "resize": 32}
    block = {"pgd": {"steps": 1}, "functional": "hard"}
    table, _ = pullback_external(
        Job("cpu", None, 0, lambda m: None), "f", arch, _weights(tmp_path, arch), entry, block
    )
    assert len(table) == len(study.MODES) * 2 and (table["functional"] == "hard").all()


def test_bad_folders_and_labels_are_named(tmp_path, folder):
    from intertwine.data.image_folder import class_folders
    from intertwine.workflow.stages.pullback.job import pullback_external

    with pytest.raises(FileNotFoundError, match="no such image folder"):
        class_folders(tmp_path / "missing")
    other = tmp_path / "other"
    (other / "cats").mkdir(parents=True)
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(other / "cats" / "a.png")
    entry = {"images": str(other), "size": 8, "resize": 8}
    with pytest.raises(ValueError, match=r"folder 'cats' .* pullback.external.f.labels"):
        pullback_external(Job("cpu", None, 0, lambda m: None), "f", "resnet18", "unused.pth", entry, {})
    pd.DataFrame()  # keeps the import used where the test above is skipped
