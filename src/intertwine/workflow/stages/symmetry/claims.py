"""The symmetry stage's claim (T1)."""

from __future__ import annotations

from intertwine.claims import GODFREY, Claim, Result, not_run, units_text


def exact_symmetry(tables, settings) -> Result:
    """G_ReLU elements leave the function unchanged to rounding; orthogonal ones do not."""
    table = tables["symmetry"]
    grelu = table[table["group"] == "grelu"]
    orthogonal = table[table["group"] == "orthogonal"]
    if grelu.empty:
        return not_run("needs the symmetry check with group grelu")
    tolerance = 1e-4 if (grelu["dtype"] == "float32").any() else 1e-9
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


CLAIMS = (
    Claim(
        "T1",
        f"{GODFREY}, Prop. 3.4, Thm. 4.2",
        "Prop. 3.4: the weight-space action of the intertwiner group leaves the network function unchanged",
        "G_ReLU elements act on the weights without changing the function (exact)",
        "exact",
        ("symmetry",),
        "symmetry_summary.csv",
        exact_symmetry,
    ),
)

#: Per table, its column of evidence (a NaN there is a failed measurement, no evidence).
EVIDENCE = {"symmetry": "relative_change"}
