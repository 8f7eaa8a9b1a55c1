rule dissect_member:
    input:
        DATA_FILES,
        checkpoint="results/zoo/{variant}/seed{seed}.pt",
    output:
        summary="results/dissection/{variant}/seed{seed}.parquet",
        units="results/dissection/{variant}/seed{seed}.units.parquet",
    log:
        "results/logs/dissection/{variant}/seed{seed}.log",
    benchmark:
        "results/benchmarks/dissection/{variant}/seed{seed}.tsv"
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_gpu(NEEDS.heavy),
    params:
        block=as_json(PLAN.dissection_block()),
        sites=lambda wc: as_json(PLAN.dissection_sites(wc.variant)),
        seed=config["seed"],
        device=config["device"],
        code=lambda wc: variant_code_hash("dissection", wc.variant),
        data=data_dir,
    shell:
        CLI["dissect-member"].shell()


rule dissect_external:
    input:
        weights=lambda wc: config["dissection"]["external"][wc.name]["weights"],
    output:
        summary="results/dissection/external/{name}.parquet",
        units="results/dissection/external/{name}.units.parquet",
    log:
        "results/logs/dissection/external/{name}.log",
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_gpu(NEEDS.heavy),
    params:
        block=as_json(PLAN.dissection_block()),
        arch=lambda wc: config["dissection"]["external"][wc.name]["arch"],
        sites=lambda wc: as_json(PLAN.external_sites(wc.name)),
        seed=config["seed"],
        device=config["device"],
        code=code_hash("dissection"),
    shell:
        CLI["dissect-external"].shell()


rule dissection_table:
    input:
        summaries=PLAN.dissection_jobs,
        units=[job.replace(".parquet", ".units.parquet") for job in PLAN.dissection_jobs],
    output:
        table="results/tables/dissection.parquet",
        units="results/tables/dissection_units.parquet",
    log:
        "results/logs/tables/dissection.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        code=code_hash("dissection_table"),
    shell:
        (
            "("
            + CLI["table"].shell(
                log=False, parts="{input.summaries}", schema="dissection", out="{output.table}"
            )
            + " && "
            + CLI["table"].shell(
                log=False, parts="{input.units}", schema="dissection_units", out="{output.units}"
            )
            + ") > {log} 2>&1"
        )


rule dissection_figure:
    input:
        table="results/tables/dissection.parquet",
        units="results/tables/dissection_units.parquet",
    output:
        figures=[
            report(png, caption=f"../report/{os.path.basename(png)[:-4]}.rst", category="Dissection")
            for png in PLAN.DISSECTION_FIGURES
        ],
        summary=report(
            "results/tables/dissection_summary.csv",
            caption="../report/dissection_summary.rst",
            category="Dissection",
        ),
        other_formats=PLAN.other_formats(PLAN.DISSECTION_FIGURES),
    log:
        "results/logs/figures/dissection.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        figures=as_json(config["figures"]),
        category_sites=as_json(PLAN.category_sites),
        code=code_hash("dissection_figures"),
    shell:
        CLI["dissection-figure"].shell()


rule dissection_masks:
    input:
        DATA_FILES,
        checkpoint="results/zoo/{variant}/seed0.pt",
        # The units as the member's dissection labelled them (thresholds, IoU): not recomputed.
        units="results/dissection/{variant}/seed0.units.parquet",
        # Drawn after the stage's table, so a failing configuration stops there first.
        table="results/tables/dissection.parquet",
    output:
        png=report(
            "results/figures/dissection_masks_{variant}.png",
            caption="../report/dissection_masks.rst",
            category="Dissection",
            subcategory="{variant}",
        ),
        other_formats=PLAN.other_formats(["results/figures/dissection_masks_{variant}.png"]),
    log:
        "results/logs/figures/dissection_masks_{variant}.log",
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_cpu(NEEDS.heavy),
    params:
        block=as_json(PLAN.dissection_block("masks")),
        site=lambda wc: PLAN.mask_site(wc.variant),
        figures=as_json(config["figures"]),
        seed=config["seed"],
        device=config["device"],
        code=lambda wc: [variant_code_hash("dissection", wc.variant), code_hash("dissection_figures")],
        data=data_dir,
    shell:
        CLI["dissection-masks"].shell()
