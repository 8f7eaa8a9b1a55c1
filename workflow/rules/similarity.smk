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
        code=code_hash("tables"),
    shell:
        "intertwine table {input} --schema similarity --out {output} > {log} 2>&1"
