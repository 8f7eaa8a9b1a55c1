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
import functools
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
    """The need of each kind of job of a plan, from what the job does: ``light``, ``prepare_data``
    and ``heavy`` here, and one function per rule that does heavy work in its stage's folder
    (``intertwine.workflow.stages.<stage>.resources``, ``NEEDS``), which this object answers for
    (``JobNeeds(plan).stitch_pair``), each taking the rule's wildcards; every other rule is ``light``."""

    def __init__(self, plan):
        from intertwine.workflow import stages

        self.plan = plan
        config = plan.config
        n_train, n_test = plan.dataset_sizes()
        size = plan.image_side()
        self.image_side = size
        self.train_images, self.test_images = n_train - config["data"]["val_size"], n_test
        # The data cache as a job holds it: every split, as float32 on the host.
        self.data_mb = (n_train + n_test) * 3 * size * size * 4 / 1e6
        self.gpu_base = Need(TORCH_MB + CUDA_MB + self.data_mb, TORCH_MINUTES)
        self.rules: dict = {}
        for stage in stages.with_part("resources"):
            for rule, need in stages.part(stage, "resources").NEEDS.items():
                if rule in self.rules or hasattr(type(self), rule):
                    raise RuntimeError(
                        f"the need of rule {rule!r} is declared twice (stage {stage!r}'s resources and another): "
                        "a rule's need is declared once, in its stage's folder"
                    )
                self.rules[rule] = need

    def __getattr__(self, rule: str):
        # Called only for a name JobNeeds lacks: a stage's rule, its need bound to these needs.
        rules = self.__dict__.get("rules")
        if rules is None or rule not in rules:
            raise AttributeError(
                f"no need is declared for rule {rule!r}: declare it in its stage's resources module "
                "(NEEDS), or ask for NEEDS.light"
            )
        return functools.partial(rules[rule], self)

    @staticmethod
    def light(**_) -> Need:
        """A table, figure or bookkeeping job: pandas and matplotlib on small files."""
        return Need(LIGHT_MB, LIGHT_MINUTES)

    def prepare_data(self, **_) -> Need:
        return Need(TORCH_MB + 2 * self.data_mb, TORCH_MINUTES)

    def training(self, variant: str, members: int, images_per_member: float) -> Need:
        """The time ``members`` members of the variant take to train on ``images_per_member`` each."""
        spec = self.plan.spec(variant)
        rate = images_per_second(spec["arch"], members, bool(spec.get("constant_width")))
        return Need(0, members * images_per_member / rate / 60)

    def heavy(self, **_) -> Need:
        """Forward passes over a few thousand images (symmetry, dissection, gated, pullbacks)."""
        return self.gpu_base + Need(0, 60)
