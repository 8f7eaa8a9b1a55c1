rule rotation_trial:
    input:
        DATA_FILES,
        checkpoint="results/zoo/{variant}/seed{seed}.pt",
    output:
        "results/rotation/{variant}/seed{seed}/{site}/{group}/trial{trial}.parquet",
    params:
        block=as_json({k: v for k, v in ROTATION.items() if k not in ("variants", "seeds", "sites", "trials")}),
        training=as_json(config["zoo"]["training"] | {"device": config["device"]}),
        seed=config["seed"],
        code=code_hash("rotation"),
        data=lambda wildcards, input: os.path.dirname(input[0]),
    threads: config["zoo"]["training"]["threads"]
    resources:
        gpu=1,
    conda:
        CONDA_ENV
    log:
        "results/logs/rotation/{variant}/seed{seed}/{site}/{group}/trial{trial}.log",
    benchmark:
        "results/benchmarks/rotation/{variant}/seed{seed}/{site}/{group}/trial{trial}.tsv"
    shell:
        "intertwine rotation --checkpoint {input.checkpoint} --data {params.data} --site {wildcards.site}"
        " --group {wildcards.group} --trial {wildcards.trial} --config {params.block:q}"
        " --training {params.training:q} --global-seed {params.seed} --threads {threads}"
        " --out {output} > {log} 2>&1"


rule rotation_table:
    input:
        ROTATION_TRIALS,
    output:
        "results/tables/rotation.parquet",
    params:
        code=code_hash("tables"),
    conda:
        CONDA_ENV
    log:
        "results/logs/tables/rotation.log",
    shell:
        "intertwine table {input} --schema rotation --out {output} > {log} 2>&1"
