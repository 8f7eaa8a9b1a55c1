"""Where this project departs from a paper's protocol: one list.

Each row is a config switch whose paper value is one of its options, with the paper's sentence
(or, where the paper states nothing, what its released code does), our value and why.
`config/config.yaml` (CPU-sized) uses ours, and `config/paper.yaml` the paper's, but for a row
that keeps ours there and says why; `tests/test_deviations.py` checks both against this list.
The table of docs/deviations.md is `markdown_table()`, checked by the same test.
A row without a key is a choice where the paper is silent or contradicts itself: documented, with
no switch to set.
"""

from __future__ import annotations

import dataclasses
from typing import Any

GODFREY = "Godfrey et al. 2022"
GATED = "Lakshminarayanan & Singh"
PULLBACK = "Satkiewicz (excitation pullbacks)"


@dataclasses.dataclass(frozen=True)
class Deviation:
    """One departure: the config ``key`` (dotted; ``*`` stands for every zoo variant that has the
    option), the ``paper``'s value and ``ours``, where the paper says so (``source``), what it
    says (``sentence``) and why we offer another value (``why``). ``paper_config_keeps_ours``:
    `config/paper.yaml` too uses ours (``why`` says why)."""

    key: str | None
    paper: Any
    ours: Any
    source: str
    sentence: str
    why: str
    paper_config_keeps_ours: bool = False

    @property
    def in_paper_config(self) -> Any:
        """The value `config/paper.yaml` uses."""
        return self.ours if self.paper_config_keeps_ours else self.paper


DEVIATIONS = (
    Deviation(
        "stitching.permutation_update",
        "paper",
        "mirror",
        f"{GODFREY}, appendix D.2.1",
        '"after each gradient descent step we project P back onto B by P <- ReLU(P) followed by P <- sink(P)"',
        "P takes its own multiplicative (mirror-descent) step, so its size does not depend on the "
        "learning rate and P approaches a vertex instead of diffusing to the centre "
        "(docs/stages/stitching.md: G_ReLU stitching that converges)",
    ),
    Deviation(
        "stitching.softsort_hardening",
        1,
        0.1,
        f"{GODFREY}, appendix D.2.2",
        "SoftSort at one temperature tau (no annealing is described)",
        "at a fixed tau P stays about half off the permutation it is rounded to; hardening tau to "
        "0.1 tau over training makes the layer trained last nearly that permutation",
    ),
    Deviation(
        "stitching.batch_norm_refresh",
        "grelu",
        "every_method",
        f"{GODFREY}, appendix D.2.1",
        "a no-gradient epoch recomputes the batch-norm statistics with the rounded P of the G_ReLU layer",
        "a trained full or low-rank layer shifts the statistics of g's later batch norms too; "
        "refreshing after every method compares the methods alike",
    ),
    Deviation(
        "stitching.init",
        "random",
        "match",
        f"{GODFREY}, appendix D.2 and released code",
        "stitching layers are trained from a random start (Kaiming-uniform; G_ReLU at the centre of "
        "the Birkhoff polytope)",
        "a CPU budget of one epoch: each layer starts from the best layer of its class for a few "
        "hundred images (least squares, reduced-rank regression, Hungarian matching)",
    ),
    Deviation(
        "stitching.optimizer",
        "sgd",
        "adam",
        f"{GODFREY}, released code",
        "plain SGD at lr 1e-3 (the code; the text mentions momentum 0.9, the code uses none)",
        "at one epoch on real CIFAR-10 Adam reached lower penalties than SGD (docs/stages/stitching.md)",
    ),
    Deviation(
        "pairs_share_members",
        True,
        False,
        f"{GODFREY}, appendix D.1",
        "pairs are sampled uniformly with replacement from the zoo, the two models distinct, so two "
        "pairs may share a member",
        "pairs with no member in common are independent units for the claims' intervals (kept in "
        "config/paper.yaml too: 100 members give 50 such pairs, more than the 32 the paper used); "
        "with `true` the claims treat each member as a cluster",
        paper_config_keeps_ours=True,
    ),
    Deviation(
        "zoo.variants.*.gated.pools",
        "average",
        "gated_max",
        f"{GATED}, the models of Tables I-III",
        "average pooling (C4GAP: global average pooling after the last layer; VGG16 with average pools)",
        "a Myrtle's max-pools kept as gated max-pools learn the CPU-sized shapes data; with average "
        "pools it reaches 27 % training accuracy in 150 steps, 86 % with gated max-pools",
    ),
    Deviation(
        "zoo.variants.*.tokenizer_norm",
        False,
        True,
        f"{GODFREY}, appendix D.4 (CCT of Hassani et al.)",
        "the Compact Convolutional Transformer's tokenizer: convolution, ReLU, max-pool",
        "an instance norm after each tokenizer layer takes the CPU zoo's 4 epochs from 20-30 % to "
        "60-77 % on shapes",
    ),
    Deviation(
        "pullback.functional",
        "hard",
        "soft",
        f"{PULLBACK}, released code",
        "nn.ReLU and nn.MaxPool2d modules are replaced by soft ones; a functional call (DenseNet121's "
        "last ReLU, F.relu in its forward) keeps its hard gradient",
        "every ReLU of the network is a gate of the paper's definition, wherever the forward calls "
        "it; `hard` reproduces the released code (no zoo variant of the stage calls one)",
    ),
    Deviation(
        None,
        None,
        "the first image of each class in torch.randperm's order of every image",
        f"{PULLBACK}, Sections 5.1 and 5.2 (the paper is silent on the mapping)",
        '"one random image from each of the five selected classes"; "We seed the dataloader with '
        'torch.Generator().manual_seed(314)."',
        "the text does not say how the seeded loader's order picks the images: "
        "`pullback.external.<name>.draw_seed` (default the paper's 314) shuffles every image of "
        "every class folder (sorted as torchvision's ImageFolder) as a shuffling DataLoader seeded so "
        "does and takes each chosen class's first; null takes the first by file name",
    ),
    Deviation(
        None,
        None,
        "f's block input",
        f"{GODFREY}, appendix D.2 (the paper is silent)",
        "stitching inside a residual block: the paper does not say what the skip path carries",
        "the skip path carries f's tensor (the block input of the stitched-from network), which "
        "raises every method's inside-block penalty (C3)",
    ),
    Deviation(
        None,
        None,
        "every activation a gate, the residual output's included",
        f"{GATED}, Table II (the paper is silent)",
        "ResNet-110 as a DGN and a DLGN: the paper does not say which of its activations become gates",
        "every ReLU of He et al.'s ResNet-110 (the stem's, each block's first and the one after the "
        "residual sum) is replaced by the gate of the same site of the feature network, so that the "
        "value network is linear given its gates, as in the plain stacks (intertwine.models.gated_resnet)",
    ),
    Deviation(
        None,
        "RandAugment, random-resized crops, 10 cool-down epochs, the rate set once per epoch",
        "translations and flips, the rate set at every step",
        f"{GODFREY}, appendix D.4; Hassani et al.'s cct_7-3x1_cifar10_300epochs config",
        "the CCT (six transformer blocks) is trained with the recipe of Hassani et al. (AdamW, lr "
        "55e-5, weight decay 6e-2, mixup, CutMix, label smoothing, cosine schedule)",
        "config/paper.yaml trains the CCT with what the sentence names (zoo.training: optimizer "
        "adamw, lr_schedule cosine, label_smoothing, mixup_alpha, cutmix_alpha, mixing_epochs, at "
        "their config's values); the rest of their config (RandAugment rand-m9-mstd0.5-inc1, "
        "random-resized crops of scale 0.8-1, timm's per-epoch rate and cool-down) is not in the "
        "zoo's data path",
    ),
    Deviation(
        None,
        "64/128/256/512",
        "64/128/256/512",
        f"{GODFREY}, appendix D.1 (contradictory)",
        "ResNet18's schematic lists four stages of 64/128/256/512 channels; another passage names "
        "three blocks of 64/128/256",
        "we follow the schematic, the standard CIFAR ResNet18 of He et al. (11,173,962 parameters)",
    ),
    Deviation(
        None,
        "not stated",
        "a bias and batch norm per convolution",
        f"{GATED}, Tables I-III (the paper is silent)",
        "C4GAP, C1GAP and VGG16: 3x3 convolutions with ReLU and a global average pool; whether a "
        "layer has a bias or batch normalisation is not stated",
        "ours, as in the zoo's other networks (intertwine.models.plain); a variant's "
        "`batch_norm: false` removes the batch norm (the bias stays)",
    ),
    Deviation(
        None,
        "FC1, FC2",
        "one linear head",
        f"{GATED}, Fig. 2",
        "the schematic draws two fully connected layers after the global average pool; the text "
        "gives no widths for them",
        "one linear layer after the global average pool, as in Myrtle, so that the weight-space "
        "action and the gated forms treat both alike",
    ),
    Deviation(
        None,
        "not stated (Table II: the cited ResNet recipe)",
        "translations of 2 px and flips (Table II: 4 px)",
        f"{GATED}, Tables I-III (silent but for Table II's reference recipe)",
        "no augmentation is stated for Tables I and III; Table II follows the ResNet recipe it cites "
        "(He et al.: 4-pixel padded crops and flips)",
        "the zoo's augmentation for Tables I and III; Table II's recipe uses He et al.'s 4-pixel "
        "translations (config/paper.yaml's table_ii)",
    ),
    Deviation(
        None,
        "not stated",
        "45,000 / 5,000 train / validation, best validation epoch",
        f"{GATED}, Tables I-III (the paper is silent)",
        "test accuracies are reported; no validation split and no selection of the reported epoch are stated",
        "the zoo's protocol for every stage (data.val_size, zoo.training.select_on): the test set "
        "never chooses an epoch",
    ),
    Deviation(
        None,
        "not stated",
        "batch norm at its initial statistics",
        f"{GATED}, DGN-FR (the paper is silent)",
        "FR: the feature network stays at its random initialisation; what its batch norm does is not stated",
        "a frozen feature network stays in evaluation mode, so batch norm keeps mean 0 and variance "
        "1 (measured by us: 26 % of a C4GAP's layer-4 gates are constant across inputs)",
    ),
    Deviation(
        None,
        "LayerNorm",
        "batch norm, its statistics recomputed at each point",
        'Ainsworth et al. 2023 ("Git Re-Basin"), their ResNet20 code',
        "their ResNet20 normalises with LayerNorm, which has no running statistics to interpolate",
        "the zoo's networks have batch norm (the Godfrey et al. protocol); interpolated running "
        "statistics collapse the variance (Jordan et al., REPAIR), so each point recomputes them on "
        "training images (connectivity.corrections: reset; repair is Jordan et al.'s per-channel "
        "correction, which also serves networks without batch norm)",
    ),
    Deviation(
        None,
        "a 3x3 convolution and LayerNorm on the shortcut",
        "option A (zero padding)",
        'Ainsworth et al. 2023 ("Git Re-Basin"), their ResNet20 code',
        "where a stage changes width, the shortcut is a convolution; their code calls the original "
        "zero-padding shortcut not easily compatible with weight matching",
        "our ResNet20 is He et al.'s with option A; the alignment ties the next stream's middle "
        "channels to the previous stream's element exactly (intertwine.symmetry, Remark 3.6)",
    ),
)


def paper_value(key: str) -> Any:
    """The paper's value of the switch ``key`` (a dotted config key of ``DEVIATIONS``)."""
    return next(d.paper for d in DEVIATIONS if d.key == key)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def markdown_table() -> str:
    """The table of deviations (docs/deviations.md), one row per entry of ``DEVIATIONS``."""
    lines = [
        "| switch | paper | ours | config/paper.yaml | where | what the paper does | why ours |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for d in DEVIATIONS:
        key = f"`{d.key}`" if d.key else "(no switch)"
        lines.append(
            f"| {key} | {_cell(d.paper)} | {_cell(d.ours)} | {_cell(d.key and d.in_paper_config)} | "
            f"{d.source} | {d.sentence} | {d.why} |"
        )
    return "\n".join(lines)
