"""The gated-networks stage's claims (Lakshminarayanan & Singh 2021): the stage decides its findings
itself (``study.findings``: Tables I-III's readings, written by its table job as
``gated_findings.csv``, one finding a row), so its scorecard rows are those findings as they stand,
G1, G2, ... in their order; one ``not run`` row G names the paper when the stage is not in the
config. It has no claims of its own for the scorecard to test (``CLAIMS`` is empty)."""

from __future__ import annotations

import pandas as pd

from intertwine.workflow.claims import GATED, Claim, Findings, reading
from intertwine.workflow.stages.gated.tables import FINDINGS_COLUMNS

CLAIMS: tuple[Claim, ...] = ()


def findings_rows(findings: pd.DataFrame | None) -> list[dict]:
    """The findings' scorecard rows, G1, G2, ... in the findings' order, or one ``not run`` row G
    when the stage is not configured (so the scorecard always names the paper)."""
    if findings is None:
        return [
            {
                "claim": "G",
                "kind": "paper",
                "source": GATED,
                "sentence": "",
                "statement": "The gated-networks findings (DLGN recovers 83.5 %, value input, gate permutations, "
                "DNN > DGN >> DLGN, Table III's readings)",
                "paper": "Tables I-III",
                "ours": "",
                "verdict": "not run",
                "reading": "not run",
                "units": "",
                "scale": "",
                "evidence": "the gated stage is not in the config",
                "mode": "",
                "figure": "",
            }
        ]
    rows = []
    for i, finding in enumerate(findings.fillna("").to_dict("records"), 1):
        rows.append(
            {
                "claim": f"G{i}",
                "kind": "paper",
                "source": f"{GATED}, {finding.get('source', 'Tables I-III')}",
                "sentence": finding.get("sentence", ""),
                "statement": finding["finding"],
                "paper": finding["paper"],
                "ours": finding["ours"],
                "verdict": finding["verdict"],
                "reading": reading(finding["verdict"], finding.get("below_budget", "")),
                "units": finding.get("units", ""),
                "scale": finding.get("scale", ""),
                "evidence": finding["evidence"],
                "mode": "",
                "figure": "gated_accuracy.png" if finding["verdict"] != "not run" else "",
            }
        )
    return rows


#: The findings table the scorecard reads (``intertwine claims --table gated_findings=PATH``).
FINDINGS = {"gated_findings": Findings(FINDINGS_COLUMNS, findings_rows)}
