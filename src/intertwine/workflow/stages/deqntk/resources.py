"""What the deqntk stage's heavy jobs ask a cluster for (:mod:`intertwine.workflow.cluster`): one
function per rule, named like it, taking the plan's ``JobNeeds`` and the rule's wildcards; its
rules ask for them as ``NEEDS.<rule>`` (``NEEDS`` lists them)."""

from __future__ import annotations

from intertwine.workflow.cluster import JobNeeds, Need


def deqntk_gram(needs: JobNeeds, variances: str, part: str, start: str, **_) -> Need:
    rows = needs.plan.deqntk_stop(part, int(start)) - int(start)
    cols = needs.plan.deqntk_train_rows
    # The block and the fixed point's kernels of the same shape, float64, and the input rows.
    gram_mb = 8 * rows * cols * 8 / 1e6 + (rows + cols) * 3 * 32 * 32 * 8 / 1e6
    return needs.gpu_base + Need(gram_mb, 30)


def deqntk_regression(needs: JobNeeds, variances: str, n_train: str, **_) -> Need:
    n, t = int(n_train), needs.plan.deqntk["n_test"]
    # float64: the blocks as read (K_train's upper triangle and K_test), K_train and K_test
    # assembled from them, and the solve's factorisation of K_train.
    gram_mb = (2.5 * n * n + 2 * t * n) * 8 / 1e6
    return needs.gpu_base + Need(gram_mb, 30 + n**3 / 1e12)


def deqntk_depth(needs: JobNeeds, **_) -> Need:
    depth = needs.plan.deqntk["depth"]
    n = depth["n_train"] + depth["n_test"]
    return needs.gpu_base + Need(4 * len(depth["depths"]) * n * n * 8 / 1e6, 30)


def deqntk_conv(needs: JobNeeds, **_) -> Need:
    conv = needs.plan.deqntk["conv"]
    n, m = conv["n_train"], conv["n_test"]
    side = needs.image_side
    # A block of pairs (256 MiB by default) and the two Grams; about 3 s per image pair at
    # 32 x 32 on one CPU thread (ours), taken as 0.05 s on a GPU, per variance setting.
    pairs = n * (n + 1) / 2 + m * n
    seconds = 0.05 * pairs * (side / 32) ** 4 * len(conv["settings"])
    return needs.gpu_base + Need(300 + (n + m) * n * 8 / 1e6, 30 + seconds / 60)


def kernel_reference_member(needs: JobNeeds, **_) -> Need:
    return needs.similarity_pair()


#: The need of each of the stage's rules that does heavy work (every other rule's is ``light``).
NEEDS = {
    "deqntk_gram": deqntk_gram,
    "deqntk_regression": deqntk_regression,
    "deqntk_depth": deqntk_depth,
    "deqntk_conv": deqntk_conv,
    "kernel_reference_member": kernel_reference_member,
}
