rule stitch_pair:
    input:
        DATA_FILES,
        a=member(PLAN.stitch_pairs, "a"),
        b=member(PLAN.stitch_pairs, "b"),
    output:
        "results/stitching/{variant}/pair{pair}/{method}.parquet",
    log:
        "results/logs/stitching/{variant}/pair{pair}/{method}.log",
    benchmark:
        "results/benchmarks/stitching/{variant}/pair{pair}/{method}.tsv"
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_gpu(NEEDS.stitch_pair),
    params:
        block=lambda wc: as_json(PLAN.stitch_block(wc.method)),
        sites=lambda wc: as_json(config["stitching"]["sites"].get(wc.variant)),
        seed=config["seed"],
        device=config["device"],
        code=code_hash("stitching"),
        data=data_dir,
    shell:
        "intertwine stitch-pair --a {input.a} --b {input.b} --data {params.data} --method {wildcards.method}"
        " --pair {wildcards.pair} --sites {params.sites:q} --config {params.block:q}"
        " --global-seed {params.seed} --device {params.device} --threads {threads}"
        " --out {output} > {log} 2>&1"


rule stitching_table:
    input:
        PLAN.stitch_jobs,
    output:
        "results/tables/stitching.parquet",
    log:
        "results/logs/tables/stitching.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        code=code_hash("stitching_table"),
    shell:
        "intertwine table {input} --schema stitching --out {output} > {log} 2>&1"


rule stitching_figure:
    input:
        "results/tables/stitching.parquet",
    output:
        penalty=report(
            "results/figures/stitching_penalty.png",
            caption="../report/stitching_penalty.rst",
            category="Model stitching",
        ),
        dimension=report(
            "results/figures/stitching_dimension.png",
            caption="../report/stitching_dimension.rst",
            category="Model stitching",
        ),
        convergence=report(
            "results/figures/stitching_convergence.png",
            caption="../report/stitching_convergence.rst",
            category="Model stitching",
        ),
        summary=report(
            "results/tables/stitching_summary.csv",
            caption="../report/stitching_summary.rst",
            category="Model stitching",
        ),
        other_formats=PLAN.other_formats(
            [
                "results/figures/stitching_penalty.png",
                "results/figures/stitching_dimension.png",
                "results/figures/stitching_convergence.png",
            ]
        ),
    log:
        "results/logs/figures/stitching.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        figures=as_json(config["figures"]),
        code=code_hash("stitching_figures"),
    shell:
        "intertwine stitching-figure --table {input} --figures {params.figures:q}"
        " --penalty {output.penalty} --dimension {output.dimension} --convergence {output.convergence}"
        " --summary {output.summary}"
        " --other-formats {output.other_formats} > {log} 2>&1"


rule stitching_studies_figure:
    input:
        table="results/tables/stitching.parquet",
        zoo="results/tables/zoo.parquet",
    output:
        figures=[
            report(png, caption=f"../report/{os.path.basename(png)[:-4]}.rst", category="Stitching studies")
            for png in PLAN.study_figures.values()
        ],
        tables=[
            report(csv, caption=f"../report/{os.path.basename(csv)[:-4]}.rst", category="Stitching studies")
            for csv in PLAN.study_tables
        ],
        other_formats=PLAN.other_formats(list(PLAN.study_figures.values())),
    log:
        "results/logs/figures/stitching_studies.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        figures=as_json(config["figures"]),
        paths=" ".join(f"--{flag} {png}" for flag, png in PLAN.study_figures.items())
        + (" --leaky-relu-table results/tables/leaky_relu_accuracy.csv" if PLAN.leaky_slopes else ""),
        slopes=as_json(PLAN.leaky_slopes),
        transformers=as_json(PLAN.transformers),
        code=code_hash("stitching_figures"),
    shell:
        "intertwine stitching-studies --table {input.table} --zoo {input.zoo} --slopes {params.slopes:q}"
        " --transformers {params.transformers:q} --figures {params.figures:q} {params.paths}"
        " --other-formats {output.other_formats} > {log} 2>&1"
