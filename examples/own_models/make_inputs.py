"""The example's inputs, made in a folder of your choice: ``images/`` (an image-folder data set of 3
classes, PNGs of two sizes, from intertwine's procedural shapes) and ``checkpoints/`` (2 state dicts
of ``mynets.small_cnn`` trained elsewhere: here, freshly initialised and saved two ways).

    python examples/own_models/make_inputs.py OUT
"""

import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).parent))  # mynets

from mynets import small_cnn  # noqa: E402

from intertwine.data.shapes import CLASSES, generate_shapes  # noqa: E402


def write_images(out: Path, per_class: dict[str, int]) -> None:
    """``out/{train,test}/<class>/*.png`` for the first 3 shape classes; every other image 20 px, the
    rest 24 px (so the data set's image_size must be set)."""
    classes = CLASSES[:3]
    for split, count in per_class.items():
        seed = 0 if split == "train" else 1
        drawn = generate_shapes(count * 4 * len(CLASSES), seed, image_size=24)
        kept = {name: 0 for name in classes}
        for image, label in zip(drawn["images"], drawn["labels"]):
            name = CLASSES[int(label)]
            if name not in kept or kept[name] == count:
                continue
            folder = out / split / name
            folder.mkdir(parents=True, exist_ok=True)
            picture = Image.fromarray(np.ascontiguousarray(image.transpose(1, 2, 0)))
            if kept[name] % 2:
                picture = picture.resize((20, 20))
            picture.save(folder / f"{kept[name]:03d}.png")
            kept[name] += 1


def write_checkpoints(out: Path) -> None:
    """Two members of small_cnn(width 4, 3 classes): a bare state dict and a training loop's dict."""
    out.mkdir(parents=True, exist_ok=True)
    for seed in (0, 1):
        torch.manual_seed(100 + seed)
        state = small_cnn(num_classes=3, width=4).state_dict()
        saved = state if seed == 0 else {"model_state_dict": state, "epoch": 7}
        torch.save(saved, out / f"member{seed}.pt")


if __name__ == "__main__":
    root = Path(sys.argv[1])
    write_images(root / "images", {"train": 40, "test": 16})
    write_checkpoints(root / "checkpoints")
