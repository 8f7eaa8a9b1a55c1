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
        code=code_hash("tables"),
    shell:
        "intertwine table {input} --schema stitching --out {output} > {log} 2>&1"
