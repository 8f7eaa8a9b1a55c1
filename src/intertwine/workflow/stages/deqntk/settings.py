"""The ``deqntk`` block's settings as a dataclass: what the stage's jobs read, each field one config
key with the schema's default (:mod:`intertwine.workflow.settings`)."""

from __future__ import annotations

import dataclasses

from intertwine.workflow.settings import Settings, setting


@dataclasses.dataclass(frozen=True)
class DeqntkConfig(Settings):
    """The DEQ neural tangent kernel stage's jobs (config ``deqntk``). Job kinds: ``gram`` (a block
    of the accuracy study's Gram), ``regression`` (one variance setting and training-set size),
    ``depth`` (one draw of the depth sweep), ``reference`` (one zoo member's CKAs with the kernel).
    Which jobs run (``n_train``, ``settings``, ``block_rows``, ``depth.draws``,
    ``reference.variants``, ``reference.seeds``) is the plan's; each job gets its own values."""

    n_test: int = setting("deqntk.n_test", only_for=("gram", "regression"))
    preprocessing: str = setting(
        "deqntk.preprocessing", only_for=("gram", "regression", "depth", "reference")
    )
    ridge: float = setting("deqntk.ridge", only_for=("regression", "depth", "conv"))
    tol: float = setting("deqntk.tol", only_for=("gram", "depth", "reference", "conv"))
    depths: list[int] = setting("deqntk.depth.depths", only_for=("depth",))
    depth_n_train: int = setting("deqntk.depth.n_train", only_for=("depth",))
    depth_n_test: int = setting("deqntk.depth.n_test", only_for=("depth",))
    depth_variances: list[float] | None = setting("deqntk.depth.variances", only_for=("depth",))
    finite_variances: list[list[float]] = setting("deqntk.depth.finite", only_for=("depth",))
    panels: list[list[float]] = setting("deqntk.depth.panels", only_for=("depth",))
    deq_sigma_b2: float = setting("deqntk.depth.deq_sigma_b2", only_for=("depth",))
    frozen_ridge: float = setting("deqntk.depth.frozen_ridge", only_for=("depth",))
    conv_n_train: int = setting("deqntk.conv.n_train", only_for=("conv",))
    conv_n_test: int = setting("deqntk.conv.n_test", only_for=("conv",))
    conv_settings: list[list[float]] = setting("deqntk.conv.settings", only_for=("conv",))
    conv_readout: str = setting("deqntk.conv.readout", only_for=("conv",))
    conv_preprocessing: str = setting("deqntk.conv.preprocessing", only_for=("conv",))
    reference_samples: int | None = setting("deqntk.reference.samples", only_for=("reference",))
    reference_measures: list[str] = setting("deqntk.reference.measures", only_for=("reference",))
    reference_variances: list[float] = setting("deqntk.reference.variances", only_for=("reference",))
