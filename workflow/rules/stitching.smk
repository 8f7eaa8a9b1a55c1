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
        code=lambda wc: variant_code_hash("stitching", wc.variant),
        data=data_dir,
    shell:
        CLI["stitch-pair"].shell()


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
        CLI["table"].shell(schema="stitching")


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
        CLI["stitching-figure"].shell()


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
        **CLI["stitching-studies"].when_given(
            leaky_relu=PLAN.study_figures.get("leaky_relu"),
            leaky_relu_table=PLAN.study_tables,
            alpha_cv=PLAN.study_figures.get("alpha_cv"),
            l1=PLAN.study_figures.get("l1"),
            softsort=PLAN.study_figures.get("softsort"),
            transformer=PLAN.study_figures.get("transformer"),
        ),
        figures=as_json(config["figures"]),
        slopes=as_json(PLAN.leaky_slopes),
        transformers=as_json(PLAN.transformers),
        code=code_hash("stitching_figures"),
    shell:
        CLI["stitching-studies"].shell()
