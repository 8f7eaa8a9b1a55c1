rule stitch_pair:
    input:
        DATA_FILES,
        a=stitch_member("a"),
        b=stitch_member("b"),
    output:
        "results/stitching/{variant}/pair{pair}/{method}.parquet",
    params:
        block=lambda wc: stitch_block(wc.method),
        sites=lambda wc: as_json(STITCHING["sites"].get(wc.variant)),
        training=as_json(config["zoo"]["training"] | {"device": config["device"]}),
        seed=config["seed"],
        code=code_hash("stitching"),
        data=lambda wildcards, input: os.path.dirname(input[0]),
    threads: config["zoo"]["training"]["threads"]
    resources:
        gpu=1,
    conda:
        CONDA_ENV
    log:
        "results/logs/stitching/{variant}/pair{pair}/{method}.log",
    benchmark:
        "results/benchmarks/stitching/{variant}/pair{pair}/{method}.tsv"
    shell:
        "intertwine stitch --a {input.a} --b {input.b} --data {params.data} --method {wildcards.method}"
        " --pair {wildcards.pair} --sites {params.sites:q} --config {params.block:q}"
        " --training {params.training:q} --global-seed {params.seed} --threads {threads}"
        " --out {output} > {log} 2>&1"


rule stitching_table:
    input:
        STITCH_JOBS,
    output:
        "results/tables/stitching.parquet",
    params:
        code=code_hash("tables"),
    conda:
        CONDA_ENV
    log:
        "results/logs/tables/stitching.log",
    shell:
        "intertwine table {input} --schema stitching --out {output} > {log} 2>&1"
