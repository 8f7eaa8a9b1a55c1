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
GATED = "Lakshminarayanan & Singh 2021"
PULLBACK = "Satkiewicz (excitation pullbacks)"
FENG = "Feng & Kolter (DEQ-NTK)"


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
        '"after each gradient descent step we project P back onto B by the operation P ← ReLU(P) followed '
        'by P ← sink(P)"',
        "P takes its own multiplicative (mirror-descent) step, so its size does not depend on the "
        "learning rate and P approaches a vertex instead of diffusing to the centre "
        "(docs/stages/stitching.md: G_ReLU stitching that converges)",
    ),
    Deviation(
        "stitching.softsort_hardening",
        1,
        0.1,
        f"{GODFREY}, appendix D.2.2",
        '"we were only able to obtain reasonable results when tuning it according to τ ≈ 1/n_l": one '
        "temperature (no annealing is described)",
        "at a fixed tau P stays about half off the permutation it is rounded to; hardening tau to "
        "0.1 tau over training makes the layer trained last nearly that permutation",
    ),
    Deviation(
        "stitching.batch_norm_refresh",
        "grelu",
        "every_method",
        f"{GODFREY}, appendix D.2.1",
        '"before evaluating the stitched model on the CIFAR-10 validation set, we perform a nogradient '
        'epoch on the training data with stitching layer P_eval": after the G_ReLU layer only',
        "a trained full or low-rank layer shifts the statistics of g's later batch norms too; "
        "refreshing after every method compares the methods alike",
    ),
    Deviation(
        "stitching.init",
        "random",
        "match",
        f"{GODFREY}, the released code (the text is silent)",
        "the text does not say how stitching layers start; the released code starts them at random "
        "(the G_ReLU layer's start: `stitching.grelu_start`)",
        "a CPU budget of one epoch: each layer starts from the best layer of its class for a few "
        "hundred images (least squares, reduced-rank regression, Hungarian matching)",
    ),
    Deviation(
        "stitching.optimizer",
        "sgd",
        "adam",
        f"{GODFREY}, appendix D.2, D.2.1 (contradictory); the released code",
        '"we use vanilla SGD with no momentum" (D.2) and "using SGD with momentum 0.9" (D.2.1): the '
        "text contradicts itself; the released code: plain SGD at lr 1e-3, no momentum",
        "at one epoch on real CIFAR-10 Adam reached lower penalties than SGD (docs/stages/stitching.md)",
    ),
    Deviation(
        "pairs_share_members",
        True,
        False,
        f"{GODFREY}, appendix D.1",
        '"we sample pairs of models from these "zoos" uniformly with replacement (but of course making '
        'sure that the two models in the pair are distinct)": two pairs may share a member',
        "pairs with no member in common are independent units for the claims' intervals (kept in "
        "config/paper.yaml too: 100 members give 50 such pairs, more than the 32 the paper used); "
        "with `true` the claims treat each member as a cluster",
        paper_config_keeps_ours=True,
    ),
    Deviation(
        "zoo.training.select_on",
        "test",
        "val",
        f"{GODFREY}, appendix D.1; the released code",
        '"we save the weights with best validation accuracy" (the paper calls CIFAR-10\'s test set its '
        'validation set: "we report accuracy on the regular CIFAR10 validation set", D.5); the released '
        "code selects on the test set",
        "the kept weights are chosen on 5,000 training images held out (data.val_size), so the test "
        "accuracies and penalties the claims read were not selected on the images that measure them; "
        "config/paper.yaml keeps `val` for that reason, `test` reproduces the released code",
        paper_config_keeps_ours=True,
    ),
    Deviation(
        "zoo.training.weight_decay",
        0.0,
        0.0,
        f"{GODFREY}, appendix D.1; the released code",
        "\"All models were trained for 50 epochs using the Adam optimizer with PyTorch's default "
        "settings.\" (PyTorch's Adam: weight decay 0); the released code: 1e-4",
        "we follow the text; `weight_decay: 0.0001` reproduces the released code",
    ),
    Deviation(
        None,
        "the best test epoch (the released code)",
        "the last epoch",
        f"{GODFREY}, appendix D.2 (the text is silent); the released code",
        '"For stitching layers, we train for 20 epochs with batch size 32 and learning rate 0.001 (with '
        "no drops)\": the text does not say which epoch's layer is measured; the released code keeps "
        "the layer of its best test epoch",
        "the layer after the last epoch is measured: an epoch chosen on the test set would select the "
        "penalty on the images that measure it (no switch)",
    ),
    Deviation(
        "stitching.grelu_start",
        "random",
        "centre",
        f"{GODFREY}, appendix D.2.1 (the text is silent); the released code",
        "the text does not say where P starts; the released code starts it at a random doubly "
        "stochastic matrix (ours: Sinkhorn iterations of uniform [0, 1) entries)",
        "the centre of the polytope (plus a little seeded noise) is as far from every permutation, so "
        "the start favours none; with `init: match` (ours) P starts at the matched permutation either way",
    ),
    Deviation(
        "stitching.softsort_rounding",
        "argmax",
        "hungarian",
        f"{GODFREY}, appendix D.2.2",
        '"At validation time, we threshold P to an actual permutation matrix by applying arg max over '
        'rows as in [PE20]."',
        "the Birkhoff layer's rounding (\"At evaluation time, we threshold P to an actual permutation "
        "matrix via the Hungarian algorithm\", D.2.1) always gives a permutation; SoftSort's row argmax is "
        "the permutation sorting its scores, the same one, unless two scores tie (then `argmax` stops "
        "with an error)",
    ),
    Deviation(
        "zoo.variants.*.positional",
        "sinusoidal",
        "learnable",
        f"{GODFREY}, appendix D.4",
        '"We train 10 Compact Convolutional Transformers with sinusoidal positional encodings and six '
        'transformer blocks."',
        "a learnable embedding, CCT's default (Hassani et al.), for the CPU zoo (intertwine.models.cct: "
        "neither embedding trained the 4-epoch zoo without the tokenizer norm); config/paper.yaml's "
        "`cct` has six blocks and sinusoidal encodings",
    ),
    Deviation(
        None,
        "ImageNet ResNet-50, modified ResNet-50 and ConvNeXt on Broden",
        "CIFAR ResNet20 with and without the residual activation, and ConvNeXt, on generated shapes",
        f"{GODFREY}, section 6, appendices F.1, F.3",
        '"We compare three models trained on ImageNet: a ResNet-50, a modified ResNet-50 where we remove '
        "the ReLU on the residual outputs (training details in appendix F.3), and a ConvNeXt [Liu+22] "
        'analog of the ResNet-50" (section 6); "The Broden concept dataset, compiled by Bau et al., '
        'contains pixel-level annotations" (F.1); "We use pretrained weights for the ResNet-50 '
        '(unmodified) and ConvNeXt models from [MR10] and [Wig19] respectively." (F.3)',
        "the zoo's own networks, with and without the residual activation, dissected on `shapes` probe "
        "images with concept masks (config/paper.yaml: `dissection.probe: {source: shapes}`): Broden "
        "and ImageNet weights are not shipped, and the modified ResNet-50 is the authors' own training "
        "(F.3: 88 epochs on ImageNet). `dissection.probe.broden` and `dissection.external` (commented "
        "out in config/paper.yaml) dissect torchvision's ResNet-50 and ConvNeXt on Broden",
    ),
    Deviation(
        "zoo.variants.*.gated.pools",
        "average",
        "gated_max",
        f"{GATED}, Appendix C (the models of Tables I-III)",
        '"For VGG-16-DLGN in Figure 3 and DLGN-SF in Figure 4, the max-pooling were replaced by" ... '
        '"pooling so as to ensure that the feature network is entirely linear" (the word between: '
        "average); C4GAP ends in a global average pool",
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
        f"{GATED}, Section 3.2 and Table II (the paper is silent)",
        '"We consider 3 DNN architectures, C4GAP, VGG-16 and Resnet-110, and their DGN and DLGN '
        "counterparts.\" (Section 3.2): which of ResNet-110's activations become gates is not said",
        "every ReLU of He et al.'s ResNet-110 (the stem's, each block's first and the one after the "
        "residual sum) is replaced by the gate of the same site of the feature network, so that the "
        "value network is linear given its gates, as in the plain stacks (intertwine.models.gated_resnet)",
    ),
    Deviation(
        None,
        "RandAugment, random-resized crops, 10 cool-down epochs, the rate set once per epoch",
        "translations and flips, the rate set at every step",
        f"{GODFREY}, appendix D.4; Hassani et al.'s cct_7-3x1_cifar10_300epochs config",
        '"The average model accuracy was 98% using the distributed training-from-scratch recipe from '
        "[Has+21], which includes 6e-2 weight decay, augmentations (namely mixup [Zha+18] and CutMix "
        '[Yun+19]), label smoothing, and AdamW with a learning rate of 55e-5 with cosine scheduling."',
        "config/paper.yaml trains the CCT with what the sentence names (zoo.training: optimizer "
        "adamw, lr_schedule cosine, label_smoothing, mixup_alpha, cutmix_alpha, mixing_epochs, at "
        "their config's values); the rest of their config (RandAugment rand-m9-mstd0.5-inc1, "
        "random-resized crops of scale 0.8-1, timm's per-epoch rate and cool-down) is not in the "
        "zoo's data path",
    ),
    Deviation(
        None,
        "64/128/256",
        "64/128/256/512",
        f"{GODFREY}, appendix D.1",
        'ResNet18: "an ImageNet-style ResNet adapted to the input size of CIFAR-10 — much wider than the '
        'above (numbers of channels are 64, 128, 256 respectively in the 3 residual blocks)"; its '
        "schematic (Fig. 28a) is not in the text",
        "the standard CIFAR ResNet18 of He et al., four stages of 64/128/256/512 channels (11,173,962 "
        "parameters), the ImageNet-style ResNet18 adapted to CIFAR-10's input size",
    ),
    Deviation(
        None,
        "not stated",
        "a bias and batch norm per convolution",
        f"{GATED}, Tables I-III, Appendix C (silent but for VGG16's batch norms)",
        '"Batch normalisation layers were retained in VGG-16, VGG-16-DLGN and VGG-16-DLGN-SF" '
        "(Appendix C); for C4GAP and C1GAP neither a bias nor a batch norm is stated (Figure 3's "
        'caption gives their layers\' filters only: "have 128 filters each")',
        "ours, as in the zoo's other networks (intertwine.models.plain); a variant's "
        "`batch_norm: false` removes the batch norm (the bias stays)",
    ),
    Deviation(
        None,
        "FC1, FC2",
        "one linear head",
        f"{GATED}, Fig. 2's caption",
        '"On the right side is the CNN-GAP and its DGN used in [Lakshminarayanan and Singh, 2020]." '
        "Its CNN-GAP has two fully connected layers, FC_1 and FC_2, after the global average pool, "
        "widths not given; C4GAP's own schematic (Figure 3) is an image, not in the text",
        "one linear layer after the global average pool, as in Myrtle, so that the weight-space "
        "action and the gated forms treat both alike",
    ),
    Deviation(
        None,
        "not stated (Table II's code: the repository it names)",
        "translations of 2 px and flips (Table II and VGG-16-DLGN-SF: 4 px)",
        f"{GATED}, Appendix C (silent but for the repository Table II's code came from)",
        'no augmentation is stated; "the codes for experiments based on VGG-16 and Resnet-110 were '
        'refactored from following repository" (Appendix C: gahaalt/resnets-in-tensorflow2, whose '
        "training pads by 4 pixels, crops and flips)",
        "the zoo's augmentation for Tables I and III's C4GAP and C1GAP; Table II's recipe and "
        "VGG-16-DLGN-SF's (\"uses the same optimiser, batch size and learning rate schedule as the "
        "models in Table II\", Appendix C) use that repository's 4-pixel translations "
        "(config/paper.yaml's table_ii, table_ii_32)",
    ),
    Deviation(
        None,
        "64,000 iterations and 32 epochs",
        "64,000 iterations (Table II); 32 epochs, drops at 1/2 and 3/4 of them (VGG-16-DLGN-SF)",
        f"{GATED}, Appendix C (contradictory)",
        "Table II's schedule runs to iteration 64000 at batch 128 (164 epochs of 50,000 images), and "
        'the same paragraph ends "The models were trained till 32 epochs."; Table III gives '
        "VGG-16-DLGN-SF 32 epochs and Table II's schedule",
        "Table II follows the iterations (the schedule's drops at 32,000 and 48,000 would not come "
        "within 32 epochs); VGG-16-DLGN-SF trains Table III's 32 epochs with the drops scaled to "
        "them (config/paper.yaml's table_ii, table_ii_32)",
    ),
    Deviation(
        None,
        "not stated",
        "45,000 / 5,000 train / validation, best validation epoch",
        f"{GATED}, Figure 3's caption (the paper is silent on a validation split)",
        '"All columns (except the last) show the % test accuracy on CIFAR-10 and CIFAR-100"; no '
        "validation split and no selection of the reported epoch are stated",
        "the zoo's protocol for every stage (data.val_size, zoo.training.select_on): the test set "
        "never chooses an epoch",
    ),
    Deviation(
        None,
        "not stated",
        "batch norm at its initial statistics",
        f"{GATED}, Fig. 2's caption (the paper is silent on batch norm)",
        '"In the case of fixed random gates, the feature network is initialised at random and '
        'frozen"; what its batch norm does is not stated',
        "a frozen feature network stays in evaluation mode, so batch norm keeps mean 0 and variance "
        "1 (measured by us: 26 % of a C4GAP's layer-4 gates are constant across inputs)",
    ),
    Deviation(
        "deqntk.conv.readout",
        "trace",
        "gap",
        f"{FENG}, section 4 and appendix B",
        'the output is a dense readout of the last layer, "W (L+1) (α) ∈ R P ×Q is sampled from standard '
        'Gaussian distribution" (section 4), and "The final kernel value is Tr(Θ (L) (x, y))." (appendix B)',
        "global average pooling of the equilibrium, a structure the text says its derivation covers "
        '("for instance, CDEQ with global pooling layer", section 4), compares every pair of positions; '
        "trace is Tr(Kdot* . Theta + K*) of the text's eq. (21) (kernels.deq.conv_deq_ntk)",
    ),
    Deviation(
        "deqntk.conv.preprocessing",
        "raw",
        "centred",
        f"{FENG}, section 5",
        '"we normalize x s.t ,x ij , 2 = 1 for any i ∈ [P ], j ∈ [Q]" (nothing is said of what comes before)',
        "a black pixel of raw images has no direction (norm 0) and cannot be normalised; centred "
        "subtracts the training set's per-channel mean first",
        paper_config_keeps_ours=True,
    ),
    Deviation(
        None,
        "not in the text",
        "(.25, .75), (.6, .4), (.8, .2)",
        f"{FENG}, Fig. 1",
        '"In all experiments, the NTK is initialized with σ 2 W and σ 2 b in the title. For DEQ-NTK we set '
        "σ 2 U = σ 2 b -0.1 in the title, and the actual σ 2 b = 0.1.\" (the titles are in the figure's "
        "image: their values are not in the text)",
        "the panels (sigma_W^2, sigma_b^2) of config/paper.yaml (deqntk.depth.panels) take Table 2's three "
        "sigma_W^2, each with sigma_b^2 = 1 - sigma_W^2",
    ),
    Deviation(
        None,
        "a constant not given",
        "1",
        f"{FENG}, section 5",
        '"we add a regularization term r ∝ %Θ(x,x) n , where n is the size of the training data" (for the '
        "finite-depth NTK, whose kernel freezes)",
        "the factor on Theta(x, x) / n is ours (deqntk.depth.frozen_ridge)",
    ),
    Deviation(
        None,
        "[S]_ij at each tap (eqs. (14), (18), (20))",
        "1 / sqrt(n_p n_p') at the window's centre",
        f"{FENG}, section 4 and appendix B",
        "[S]_ij^2 is the number of in-bounds taps of the window at (i, j); as eqs. (18) and (20) are written "
        "it divides K at each tap before the trace over the window, which leaves Sigma(x, x) off 1 near "
        "the border (at (1, 1): 1/4 + 4/6 + 4/9 = 1.36), while appendix B chooses S because with 1/q^2 "
        '"only the variances that are away from the corners are normalized to 1, but the ones near the '
        'corner are not."',
        "the fan-in of position p divided out at p: Sigma(x, x) = 1 at every position, as the text's "
        "proof assumes; the kernel is the mean NTK of sampled networks so defined "
        "(tests/test_kernels_deq_conv_width.py)",
    ),
    Deviation(
        None,
        "20 iterations of Sigma; Theta by a sparse linear solve",
        "both iterated to a step of 1e-10",
        f"{FENG}, section 5 and appendix B.1",
        '"The fixed point Σ * (x, y) ∈ R P ×Q×P ×Q is approximated by running 20 iterations of eq. ( 17), '
        'eq. ( 18), and eq. ( 20)." "The actual CDEQ-NTK Θ(x, y) is then calculated by solving the sparse '
        'linear system eq. ( 21)."',
        "each image pair's iterations stop at their own first step of at most deqntk.tol (1e-10): "
        "32 / 72 / 147 steps, Sigma's and Theta's together, at Table 2's three settings on 8 x 8 "
        "images (benchmarks/deqntk_conv_cost.py)",
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
