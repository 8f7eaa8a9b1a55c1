"""The DEQ-NTK's plan: the Gram cut into blocks, the regressions, the depth sweep, the kernel
reference, and the config's cross-checks of the stage.

A part of :class:`intertwine.workflow.plan.Plan`, which composes every stage's part (found through
the stage registry) with its core: a part holds the plan and reads through it what it does not
define (``self.spec``, ``self.zoo_seeds``; :class:`intertwine.workflow.planning.StagePlan`)."""

from __future__ import annotations

import functools

from intertwine.workflow.planning import ConfigCheck, ConfigError, ImageCount, StagePlan
from intertwine.workflow.settings import variances_name
from intertwine.workflow.stages.deqntk.settings import DeqntkConfig


def gram_layout(n_train: int, n_test: int, block_rows: int) -> list[tuple[str, int, int]]:
    """The DEQ-NTK accuracy study's Gram, rows [train; test], cut into jobs: (part, start, stop)
    for the training rows, then the test rows, each every ``block_rows`` rows."""
    if isinstance(block_rows, bool) or not isinstance(block_rows, int) or block_rows < 1:
        raise ValueError(f"block_rows must be an integer of at least 1, got {block_rows!r}")
    return [
        (part, start, min(start + block_rows, n))
        for part, n in (("train", n_train), ("test", n_test))
        for start in range(0, n, block_rows)
    ]


class _DeqntkChecks:
    """The DEQ-NTK stage's recurring test of variance settings, collecting its messages in
    ``errors`` in the order they are made (its image counts are ``deqntk_image_counts``, checked
    with every stage's)."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def variances(self, key: str, values, equilibrium: bool = True) -> None:
        """Whether (sigma_w2, sigma_u2, sigma_b2) ``values`` sum to 1 and, for an equilibrium,
        sigma_w2 < 1 (the second is only checked where the first holds)."""
        w, u, b = values
        if abs(w + u + b - 1) > 1e-9:
            self.errors.append(
                f"config key {key}: {values} sums to {w + u + b:g}; sigma_w2 + sigma_u2 + sigma_b2 "
                "must be 1 (unit inputs then keep unit-variance pre-activations, which the kernels assume)"
            )
        elif equilibrium and w >= 1:
            self.errors.append(
                f"config key {key}: sigma_w2 = {w:g}; the equilibrium needs sigma_w2 < 1 (its fixed-point "
                "map is then a contraction; at 1 the depth-L NTK grows without bound)"
            )


def _depth_errors(checks: _DeqntkChecks, depth: dict) -> None:
    """The depth sweep's kernels (the finite networks' need no equilibrium; a panel's DEQ takes
    sigma_u2 = sigma_b2 - deq_sigma_b2, so that must not be negative)."""
    if depth["variances"] is not None:
        checks.variances("deqntk.depth.variances", depth["variances"])
    for i, values in enumerate(depth["finite"]):
        checks.variances(f"deqntk.depth.finite.{i}", values, equilibrium=False)
    for i, (w, b) in enumerate(depth["panels"]):
        if b < depth["deq_sigma_b2"]:
            checks.errors.append(
                f"config key deqntk.depth.panels.{i}: sigma_b2 = {b:g} is below deqntk.depth.deq_sigma_b2 "
                f"= {depth['deq_sigma_b2']:g}, so the panel's DEQ would have sigma_u2 < 0; raise the "
                "panel's sigma_b2 or lower deq_sigma_b2"
            )
        else:
            checks.variances(f"deqntk.depth.panels.{i}", [w, 0.0, b])
    if depth["variances"] is None and not depth["finite"] and not depth["panels"]:
        checks.errors.append(
            "config key deqntk.depth: draws asks for the depth sweep, but it has no kernel "
            "(variances null, finite and panels empty); give one, or set draws to 0"
        )


def _conv_errors(checks: _DeqntkChecks, conv: dict) -> None:
    """The convolutional DEQ-NTK's variance settings."""
    for i, values in enumerate(conv["settings"]):
        checks.variances(f"deqntk.conv.settings.{i}", values)


class DeqntkPlan(StagePlan):
    """The deqntk stage's part of the plan."""

    @property
    def deqntk_variances(self) -> dict[str, list[float]]:
        """The accuracy study's variance settings by name ('w0.25_u0.25_b0.5'); none when it is off."""
        if not self.deqntk["n_train"]:
            return {}
        return {variances_name(v): v for v in self.deqntk["settings"]}

    @property
    def deqntk_train_rows(self) -> int:
        """The Gram's training rows: the largest training-set size (the smaller are its first rows)."""
        return max(self.deqntk["n_train"], default=0)

    @functools.cached_property
    def deqntk_layout(self) -> list[tuple[str, int, int]]:
        if not self.deqntk_variances:
            return []
        return gram_layout(self.deqntk_train_rows, self.deqntk["n_test"], self.deqntk["block_rows"])

    @staticmethod
    def deqntk_block_file(name: str, part: str, start: int) -> str:
        return f"results/deqntk/gram/{name}/{part}{start}.npz"

    @functools.cached_property
    def deqntk_gram_jobs(self) -> list[str]:
        return [
            self.deqntk_block_file(name, part, start)
            for name in self.deqntk_variances
            for part, start, _ in self.deqntk_layout
        ]

    def deqntk_stop(self, part: str, start: int) -> int:
        """The end of the Gram block starting at row ``start`` of ``part``."""
        return next(stop for p, a, stop in self.deqntk_layout if (p, a) == (part, start))

    def deqntk_blocks(self, name: str, n_train: int) -> list[str]:
        """The blocks a regression on the first ``n_train`` training images reads: every test
        block and the training blocks that start below ``n_train``."""
        return [
            self.deqntk_block_file(name, part, start)
            for part, start, _ in self.deqntk_layout
            if part == "test" or start < n_train
        ]

    @functools.cached_property
    def deqntk_regression_jobs(self) -> list[str]:
        return [
            f"results/deqntk/accuracy/{name}/n{n}.parquet"
            for name in self.deqntk_variances
            for n in self.deqntk["n_train"]
        ]

    @functools.cached_property
    def deqntk_depth_jobs(self) -> list[str]:
        return [f"results/deqntk/depth/draw{draw}.parquet" for draw in range(self.deqntk["depth"]["draws"])]

    @functools.cached_property
    def kernel_reference_jobs(self) -> list[str]:
        reference = self.deqntk["reference"]
        return [
            f"results/deqntk/reference/{variant}/seed{seed}.parquet"
            for variant in reference["variants"]
            for seed in self.members("deqntk.reference.seeds", variant, reference["seeds"])
        ]

    def deqntk_block(self, kind: str) -> dict:
        """The settings a job of ``kind`` (gram, regression, depth, reference) reads; the
        reference's null samples are the similarity stage's."""
        sources = {
            "deqntk": self.deqntk,
            "deqntk.depth": self.deqntk["depth"],
            "deqntk.reference": self.deqntk["reference"],
            "deqntk.conv": self.deqntk["conv"],
        }
        block = DeqntkConfig.job_block(sources, kind)
        if kind == "reference" and block["reference_samples"] is None:
            block["reference_samples"] = self.similarity["samples"]
        return block

    @property
    def deqntk_conv_jobs(self) -> list[str]:
        """The convolutional DEQ-NTK's one job, when ``deqntk.conv.n_train`` asks for it."""
        return ["results/deqntk/conv.parquet"] if self.deqntk["conv"]["n_train"] else []

    @property
    def deqntk_parts(self) -> list[str]:
        """The per-job rows of results/tables/deqntk.parquet: the regressions, the depth draws,
        the convolutional kernel's."""
        return self.deqntk_regression_jobs + self.deqntk_depth_jobs + self.deqntk_conv_jobs

    @property
    def deqntk_tables(self) -> list[str]:
        return ["results/tables/deqntk.parquet"] if self.deqntk_parts else []

    @property
    def kernel_reference_tables(self) -> list[str]:
        return ["results/tables/kernel_reference.parquet"] if self.kernel_reference_jobs else []

    @property
    def deqntk_figures(self) -> list[str]:
        return (
            (["results/figures/deqntk_accuracy.png"] if self.deqntk_regression_jobs else [])
            + (["results/figures/deqntk_depth.png"] if self.deqntk_depth_jobs else [])
            + (["results/figures/deqntk_reference.png"] if self.kernel_reference_jobs else [])
        )

    @property
    def deqntk_outputs(self) -> list[str]:
        return self.deqntk_tables + self.kernel_reference_tables + self.figure_files(self.deqntk_figures)

    def deqntk_image_counts(self) -> list[ImageCount]:
        """The images each part of the stage takes: its training counts from the training split
        with its validation images (the kernels take them), its test counts from the test split."""
        deqntk, counts = self.deqntk, []
        if deqntk["n_train"]:
            counts += [
                ImageCount("deqntk.n_train", self.deqntk_train_rows, "stored training"),
                ImageCount("deqntk.n_test", deqntk["n_test"], "test"),
            ]
        for part, on in (("depth", deqntk["depth"]["draws"]), ("conv", deqntk["conv"]["n_train"])):
            if on:
                counts += [
                    ImageCount(f"deqntk.{part}.n_train", deqntk[part]["n_train"], "stored training"),
                    ImageCount(f"deqntk.{part}.n_test", deqntk[part]["n_test"], "test"),
                ]
        # Only as set: a null takes similarity.samples, which is checked under its own key.
        if deqntk["reference"]["variants"] and deqntk["reference"]["samples"] is not None:
            counts.append(ImageCount("deqntk.reference.samples", deqntk["reference"]["samples"], "test"))
        return counts

    def _deqntk_errors(self) -> list[str]:
        """The DEQ-NTK stage's cross-checks: variance settings that sum to 1 (sigma_w2 < 1 for the
        equilibrium), reference variants the zoo trains (its image counts: ``deqntk_image_counts``).

        Returns
        -------
        list of str
            The messages, each naming its config key: the accuracy study's, the depth sweep's,
            the convolutional kernel's, then the kernel reference's.
        """
        deqntk = self.deqntk
        checks = _DeqntkChecks()
        if deqntk["n_train"]:
            self._deqntk_accuracy_errors(checks)
        if deqntk["depth"]["draws"]:
            _depth_errors(checks, deqntk["depth"])
        if deqntk["conv"]["n_train"]:
            _conv_errors(checks, deqntk["conv"])
        self._deqntk_reference_errors(checks, deqntk["reference"])
        return checks.errors

    def _deqntk_accuracy_errors(self, checks: _DeqntkChecks) -> None:
        """The accuracy study's variance settings (at least one)."""
        deqntk = self.deqntk
        for i, values in enumerate(deqntk["settings"]):
            checks.variances(f"deqntk.settings.{i}", values)
        if not deqntk["settings"]:
            checks.errors.append(
                "config key deqntk.settings: empty, but deqntk.n_train asks for the accuracy study"
            )

    def _deqntk_reference_errors(self, checks: _DeqntkChecks, reference: dict) -> None:
        """The kernel reference's variants (the zoo's), variances, members and samples; the rest
        only once the variants are known."""
        unknown = sorted(set(reference["variants"]) - set(self.variants))
        if unknown:
            checks.errors.append(
                f"config key deqntk.reference.variants: {unknown} must be among zoo.variants: {self.variants}"
            )
        elif reference["variants"]:
            checks.variances("deqntk.reference.variances", reference["variances"])
            for variant in reference["variants"]:
                try:
                    self.members("deqntk.reference.seeds", variant, reference["seeds"])
                except ConfigError as err:
                    checks.errors.append(str(err))

    deqntk_claims_tables = {"deqntk": "results/tables/deqntk.parquet"}

    def deqntk_errors(self, check: ConfigCheck) -> None:
        """The DEQ-NTK stage's cross-checks of the config (``Plan.errors``)."""
        check.errors += self._deqntk_errors()
