rule symmetry_check:
    input:
        DATA_FILES,
        checkpoint="results/zoo/{variant}/seed{seed}.pt",
    output:
        "results/symmetry/{variant}/seed{seed}.parquet",
    log:
        "results/logs/symmetry/{variant}/seed{seed}.log",
    conda:
        CONDA_ENV
    resources:
        **on_gpu(NEEDS.heavy),
    params:
        block=as_json(PLAN.symmetry_block),
        seed=config["seed"],
        device=config["device"],
        code=lambda wc: variant_code_hash("symmetry", wc.variant),
        data=data_dir,
    shell:
        CLI["symmetry-check"].shell()


rule symmetry_table:
    input:
        PLAN.symmetry_checks,
    output:
        table="results/tables/symmetry.parquet",
        summary=report(
            "results/tables/symmetry_summary.csv",
            caption="../report/symmetry_summary.rst",
            category="Symmetry self-check",
        ),
    log:
        "results/logs/tables/symmetry.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        code=code_hash("symmetry_table"),
    shell:
        CLI["symmetry-table"].shell()
