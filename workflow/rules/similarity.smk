rule similarity_pair:
    input:
        DATA_FILES,
        a=similarity_member("a"),
        b=similarity_member("b"),
    output:
        "results/similarity/{variant}/pair{pair}.parquet",
    params:
        block=as_json({k: v for k, v in SIMILARITY.items() if k not in ("variants", "procrustes_pairs", "cka_pairs")}),
        parts=lambda wc: similarity_parts(int(wc.pair)),
        seed=config["seed"],
        device=config["device"],
        code=code_hash("similarity"),
        data=lambda wildcards, input: os.path.dirname(input[0]),
    threads: config["zoo"]["training"]["threads"]
    resources:
        gpu=1,
    conda:
        CONDA_ENV
    log:
        "results/logs/similarity/{variant}/pair{pair}.log",
    benchmark:
        "results/benchmarks/similarity/{variant}/pair{pair}.tsv"
    shell:
        "intertwine similarity --a {input.a} --b {input.b} --data {params.data} --pair {wildcards.pair}"
        "{params.parts} --config {params.block:q} --global-seed {params.seed} --device {params.device}"
        " --threads {threads} --out {output} > {log} 2>&1"


rule similarity_table:
    input:
        SIMILARITY_JOBS,
    output:
        "results/tables/similarity.parquet",
    params:
        code=code_hash("tables"),
    conda:
        CONDA_ENV
    log:
        "results/logs/tables/similarity.log",
    shell:
        "intertwine table {input} --schema similarity --out {output} > {log} 2>&1"
