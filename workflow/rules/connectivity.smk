rule connectivity_pair:
    input:
        DATA_FILES,
        a=member(PLAN.connectivity_pairs, "a"),
        b=member(PLAN.connectivity_pairs, "b"),
    output:
        "results/connectivity/{variant}/pair{pair}.parquet",
    log:
        "results/logs/connectivity/{variant}/pair{pair}.log",
    benchmark:
        "results/benchmarks/connectivity/{variant}/pair{pair}.tsv"
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_gpu(NEEDS.connectivity_pair),
    params:
        block=as_json(PLAN.connectivity_block),
        seed=config["seed"],
        device=config["device"],
        code=lambda wc: variant_code_hash("connectivity", wc.variant),
        data=data_dir,
    shell:
        CLI["connectivity-pair"].shell()


rule connectivity_table:
    input:
        PLAN.connectivity_jobs,
    output:
        "results/tables/connectivity.parquet",
    log:
        "results/logs/tables/connectivity.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        code=code_hash("connectivity_table"),
    shell:
        CLI["table"].shell(schema="connectivity")


rule connectivity_figure:
    input:
        "results/tables/connectivity.parquet",
    output:
        figures=[
            report(png, caption=f"../report/{os.path.basename(png)[:-4]}.rst", category="Connectivity")
            for png in PLAN.CONNECTIVITY_FIGURES
        ],
        summary=report(
            "results/tables/connectivity_summary.csv",
            caption="../report/connectivity_summary.rst",
            category="Connectivity",
        ),
        other_formats=PLAN.other_formats(PLAN.CONNECTIVITY_FIGURES),
    log:
        "results/logs/figures/connectivity.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        figures=as_json(config["figures"]),
        families=as_json({v: PLAN.architecture_family(v) for v in config["connectivity"]["variants"]}),
        barrier=config["connectivity"]["barrier"],
        code=code_hash("connectivity_figures"),
    shell:
        CLI["connectivity-figure"].shell()
