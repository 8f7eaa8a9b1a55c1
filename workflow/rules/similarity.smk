rule similarity_pair:
    input:
        DATA_FILES,
        a=member(PLAN.similarity_pairs, "a"),
        b=member(PLAN.similarity_pairs, "b"),
    output:
        "results/similarity/{variant}/pair{pair}.parquet",
    log:
        "results/logs/similarity/{variant}/pair{pair}.log",
    benchmark:
        "results/benchmarks/similarity/{variant}/pair{pair}.tsv"
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_gpu(NEEDS.similarity_pair),
    params:
        block=as_json(PLAN.similarity_block),
        parts=lambda wc: PLAN.similarity_parts(int(wc.pair)),
        seed=config["seed"],
        device=config["device"],
        code=code_hash("similarity"),
        data=data_dir,
    shell:
        "intertwine similarity-pair --a {input.a} --b {input.b} --data {params.data} --pair {wildcards.pair}"
        "{params.parts} --config {params.block:q} --global-seed {params.seed} --device {params.device}"
        " --threads {threads} --out {output} > {log} 2>&1"


rule similarity_table:
    input:
        PLAN.similarity_jobs,
    output:
        "results/tables/similarity.parquet",
    log:
        "results/logs/tables/similarity.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        code=code_hash("similarity_table"),
    shell:
        "intertwine table {input} --schema similarity --out {output} > {log} 2>&1"


rule similarity_figure:
    input:
        "results/tables/similarity.parquet",
    output:
        figures=[
            report(png, caption=f"../report/{os.path.basename(png)[:-4]}.rst", category="Similarity")
            for png in PLAN.similarity_figures
        ],
        summary=report(
            "results/tables/similarity_summary.csv",
            caption="../report/similarity_summary.rst",
            category="Similarity",
        ),
        other_formats=PLAN.other_formats(PLAN.similarity_figures),
    log:
        "results/logs/figures/similarity.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        figures=as_json(config["figures"]),
        variants=as_json(config["zoo"]["variants"]),
        dataset=DATASET,
        procrustes=(
            " --procrustes results/figures/similarity_procrustes.png"
            if config["similarity"]["procrustes_pairs"]
            else ""
        ),
        cka=" --cka results/figures/similarity_cka.png" if config["similarity"]["cka_pairs"] else "",
        code=code_hash("similarity_figures"),
    shell:
        "intertwine similarity-figure --table {input} --dataset {params.dataset} --variants {params.variants:q}"
        " --figures {params.figures:q}{params.procrustes}{params.cka} --summary {output.summary}"
        " --other-formats {output.other_formats} > {log} 2>&1"
