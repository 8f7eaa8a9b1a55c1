rule zoo_figure:
    input:
        "results/tables/zoo.parquet",
    output:
        png=report(
            "results/figures/zoo_accuracy.png",
            caption="../report/zoo_accuracy.rst",
            category="Model zoo",
        ),
        other_formats=extra_formats("results/figures/zoo_accuracy"),
        summary=report(
            "results/tables/zoo_summary.csv",
            caption="../report/zoo_summary.rst",
            category="Model zoo",
        ),
    params:
        figures=as_json(config["figures"]),
        variants=as_json(config["zoo"]["variants"]),
        dataset=DATASET,
        code=code_hash("figures"),
    conda:
        CONDA_ENV
    log:
        "results/logs/figures/zoo_accuracy.log",
    shell:
        "intertwine zoo-figure --zoo {input} --variants {params.variants:q} --dataset {params.dataset}"
        " --figures {params.figures:q} --out {output.png} {output.other_formats} --summary {output.summary} > {log} 2>&1"


rule rotation_figure:
    input:
        "results/tables/rotation.parquet",
    output:
        png=report(
            "results/figures/rotation_penalty.png",
            caption="../report/rotation_penalty.rst",
            category="Rotation penalty",
        ),
        other_formats=extra_formats("results/figures/rotation_penalty"),
    params:
        figures=as_json(config["figures"]),
        code=code_hash("figures"),
    conda:
        CONDA_ENV
    log:
        "results/logs/figures/rotation_penalty.log",
    shell:
        "intertwine rotation-figure --table {input} --figures {params.figures:q}"
        " --out {output.png} {output.other_formats} > {log} 2>&1"
