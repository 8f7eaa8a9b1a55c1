"""The symmetry stage's claims (T1: Prop. 3.4; T2: Thm. 4.2)."""

from __future__ import annotations

from intertwine.workflow.claims import GODFREY, Claim, Result, not_run, units_text


def _tolerance(rows) -> float:
    """The largest relative error an identity may show: rounding in the table's dtype."""
    return 1e-4 if (rows["dtype"] == "float32").any() else 1e-9


def exact_symmetry(tables, settings) -> Result:
    """G_ReLU elements leave the function unchanged to rounding; orthogonal ones do not."""
    table = tables["symmetry"]
    grelu = table[table["group"] == "grelu"]
    orthogonal = table[table["group"] == "orthogonal"]
    if grelu.empty:
        return not_run("needs the symmetry check with group grelu")
    tolerance = _tolerance(grelu)
    worst = grelu["relative_change"].max()
    ours = f"G_ReLU largest relative change {worst:.1e}"
    verdict = "reproduced" if worst <= tolerance else "not reproduced"
    if len(orthogonal):
        ours += f"; orthogonal smallest {orthogonal['relative_change'].min():.1e} (not a symmetry)"
    return Result(
        ours,
        verdict,
        f"largest error against tolerance {tolerance:g} ({grelu['dtype'].iloc[0]}); an identity needs no interval",
        units_text("check", len(grelu)),
    )


def exact_stitching(tables, settings) -> Result:
    """Thm. 4.2: f stitched at a site into f~ (f with G_ReLU elements acting at every site)
    through the site's element itself is f: the logits' relative change within rounding and the
    same predicted class on every image (so the same accuracy), at every site on the residual
    stream (or of a network without blocks); orthogonal elements, no symmetry, are the contrast."""
    table = tables["symmetry"]
    stream = table[~table["inside_residual"].fillna(False).astype(bool)]
    if (stream["group"] != "grelu").all():
        return not_run("needs the symmetry check with group grelu at a site on the residual stream")
    measured = stream[stream["stitched_relative_change"].notna()]
    grelu = measured[measured["group"] == "grelu"]
    if grelu.empty:
        return Result(
            "no evidence",
            "inconclusive",
            "no G_ReLU row on the residual stream has a stitched value (NaN: a site the model cannot be "
            "cut at, or a failed measurement)",
            "0 checks",
        )
    tolerance = _tolerance(grelu)
    worst, agreement = grelu["stitched_relative_change"].max(), grelu["stitched_agreement"].min()
    verdict = "reproduced" if worst <= tolerance and agreement == 1 else "not reproduced"
    ours = f"stitched through A: largest relative change {worst:.1e}, least agreement with f {agreement:.3f}"
    orthogonal = measured[measured["group"] == "orthogonal"]
    if len(orthogonal):
        broken = int((orthogonal["stitched_relative_change"] > tolerance).sum())
        ours += f"; orthogonal (no symmetry): {broken} of {len(orthogonal)} sites beyond tolerance"
    left_out = len(table[table["group"] == "grelu"]) - len(grelu)
    return Result(
        ours,
        verdict,
        f"largest error against tolerance {tolerance:g} ({grelu['dtype'].iloc[0]}) and every image's "
        "predicted class f's; an identity needs no interval"
        + (
            f"; {left_out} G_ReLU rows inside a residual block or at an uncut site left out (Remark 3.6: "
            "no such identity inside a block)"
            if left_out
            else ""
        ),
        units_text("check", len(grelu)),
    )


CLAIMS = (
    Claim(
        "T1",
        f"{GODFREY}, section 3.2, Prop. 3.4",
        "\"In particular, f(x,W') = f(x,W) for all x ∈ R^{n_0}. Equivalently, we have Φ(W') = Φ(W) ∈ F.\" "
        "(Prop. 3.4, W' the weights with A_i of the intertwiner group acting on them)",
        "G_ReLU elements act on the weights without changing the function (exact)",
        "exact",
        ("symmetry",),
        "symmetry_summary.csv",
        exact_symmetry,
    ),
    Claim(
        "T2",
        f"{GODFREY}, section 4, Thm. 4.2 (proof: appendix E.5)",
        "Then eq. (4.1) is achievable with equality if the stitching function class S containing φ "
        r"contains $\phi_{\sigma}(G_{\sigma_{n_i}})$.",
        "A member f stitched at a site on its residual stream into f~ (f with random G_ReLU elements A acting "
        "on its weights at every site) through the stitching layer phi(A) = A at that site, fixed, not "
        "trained, computes f: the logits' largest relative change within rounding (1e-9 in float64, ours) "
        "and every image's predicted class f's, so Acc S = Acc f (exact); sites inside a residual block "
        "are not tested (Remark 3.6)",
        "exact (an identity; the paper prints no measurement of it)",
        ("symmetry",),
        "symmetry_summary.csv",
        exact_stitching,
    ),
)

#: Per table, its column of evidence (a NaN there is a failed measurement, no evidence).
EVIDENCE = {"symmetry": "relative_change"}
