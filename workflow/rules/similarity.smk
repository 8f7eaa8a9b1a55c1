rule similarity_pair:
    input:
        DATA_FILES,
        a=member(PLAN.similarity_pairs, "a"),
        b=member(PLAN.similarity_pairs, "b"),
    output:
        "results/similarity/{variant}/pair{pair}.parquet",
    log:
        "results/logs/similarity/{variant}/pair{pair}.log",
    benchmark:
        "results/benchmarks/similarity/{variant}/pair{pair}.tsv"
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_gpu(NEEDS.similarity_pair),
    params:
        **CLI["similarity-pair"].when_given(
            procrustes=lambda wc: PLAN.similarity_measures(int(wc.pair))["procrustes"],
            cka=lambda wc: PLAN.similarity_measures(int(wc.pair))["cka"],
        ),
        block=as_json(PLAN.similarity_block),
        seed=config["seed"],
        device=config["device"],
        code=lambda wc: variant_code_hash("similarity", wc.variant),
        data=data_dir,
    shell:
        CLI["similarity-pair"].shell()


rule similarity_table:
    input:
        PLAN.similarity_jobs,
    output:
        "results/tables/similarity.parquet",
    log:
        "results/logs/tables/similarity.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        code=code_hash("similarity_table"),
    shell:
        CLI["table"].shell(schema="similarity")


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
        **CLI["similarity-figure"].when_given(
            procrustes=config["similarity"]["procrustes_pairs"]
            and "results/figures/similarity_procrustes.png",
            cka=config["similarity"]["cka_pairs"] and "results/figures/similarity_cka.png",
        ),
        figures=as_json(config["figures"]),
        variants=as_json(config["zoo"]["variants"]),
        dataset=DATASET,
        code=code_hash("similarity_figures"),
    shell:
        CLI["similarity-figure"].shell()


# The zoo as a whole (similarity.zoo): per variant, one job over its first K members, the table
# of every measure's distance matrices and distances to the Procrustes mean, and the embedding.
rule similarity_zoo:
    input:
        DATA_FILES,
        members=lambda wc: [
            f"results/zoo/{wc.variant}/seed{seed}.pt" for seed in PLAN.similarity_zoo_members(wc.variant)
        ],
    output:
        "results/similarity/{variant}/zoo.parquet",
    log:
        "results/logs/similarity/{variant}/zoo.log",
    benchmark:
        "results/benchmarks/similarity/{variant}/zoo.tsv"
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_gpu(NEEDS.similarity_zoo),
    params:
        sites=lambda wc: " ".join(PLAN.similarity_zoo_sites(wc.variant)),
        block=as_json(PLAN.similarity_zoo_block),
        seed=config["seed"],
        device=config["device"],
        code=lambda wc: variant_code_hash("similarity_zoo", wc.variant),
        data=data_dir,
    shell:
        CLI["similarity-zoo"].shell()


rule similarity_zoo_table:
    input:
        PLAN.similarity_zoo_jobs,
    output:
        "results/tables/similarity_zoo.parquet",
    log:
        "results/logs/tables/similarity_zoo.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        code=code_hash("similarity_table"),
    shell:
        CLI["table"].shell(schema="similarity_zoo")


rule similarity_zoo_figure:
    input:
        "results/tables/similarity_zoo.parquet",
    output:
        figure=report(
            PLAN.SIMILARITY_ZOO_FIGURE, caption="../report/similarity_zoo.rst", category="Similarity"
        ),
        summary=report(
            "results/tables/similarity_zoo_summary.csv",
            caption="../report/similarity_zoo_summary.rst",
            category="Similarity",
        ),
        other_formats=PLAN.other_formats([PLAN.SIMILARITY_ZOO_FIGURE]),
    log:
        "results/logs/figures/similarity_zoo.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        figures=as_json(config["figures"]),
        code=code_hash("similarity_figures"),
    shell:
        CLI["similarity-zoo-figure"].shell()
