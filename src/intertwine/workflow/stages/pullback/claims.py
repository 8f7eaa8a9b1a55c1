"""The excitation-pullback stage's claims (H1, P1)."""

from __future__ import annotations

from intertwine.workflow.claims import (
    OURS,
    PULLBACK,
    Claim,
    Comparison,
    Estimate,
    Result,
    describe,
    judge,
    not_run,
    units_text,
)
from intertwine.workflow.stages.pullback.tables import at_stage_temperature


def pullback_invariances(tables, settings) -> Result:
    """Permutations leave every pullback unchanged; G_ReLU scalings leave the gradient and the
    per-neuron-temperature pullback unchanged but not the global-temperature one."""
    table = tables["pullback_symmetry"]
    table = at_stage_temperature(table)
    exact = table[(table["group"] == "permutation") | table["mode"].isin(["gradient", "per_neuron"])]
    global_t = table[(table["group"] == "grelu") & (table["mode"] == "global") & (table["scale_spread"] >= 1)]
    worst = (1 - exact["cos_min"]).max()
    ours = f"1 - cos up to {worst:.1e} where invariant"
    if len(global_t):
        ours += f"; global T at spread >= 1: min cosine {global_t['cos_min'].min():.3f}"
    held = worst <= 1e-6 and (global_t.empty or global_t["cos_min"].min() < 0.999)
    return Result(
        ours,
        "reproduced" if held else "not reproduced",
        "largest error against 1e-6 (an identity needs no interval)",
        units_text("check", len(table)),
    )


#: Our stricter line, reported beside the verdict and not deciding it: at the middle of training at
#: least this fraction of a member's gates (averaged over its ReLU call sites) already as at the end.
SETTLED = 0.9


def early_stable_patterns(tables, settings) -> Result:
    """Hypothesis 1 on the paper's criterion: per member (independent units: different seeds), the
    correlation rho(x) of its gating tensor field from the early epoch on with the final one
    (``gates.path_correlations``), at its lowest ``gates.ALMOST_EVERY`` quantile over the probe
    images (``study.settling_verdict_values``), is positive."""
    from intertwine.gates import ALMOST_EVERY
    from intertwine.workflow.stages.pullback.study import settling_verdict_values

    values = settling_verdict_values(tables["pullback_settling"])
    if values.empty:
        return not_run("no member recorded gate patterns")
    if values["early_epoch"].isna().all():
        return not_run(
            "every member trained a single epoch: no early epoch between initialisation and the end"
        )
    if values["path_rho_low"].isna().all():
        return not_run(
            "the members' gate records predate the path correlation (no path_rho_low column): retrain the "
            "members of the variants with zoo.training.gate_probe_images"
        )
    estimate = Estimate.of(values["path_rho_low"])
    comparisons = [
        Comparison(
            f"rho(x) of the early and final gating tensors, {ALMOST_EVERY:.0%} quantile over images (ours: "
            '"almost every"), above 0',
            estimate,
            +1,
        )
    ]
    judgement = judge(comparisons)
    return Result(
        _h1_ours(values),
        judgement.verdict,
        f"{describe(comparisons, judgement.agreement)} ({judgement.note})",
        units_text("member", len(values)),
    )


def _h1_ours(values) -> str:
    """H1's measured numbers: the paper's criterion, then our stricter agreement line."""

    def epochs(column) -> str:
        return "/".join(str(int(e)) for e in sorted(set(column.dropna())))

    return (
        f"early epoch {epochs(values['early_epoch'])} of {epochs(values['final_epoch'])}: rho(x) with the "
        f"final gating tensor positive on {100 * values['path_rho_positive'].mean():.1f} % of the probe images, "
        f"mean {values['path_rho_mean'].mean():.3f}, 5 % quantile (lowest from the early epoch on) "
        f"{values['path_rho_low'].mean():.3f}; ours, not deciding: agreement with the final pattern at "
        f"epoch {epochs(values['epoch'])} {values['agreement'].mean():.3f} against our {SETTLED:g} "
        f"(chance {values['chance'].mean():.3f}, at initialisation {values['initial'].mean():.3f}); "
        f"{len(values)} members of {', '.join(dict.fromkeys(values['variant']))}"
    )


CLAIMS = (
    Claim(
        "H1",
        f"{PULLBACK}, Section 4, Hypothesis 1",
        '"Hypothesis 1 (Early emergence of stable excitation patterns)." ... "There exists a binary tensor '
        'field" [gamma] ... "and an early training time" [t_gamma << T] "such that for every" [t > t_gamma], '
        '[gamma] "is positively correlated with" [G~(t)] "(the gating tensor field at time" [t]")" '
        "(Section 4, Hypothesis 1; formulas garbled in the text, given in brackets); the criterion, "
        'Section 4: "We say that" [g and h] "are positively correlated (in" [X]") if" [rho(x)] '
        '"is positive for almost every" [x in X]", with respect to the Lebesgue measure."',
        "Zoo members' gating tensor fields (the rank-1 tensor over every ReLU call site's binary gates) on a "
        "fixed probe set, from the first recorded epoch after initialisation (the early time t_gamma) on, are "
        "positively correlated (Pearson, per image) with the final one, taken as gamma: the 5 % quantile of "
        "rho(x) over the images (ours: our reading of 'almost every x') above 0. Reported beside it, ours and "
        f"not deciding: the gates' agreement with the final pattern at mid-training against {SETTLED:g}. "
        "Untested: the hypothesis' second part (an excitation function Gamma strongly correlated with the "
        "pre-activations and with gamma) because gamma is not observable and the paper measures neither",
        "a hypothesis; no measurement in the paper ('strong': 'greater than 0.7', for its second part only)",
        ("pullback_settling",),
        "pullback_settling.png",
        early_stable_patterns,
    ),
    Claim(
        "P1",
        OURS,
        "none: the paper's experiments are qualitative; this is a property of our per-neuron temperature",
        "Pullbacks are invariant to permutations; G_ReLU scalings change the global-temperature pullback "
        "but not the gradient or the per-neuron-temperature one (ours)",
        "no claim of the paper",
        ("pullback_symmetry",),
        "pullback_symmetry.png",
        pullback_invariances,
        kind="ours",
    ),
)

#: Per table, its column of evidence (a NaN there is a failed measurement, no evidence).
EVIDENCE = {"pullback_symmetry": "cos_min", "pullback_settling": "agreement"}
