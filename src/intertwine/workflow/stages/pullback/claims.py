"""The excitation-pullback stage's claims (H1, P1)."""

from __future__ import annotations

from intertwine.claims import (
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


#: Our reading of "largely" in the path stability hypothesis: at the middle of training at least
#: this fraction of a member's gates (averaged over its ReLU call sites) already as at the end.
SETTLED = 0.9


def path_stability(tables, settings) -> Result:
    """Hypothesis 1: per member (independent units: different seeds), the agreement of its gate
    pattern at the middle of training with the final one, mean over ReLU call sites
    (``gates.settling_verdict_values``), above ``SETTLED``."""
    from intertwine.gates import settling_verdict_values

    values = settling_verdict_values(tables["pullback_settling"])
    if values.empty:
        return not_run("no member recorded gate patterns")
    estimate = Estimate.of(values["agreement"]).shift(SETTLED)
    comparisons = [
        Comparison(f"agreement at mid-training above {SETTLED:g} (points)", estimate, +1, threshold=SETTLED)
    ]
    judgement = judge(comparisons)
    ours = (
        f"agreement with the final pattern at epoch {'/'.join(map(str, sorted(set(values['epoch']))))}: "
        f"{values['agreement'].mean():.3f} (chance {values['chance'].mean():.3f}, at initialisation "
        f"{values['initial'].mean():.3f}), over {len(values)} members of {', '.join(dict.fromkeys(values['variant']))}"
        f" trained {'/'.join(map(str, sorted(set(tables['pullback_settling']['final_epoch']))))} epochs"
    )
    return Result(
        ours,
        judgement.verdict,
        f"{describe(comparisons, judgement.agreement)} ({judgement.note})",
        units_text("member", len(values)),
    )


CLAIMS = (
    Claim(
        "H1",
        f"{PULLBACK}, Hypothesis 1 (path stability)",
        '"we formulate the path stability hypothesis, claiming that the binary activation patterns largely '
        'stabilize during training and get encoded in the pre-activation distribution of the final model" '
        "(abstract, arXiv 2507.22832)",
        "Zoo members' binary activation patterns on a fixed probe set (every ReLU call site) agree with the "
        f"final pattern at the middle of training for at least {SETTLED:.0%} of their gates (our reading of "
        '"largely")',
        "a hypothesis; no measurement in the paper",
        ("pullback_settling",),
        "pullback_settling.png",
        path_stability,
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
