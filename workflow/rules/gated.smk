# Gated networks and the neural path kernel (Lakshminarayanan & Singh): the gated variants are zoo
# variants (spec key `gated`, trained by train_member); here, per member, the kernels and their
# checks, then the study's table beside the paper's Tables I-III, its findings and figures.


rule npk_member:
    input:
        DATA_FILES,
        checkpoint="results/zoo/{variant}/seed{seed}.pt",
    output:
        "results/gated/{variant}/seed{seed}.parquet",
    log:
        "results/logs/gated/{variant}/seed{seed}.log",
    benchmark:
        "results/benchmarks/gated/{variant}/seed{seed}.tsv"
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_gpu(NEEDS.heavy),
    params:
        block=as_json(PLAN.gated_block),
        seed=config["seed"],
        device=config["device"],
        code=lambda wc: variant_code_hash("gated", wc.variant),
        data=data_dir,
    shell:
        CLI["npk-member"].shell()


rule gated_ensemble:
    input:
        DATA_FILES,
        checkpoints=lambda wildcards: PLAN.ensemble_checkpoints(wildcards.variant),
    output:
        "results/gated/{variant}/ensemble.parquet",
    log:
        "results/logs/gated/{variant}/ensemble.log",
    benchmark:
        "results/benchmarks/gated/{variant}/ensemble.tsv"
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_gpu(NEEDS.heavy),
        eval_batch_size=config["zoo"]["training"]["eval_batch_size"],  # not a params: see zoo.smk
    params:
        seed=config["seed"],
        device=config["device"],
        code=lambda wc: variant_code_hash("gated_ensemble", wc.variant),
        data=data_dir,
    shell:
        CLI["gated-ensemble"].shell()


rule gated_table:
    input:
        zoo="results/tables/zoo.parquet",
        parts=PLAN.npk_jobs,
        ensembles=PLAN.gated_ensembles,
    output:
        table="results/tables/gated.parquet",
        npk="results/tables/npk.parquet",
        findings=report(
            "results/tables/gated_findings.csv",
            caption="../report/gated_findings.rst",
            category="Gated networks",
        ),
        ensembles=report(
            "results/tables/gated_ensembles.csv",
            caption="../report/gated_ensembles.rst",
            category="Gated networks",
        ),
    log:
        "results/logs/tables/gated.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        variants=as_json(config["zoo"]["variants"]),
        study=as_json(config["gated"]["variants"]),
        epochs=as_json({v: PLAN.member_epochs(v) for v in config["gated"]["variants"]}),
        dataset=DATASET,
        code=code_hash("gated_table"),
    shell:
        CLI["gated-table"].shell()


rule gated_figure:
    input:
        table="results/tables/gated.parquet",
        npk="results/tables/npk.parquet",
        similarity=PLAN.gated_similarity,
    output:
        accuracy=report(
            "results/figures/gated_accuracy.png",
            caption="../report/gated_accuracy.rst",
            category="Gated networks",
        ),
        permutations=[
            report(
                png,
                caption="../report/gated_permutations.rst",
                category="Gated networks",
            )
            for png in PLAN.gated_figures
            if png.endswith("gated_permutations.png")
        ],
        kernels=report(
            "results/figures/gated_kernels.png",
            caption="../report/gated_kernels.rst",
            category="Gated networks",
        ),
        other_formats=PLAN.other_formats(PLAN.gated_figures),
    log:
        "results/logs/figures/gated.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        **CLI["gated-figure"].when_given(
            similarity=lambda wc, input: input.similarity,
            permutations=lambda wc, output: output.permutations,
        ),
        figures=as_json(config["figures"]),
        code=code_hash("gated_figures"),
    shell:
        CLI["gated-figure"].shell()
