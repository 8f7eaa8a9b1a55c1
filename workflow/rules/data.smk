rule prepare_data:
    output:
        DATA_OUTPUTS,
    log:
        f"results/logs/data/{DATASET}.log",
    benchmark:
        f"results/benchmarks/data/{DATASET}.tsv"
    conda:
        CONDA_ENV
    resources:
        **on_cpu(NEEDS.prepare_data),
    params:
        block=as_json(config["data"]),
        seed=config["seed"],
        code=code_hash("data"),
        out=lambda wildcards, output: os.path.dirname(output[0]),
    shell:
        CLI["prepare-data"].shell()
