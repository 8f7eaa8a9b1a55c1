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
        code=code_hash("connectivity"),
        data=data_dir,
    shell:
        "intertwine connectivity-pair --a {input.a} --b {input.b} --data {params.data} --pair {wildcards.pair}"
        " --config {params.block:q} --global-seed {params.seed} --device {params.device}"
        " --threads {threads} --out {output} > {log} 2>&1"


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
        code=code_hash("tables"),
    shell:
        "intertwine table {input} --schema connectivity --out {output} > {log} 2>&1"
