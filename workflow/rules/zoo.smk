# A member's checkpoint comes from train_member (one member per job) or, for a variant with a
# zoo.pack_size above 1, from its pack (train_pack) through unpack_member; the variant's pack size
# decides which rule can make it.
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
    wildcard_constraints:
        variant=PLAN.packed_variants(packed=False),
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_gpu(NEEDS.train_member),
        # Settings that cannot change a result (Plan.train_run): here, not in params, so that
        # changing them reruns nothing.
        eval_batch_size=lambda wc: PLAN.train_run(wc.variant)["eval_batch_size"],
    params:
        **CLI["train-member"].when_given(features=lambda wc, input: input.features),
        spec=lambda wc: as_json(config["zoo"]["variants"][wc.variant]),
        training=lambda wc: as_json(PLAN.train_block(wc.variant)),
        seed=config["seed"],
        device=config["device"],
        code=lambda wc: variant_code_hash("train_member", wc.variant),
        data=data_dir,
    shell:
        CLI["train-member"].shell()


rule train_pack:
    input:
        DATA_FILES,
        features=lambda wc: PLAN.pack_features(wc.variant, int(wc.first), int(wc.last)),
    output:
        protected(directory("results/zoo/{variant}/packs/seeds{first}-{last}")),
    log:
        "results/logs/zoo/{variant}/packs/seeds{first}-{last}.log",
    benchmark:
        "results/benchmarks/zoo/{variant}/packs/seeds{first}-{last}.tsv"
    wildcard_constraints:
        variant=PLAN.packed_variants(),
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_gpu(NEEDS.train_pack),
        eval_batch_size=lambda wc: PLAN.train_run(wc.variant)["eval_batch_size"],
        cuda_graphs=lambda wc: int(PLAN.train_run(wc.variant)["cuda_graphs"]),
        pack_mode=lambda wc: PLAN.train_run(wc.variant)["pack_mode"],
        compile=lambda wc: PLAN.train_run(wc.variant)["compile"],
    params:
        **CLI["train-pack"].when_given(features=lambda wc, input: input.features),
        spec=lambda wc: as_json(config["zoo"]["variants"][wc.variant]),
        training=lambda wc: as_json(PLAN.train_block(wc.variant)),
        seed=config["seed"],
        device=config["device"],
        code=lambda wc: variant_code_hash("train_pack", wc.variant),
        data=data_dir,
        checkpoints=lambda wc: " ".join(
            f"results/zoo/{wc.variant}/seed{seed}.pt" for seed in range(int(wc.first), int(wc.last) + 1)
        ),
    shell:
        CLI["train-pack"].shell()


# Links, not copies: no cluster job, no second copy of the weights.
localrules:
    unpack_member,


rule unpack_member:
    input:
        pack=lambda wc: PLAN.member_pack(wc.variant, int(wc.seed)),
    output:
        checkpoint=protected("results/zoo/{variant}/seed{seed}.pt"),
        metrics="results/zoo/{variant}/seed{seed}.metrics.parquet",
    log:
        "results/logs/zoo/{variant}/seed{seed}.log",
    wildcard_constraints:
        variant=PLAN.packed_variants(),
    conda:
        CONDA_ENV
    shell:
        CLI["unpack-member"].shell()


# A member of a variant taken from checkpoints trained elsewhere (zoo.checkpoints): the s-th file
# of its folder, fitted to the variant's model and tested; a changed file reruns it.
rule import_member:
    input:
        DATA_FILES,
        source=lambda wc: PLAN.imported_file(wc.variant, int(wc.seed)),
    output:
        checkpoint=protected("results/zoo/{variant}/seed{seed}.pt"),
        metrics="results/zoo/{variant}/seed{seed}.metrics.parquet",
    log:
        "results/logs/zoo/{variant}/seed{seed}.log",
    wildcard_constraints:
        variant=PLAN.variant_regex(PLAN.imported_variants()),
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_gpu(NEEDS.heavy),
        eval_batch_size=lambda wc: PLAN.train_run(wc.variant)["eval_batch_size"],
    params:
        **CLI["import-member"].when_given(whole_modules=lambda wc: PLAN.checkpoint_folder(wc.variant)[1]),
        spec=lambda wc: as_json(config["zoo"]["variants"][wc.variant]),
        seed=config["seed"],
        device=config["device"],
        code=lambda wc: variant_code_hash("import_member", wc.variant),
        data=data_dir,
    shell:
        CLI["import-member"].shell()


rule zoo_table:
    input:
        PLAN.member_files("results/zoo/{variant}/seed{seed}.metrics.parquet"),
    output:
        zoo="results/tables/zoo.parquet",
        epochs="results/tables/zoo_epochs.parquet",
    log:
        "results/logs/tables/zoo.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        code=code_hash("zoo_table"),
    shell:
        CLI["zoo-table"].shell()


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
        CLI["zoo-figure"].shell()
