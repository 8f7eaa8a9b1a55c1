rule zoo_figure:
    input:
        "results/tables/zoo.parquet",
    output:
        png=report(
            "results/figures/zoo_accuracy.png",
            caption="../report/zoo_accuracy.rst",
            category="Model zoo",
        ),
        other_formats=PLAN.other_formats(["results/figures/zoo_accuracy.png"]),
        summary=report(
            "results/tables/zoo_summary.csv",
            caption="../report/zoo_summary.rst",
            category="Model zoo",
        ),
    log:
        "results/logs/figures/zoo_accuracy.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        figures=as_json(config["figures"]),
        variants=as_json(config["zoo"]["variants"]),
        dataset=DATASET,
        code=code_hash("zoo_figures"),
    shell:
        "intertwine zoo-figure --zoo {input} --variants {params.variants:q} --dataset {params.dataset}"
        " --figures {params.figures:q} --out {output.png} --other-formats {output.other_formats}"
        " --summary {output.summary} > {log} 2>&1"


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
        "intertwine rotation-figure --table {input} --figures {params.figures:q}"
        " --out {output.png} --other-formats {output.other_formats} > {log} 2>&1"


rule stitching_figure:
    input:
        "results/tables/stitching.parquet",
    output:
        penalty=report(
            "results/figures/stitching_penalty.png",
            caption="../report/stitching_penalty.rst",
            category="Model stitching",
        ),
        dimension=report(
            "results/figures/stitching_dimension.png",
            caption="../report/stitching_dimension.rst",
            category="Model stitching",
        ),
        convergence=report(
            "results/figures/stitching_convergence.png",
            caption="../report/stitching_convergence.rst",
            category="Model stitching",
        ),
        summary=report(
            "results/tables/stitching_summary.csv",
            caption="../report/stitching_summary.rst",
            category="Model stitching",
        ),
        other_formats=PLAN.other_formats(
            [
                "results/figures/stitching_penalty.png",
                "results/figures/stitching_dimension.png",
                "results/figures/stitching_convergence.png",
            ]
        ),
    log:
        "results/logs/figures/stitching.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        figures=as_json(config["figures"]),
        code=code_hash("stitching_figures"),
    shell:
        "intertwine stitching-figure --table {input} --figures {params.figures:q}"
        " --penalty {output.penalty} --dimension {output.dimension} --convergence {output.convergence}"
        " --summary {output.summary}"
        " --other-formats {output.other_formats} > {log} 2>&1"


rule similarity_figure:
    input:
        "results/tables/similarity.parquet",
    output:
        figures=[
            report(png, caption=f"../report/{os.path.basename(png)[:-4]}.rst", category="Similarity")
            for png in PLAN.similarity_figures
        ],
        summary=report(
            "results/tables/similarity_summary.csv",
            caption="../report/similarity_summary.rst",
            category="Similarity",
        ),
        other_formats=PLAN.other_formats(PLAN.similarity_figures),
    log:
        "results/logs/figures/similarity.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        figures=as_json(config["figures"]),
        variants=as_json(config["zoo"]["variants"]),
        dataset=DATASET,
        procrustes=(
            " --procrustes results/figures/similarity_procrustes.png"
            if config["similarity"]["procrustes_pairs"]
            else ""
        ),
        cka=" --cka results/figures/similarity_cka.png" if config["similarity"]["cka_pairs"] else "",
        code=code_hash("similarity_figures"),
    shell:
        "intertwine similarity-figure --table {input} --dataset {params.dataset} --variants {params.variants:q}"
        " --figures {params.figures:q}{params.procrustes}{params.cka} --summary {output.summary}"
        " --other-formats {output.other_formats} > {log} 2>&1"


rule connectivity_figure:
    input:
        "results/tables/connectivity.parquet",
    output:
        figures=[
            report(png, caption=f"../report/{os.path.basename(png)[:-4]}.rst", category="Connectivity")
            for png in PLAN.CONNECTIVITY_FIGURES
        ],
        summary=report(
            "results/tables/connectivity_summary.csv",
            caption="../report/connectivity_summary.rst",
            category="Connectivity",
        ),
        other_formats=PLAN.other_formats(PLAN.CONNECTIVITY_FIGURES),
    log:
        "results/logs/figures/connectivity.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        figures=as_json(config["figures"]),
        families=as_json({v: PLAN.architecture_family(v) for v in config["connectivity"]["variants"]}),
        barrier=config["connectivity"]["barrier"],
        code=code_hash("connectivity_figures"),
    shell:
        "intertwine connectivity-figure --table {input} --families {params.families:q} --barrier {params.barrier}"
        " --figures {params.figures:q} --curves {output.figures[0]} --barriers {output.figures[1]}"
        " --summary {output.summary} --other-formats {output.other_formats} > {log} 2>&1"


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
        "intertwine dissection-figure --table {input.table} --units {input.units}"
        " --category-sites {params.category_sites:q} --figures {params.figures:q}"
        " --fraction {output.figures[0]} --categories {output.figures[1]} --summary {output.summary}"
        " --other-formats {output.other_formats} > {log} 2>&1"


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
        code=[code_hash("dissection"), code_hash("dissection_figures")],
        data=data_dir,
    shell:
        "intertwine dissection-masks --checkpoint {input.checkpoint} --data {params.data} --site {params.site}"
        " --units {input.units} --config {params.block:q} --figures {params.figures:q} --global-seed {params.seed}"
        " --device {params.device} --threads {threads} --out {output.png}"
        " --other-formats {output.other_formats} > {log} 2>&1"


rule stitching_studies_figure:
    input:
        table="results/tables/stitching.parquet",
        zoo="results/tables/zoo.parquet",
    output:
        figures=[
            report(png, caption=f"../report/{os.path.basename(png)[:-4]}.rst", category="Stitching studies")
            for png in PLAN.study_figures.values()
        ],
        tables=[
            report(csv, caption=f"../report/{os.path.basename(csv)[:-4]}.rst", category="Stitching studies")
            for csv in PLAN.study_tables
        ],
        other_formats=PLAN.other_formats(list(PLAN.study_figures.values())),
    log:
        "results/logs/figures/stitching_studies.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        figures=as_json(config["figures"]),
        paths=" ".join(f"--{flag} {png}" for flag, png in PLAN.study_figures.items())
        + (" --leaky-relu-table results/tables/leaky_relu_accuracy.csv" if PLAN.leaky_slopes else ""),
        slopes=as_json(PLAN.leaky_slopes),
        transformers=as_json(PLAN.transformers),
        code=code_hash("stitching_figures"),
    shell:
        "intertwine stitching-studies --table {input.table} --zoo {input.zoo} --slopes {params.slopes:q}"
        " --transformers {params.transformers:q} --figures {params.figures:q} {params.paths}"
        " --other-formats {output.other_formats} > {log} 2>&1"
