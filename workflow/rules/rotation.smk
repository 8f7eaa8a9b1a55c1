rule rotation_trial:
    input:
        DATA_FILES,
        checkpoint="results/zoo/{variant}/seed{seed}.pt",
    output:
        "results/rotation/{variant}/seed{seed}/{site}/{group}/trial{trial}.parquet",
    log:
        "results/logs/rotation/{variant}/seed{seed}/{site}/{group}/trial{trial}.log",
    benchmark:
        "results/benchmarks/rotation/{variant}/seed{seed}/{site}/{group}/trial{trial}.tsv"
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_gpu(NEEDS.rotation_trial),
        eval_batch_size=PLAN.train_run()["eval_batch_size"],  # not a params: see zoo.smk
    params:
        block=as_json(PLAN.rotation_block),
        training=as_json(PLAN.train_block()),
        seed=config["seed"],
        device=config["device"],
        code=lambda wc: variant_code_hash("rotation", wc.variant),
        data=data_dir,
    shell:
        CLI["rotation-trial"].shell()


rule rotation_table:
    input:
        PLAN.rotation_trials,
    output:
        "results/tables/rotation.parquet",
    log:
        "results/logs/tables/rotation.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        code=code_hash("rotation_table"),
    shell:
        CLI["table"].shell(schema="rotation")


rule rotation_figure:
    input:
        "results/tables/rotation.parquet",
    output:
        png=report(
            "results/figures/rotation_penalty.png",
            caption="../report/rotation_penalty.rst",
            category="Rotation penalty",
        ),
        other_formats=PLAN.other_formats(["results/figures/rotation_penalty.png"]),
    log:
        "results/logs/figures/rotation_penalty.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        figures=as_json(config["figures"]),
        code=code_hash("rotation_figures"),
    shell:
        CLI["rotation-figure"].shell()
