"""What each job of the workflow asks a cluster for: where it runs, and how much memory and time.

Where: a job whose rule needs a GPU goes to the GPU partition with a GPU request, every other job
to the CPU partition, both named in the config's ``cluster`` block (with the account, GPU model and
QoS), which a user sets in a file of their own (``--configfile config/paper.yaml site.yaml``).

How much: estimated from what the job does (the images and epochs a zoo member trains at its
architecture's measured speed, the pairs and sites of a stitching job, the bytes of a DEQ-NTK
Gram block), times ``cluster.margin``; Snakemake multiplies both by the attempt when it retries a
failed job. Never below the floors, which cover what the default and tiny configs' jobs were
measured to use (at most 1.2 GB resident and 20 s each on a 2-core CPU).
"""

from __future__ import annotations

import dataclasses
import math

# The smallest request of any job: Python, torch and the data cache of a small config (the default
# config's jobs peaked at 0.6-1.2 GB resident); a job on a GPU also holds the CUDA libraries.
LIGHT_MB, TORCH_MB, CUDA_MB = 2_000, 4_000, 3_000
LIGHT_MINUTES, TORCH_MINUTES = 15, 30

# Training images per second of one job on one GPU (NVIDIA H100, float32, batch 32-128), the low end
# of the ranges measured by benchmarks/paper_scale.py (docs/cluster.md, "Training several members in one
# job"): {members in the job: images/s of all of them together}; a pack of K members runs at the
# rate of the largest measured K not above it. An architecture measured only alone gains nothing.
GPU_IMAGES_PER_SECOND = {
    "resnet20": {1: 2_200, 4: 4_100, 10: 8_200, 32: 19_400},
    "myrtle": {1: 5_100, 4: 8_400, 10: 13_100, 32: 23_000},
    "myrtle_wide": {1: 4_700},  # constant width 512: packing does not pay
    "c4gap": {1: 3_600, 4: 6_500},
    "c1gap": {1: 3_600, 4: 6_500},
    "resnet18": {1: 2_800, 4: 4_100, 10: 6_600, 32: 8_000},
    "vgg16": {1: 5_700},
    "vgg16_avg": {1: 5_700},
    "cct": {1: 1_500},
}
SLOWEST = 1_000  # an architecture not measured: below every measured one


@dataclasses.dataclass(frozen=True)
class Need:
    """What one job needs: resident memory in MB and wall time in minutes (before the margin)."""

    mem_mb: float
    minutes: float

    def __add__(self, other: Need) -> Need:
        return Need(self.mem_mb + other.mem_mb, self.minutes + other.minutes)


def images_per_second(arch: str, members: int, constant_width: bool = False) -> float:
    """The training rate of a job of ``members`` members of ``arch`` on one GPU (images/s, all members)."""
    rates = GPU_IMAGES_PER_SECOND.get("myrtle_wide" if constant_width else arch, {1: SLOWEST})
    return rates[max(k for k in rates if k <= members)]


def submission(cluster: dict, gpu: bool) -> dict:
    """The SLURM resources that say where a job runs, from the config's ``cluster`` block: the GPU
    partition and a GPU request when ``gpu``, else the CPU partition; the account and QoS when set.

    Parameters
    ----------
    cluster : the config's ``cluster`` block (cpu_partition, gpu_partition, account, gpu_model, qos).
    gpu : whether the rule declares that it needs a GPU.

    Returns
    -------
    dict of resource name -> value, for snakemake-executor-plugin-slurm; unset keys are left out.
    """
    resources = {"slurm_partition": cluster["gpu_partition" if gpu else "cpu_partition"]}
    if gpu:
        resources |= {"gpu": 1, "gpu_model": cluster["gpu_model"]}
    resources |= {"slurm_account": cluster["account"], "qos": cluster["qos"]}
    return {key: value for key, value in resources.items() if value is not None}


def request(need: Need, cluster: dict, attempt: int) -> tuple[int, int]:
    """(mem_mb, runtime in minutes) to ask for: the need times the margin and the attempt."""
    scale = cluster["margin"] * attempt
    return math.ceil(need.mem_mb * scale), math.ceil(need.minutes * scale)


class JobNeeds:
    """The need of each kind of job of a plan, from what the job does. One method per rule that
    does heavy work, taking the rule's wildcards; every other rule is ``light``."""

    def __init__(self, plan):
        self.plan = plan
        config = plan.config
        n_train, n_test = plan.dataset_sizes()
        size = config["data"]["shapes"]["image_size"] if config["data"]["dataset"] == "shapes" else 32
        self.image_side = size
        self.train_images, self.test_images = n_train - config["data"]["val_size"], n_test
        # The data cache as a job holds it: every split, as float32 on the host.
        self.data_mb = (n_train + n_test) * 3 * size * size * 4 / 1e6
        self.gpu_base = Need(TORCH_MB + CUDA_MB + self.data_mb, TORCH_MINUTES)

    @staticmethod
    def light(**_) -> Need:
        """A table, figure or bookkeeping job: pandas and matplotlib on small files."""
        return Need(LIGHT_MB, LIGHT_MINUTES)

    def prepare_data(self, **_) -> Need:
        return Need(TORCH_MB + 2 * self.data_mb, TORCH_MINUTES)

    def _training(self, variant: str, members: int, images_per_member: float) -> Need:
        spec = self.plan.spec(variant)
        rate = images_per_second(spec["arch"], members, bool(spec.get("constant_width")))
        return Need(0, members * images_per_member / rate / 60)

    def _member_images(self, variant: str) -> float:
        return self.plan.member_epochs(variant) * self.train_images

    def train_member(self, variant: str, **_) -> Need:
        return self.gpu_base + self._training(variant, 1, self._member_images(variant))

    def train_pack(self, variant: str, first: str, last: str, **_) -> Need:
        members = int(last) - int(first) + 1
        # Each member's weights, gradients and optimiser state stay small beside the data; the
        # activations of K members grow with K: a measured 32-ResNet18 pack peaked near 10 GB.
        return (
            self.gpu_base
            + Need(300 * members, 0)
            + self._training(variant, members, self._member_images(variant))
        )

    def rotation_trial(self, variant: str, **_) -> Need:
        epochs = self.plan.rotation["epochs"]
        return self.gpu_base + self._training(variant, 1, epochs * self.train_images)

    def stitch_pair(self, variant: str, method: str, **_) -> Need:
        block = self.plan.stitch_block(method)
        images = block["train_images"] or self.train_images
        sites = len(self.plan.config["stitching"]["sites"].get(variant) or self.plan.cut_site_names(variant))
        fits = 1 + (
            len(block["alpha_grid"]) * block["cv_epochs"] / max(block["epochs"], 1)
            if method == "grelu_cv"
            else 0
        )
        return self.gpu_base + self._training(variant, 1, sites * fits * block["epochs"] * images)

    def connectivity_pair(self, variant: str, **_) -> Need:
        # Per method and lambda: the batch-norm statistics on the training images, then both
        # splits scored; a forward pass costs about a third of a training step. Weight matching
        # runs on the CPU, seconds for a ResNet20.
        block = self.plan.connectivity
        test = block["test_images"] or self.test_images
        passes = len(block["methods"]) * block["lambdas"] * (2 * block["train_images"] + test)
        return self.gpu_base + Need(0, 2) + self._training(variant, 1, passes / 3)

    def similarity_pair(self, **_) -> Need:
        # N x N float64 kernels for each measure and site of both members.
        samples = self.plan.similarity["samples"] or self.test_images  # null: the whole test set
        return self.gpu_base + Need(20 * samples * samples * 8 / 1e6, 60)

    def deqntk_gram(self, variances: str, part: str, start: str, **_) -> Need:
        rows = self.plan.deqntk_stop(part, int(start)) - int(start)
        cols = self.plan.deqntk_train_rows
        # The block and the fixed point's kernels of the same shape, float64, and the input rows.
        gram_mb = 8 * rows * cols * 8 / 1e6 + (rows + cols) * 3 * 32 * 32 * 8 / 1e6
        return self.gpu_base + Need(gram_mb, 30)

    def deqntk_regression(self, variances: str, n_train: str, **_) -> Need:
        n, t = int(n_train), self.plan.deqntk["n_test"]
        # float64: the blocks as read (K_train's upper triangle and K_test), K_train and K_test
        # assembled from them, and the solve's factorisation of K_train.
        gram_mb = (2.5 * n * n + 2 * t * n) * 8 / 1e6
        return self.gpu_base + Need(gram_mb, 30 + n**3 / 1e12)

    def deqntk_depth(self, **_) -> Need:
        depth = self.plan.deqntk["depth"]
        n = depth["n_train"] + depth["n_test"]
        return self.gpu_base + Need(4 * len(depth["depths"]) * n * n * 8 / 1e6, 30)

    def deqntk_conv(self, **_) -> Need:
        conv = self.plan.deqntk["conv"]
        n, m = conv["n_train"], conv["n_test"]
        side = self.image_side
        # A block of pairs (256 MiB by default) and the two Grams; about 3 s per image pair at
        # 32 x 32 on one CPU thread (ours), taken as 0.05 s on a GPU, per variance setting.
        pairs = n * (n + 1) / 2 + m * n
        seconds = 0.05 * pairs * (side / 32) ** 4 * len(conv["settings"])
        return self.gpu_base + Need(300 + (n + m) * n * 8 / 1e6, 30 + seconds / 60)

    def kernel_reference_member(self, **_) -> Need:
        return self.similarity_pair()

    def pullback_external(self, name: str, **_) -> Need:
        """The paper's PGD grids on a 224 px ImageNet model: every (image, target) pair in one
        batch through forward and backward passes, three modes of ``steps`` steps."""
        entry = self.plan.pullback["external"][name]
        classes = entry.get("classes", 5)
        pairs = classes * entry.get("per_class", 1) * (classes + entry.get("extra_targets", 1))
        # ResNet50 and DenseNet121 keep about 100 MB of activations per 224 px image for a backward pass.
        activations_mb = pairs * 100 * (entry.get("size", 224) / 224) ** 2
        return self.gpu_base + Need(600 + 2 * activations_mb, 30)

    def heavy(self, **_) -> Need:
        """Forward passes over a few thousand images (symmetry, dissection, gated, pullbacks)."""
        return self.gpu_base + Need(0, 60)
