rule rotation_trial:
    input:
        DATA_FILES,
        checkpoint="results/zoo/{variant}/seed{seed}.pt",
    output:
        "results/rotation/{variant}/seed{seed}/{site}/{group}/trial{trial}.parquet",
    params:
        block=as_json(PLAN.rotation_block),
        training=as_json(PLAN.train_block()),
        seed=config["seed"],
        device=config["device"],
        code=code_hash("rotation"),
        data=data_dir,
    threads: THREADS
    resources:
        gpu=1,
        eval_batch_size=PLAN.train_run()["eval_batch_size"],  # not a params: see zoo.smk
    conda:
        CONDA_ENV
    log:
        "results/logs/rotation/{variant}/seed{seed}/{site}/{group}/trial{trial}.log",
    benchmark:
        "results/benchmarks/rotation/{variant}/seed{seed}/{site}/{group}/trial{trial}.tsv"
    shell:
        "intertwine rotation-trial --checkpoint {input.checkpoint} --data {params.data} --site {wildcards.site}"
        " --group {wildcards.group} --trial {wildcards.trial} --config {params.block:q}"
        " --training {params.training:q} --eval-batch-size {resources.eval_batch_size}"
        " --global-seed {params.seed} --device {params.device}"
        " --threads {threads} --out {output} > {log} 2>&1"


rule rotation_table:
    input:
        PLAN.rotation_trials,
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
