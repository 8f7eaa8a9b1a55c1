# The claims scorecard: which of the papers' findings this run reproduces (intertwine.workflow.claims), from
# the tables of the stages the config runs; the report opens with it (workflow/report/workflow.rst).
rule claims:
    input:
        **PLAN.claims_tables,
    output:
        csv=report(
            "results/tables/claims.csv",
            caption="../report/claims.rst",
            category="Claims scorecard",
        ),
        rst="results/tables/claims.rst",
    log:
        "results/logs/tables/claims.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        **CLI["claims"].when_given(table=lambda wc, input: [f"{name}={path}" for name, path in input.items()]),
        settings=as_json(PLAN.claims_settings),
        figures=" ".join(PLAN.claims_figures),
        code=code_hash("claims"),
    shell:
        CLI["claims"].shell()
