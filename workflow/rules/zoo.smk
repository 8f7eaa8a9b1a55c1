rule train_member:
    input:
        DATA_FILES,
        # a gated FL variant's feature network: a trained member of another variant
        features=lambda wc: PLAN.features_checkpoint(wc.variant, int(wc.seed)),
    output:
        checkpoint=protected("results/zoo/{variant}/seed{seed}.pt"),
        metrics="results/zoo/{variant}/seed{seed}.metrics.parquet",
    log:
        "results/logs/zoo/{variant}/seed{seed}.log",
    benchmark:
        "results/benchmarks/zoo/{variant}/seed{seed}.tsv"
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        gpu=1,
        # Settings that cannot change a result (Plan.train_run): here, not in params, so that
        # changing them reruns nothing.
        eval_batch_size=lambda wc: PLAN.train_run(wc.variant)["eval_batch_size"],
    params:
        spec=lambda wc: as_json(config["zoo"]["variants"][wc.variant]),
        training=lambda wc: as_json(PLAN.train_block(wc.variant)),
        seed=config["seed"],
        device=config["device"],
        code=code_hash("zoo"),
        data=data_dir,
        features=lambda wc, input: f" --features {input.features}" if input.features else "",
    shell:
        "intertwine train-member --data {params.data} --variant {wildcards.variant} --seed {wildcards.seed}"
        " --spec {params.spec:q} --training {params.training:q} --global-seed {params.seed}"
        " --eval-batch-size {resources.eval_batch_size} --device {params.device} --threads {threads}"
        " --out {output.checkpoint} --metrics {output.metrics}{params.features}"
        " > {log} 2>&1"


rule zoo_table:
    input:
        PLAN.zoo_outputs("results/zoo/{variant}/seed{seed}.metrics.parquet"),
    output:
        zoo="results/tables/zoo.parquet",
        epochs="results/tables/zoo_epochs.parquet",
    log:
        "results/logs/tables/zoo.log",
    conda:
        CONDA_ENV
    params:
        code=code_hash("tables"),
    shell:
        "intertwine zoo-table {input} --out {output.zoo} --epochs-out {output.epochs} > {log} 2>&1"
