# The DEQ neural tangent kernel (Feng & Kolter; config block `deqntk`): the accuracy study's
# [train; test] x train Gram in blocks of rows (a job each, so a paper-scale Gram spreads over a
# cluster), kernel regression per variance setting and training-set size on it, the depth sweep
# per draw, the convolutional DEQ-NTK on a small subset, and per zoo member the kernel reference
# for the similarity stage; tables and figures.


rule deqntk_gram:
    input:
        DATA_FILES,
    output:
        "results/deqntk/gram/{variances}/{part}{start}.npz",
    log:
        "results/logs/deqntk/gram/{variances}/{part}{start}.log",
    benchmark:
        "results/benchmarks/deqntk/gram/{variances}/{part}{start}.tsv"
    wildcard_constraints:
        part="train|test",
        start=r"\d+",
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_gpu(NEEDS.deqntk_gram),
    params:
        block=as_json(PLAN.deqntk_block("gram")),
        n_train=PLAN.deqntk_train_rows,
        stop=lambda wc: PLAN.deqntk_stop(wc.part, int(wc.start)),
        seed=config["seed"],
        device=config["device"],
        code=code_hash("deqntk_gram"),
        data=data_dir,
    shell:
        CLI["deqntk-gram"].shell()


rule deqntk_regression:
    input:
        DATA_FILES,
        blocks=lambda wc: PLAN.deqntk_blocks(wc.variances, int(wc.n_train)),
    output:
        "results/deqntk/accuracy/{variances}/n{n_train}.parquet",
    log:
        "results/logs/deqntk/accuracy/{variances}/n{n_train}.log",
    benchmark:
        "results/benchmarks/deqntk/accuracy/{variances}/n{n_train}.tsv"
    wildcard_constraints:
        n_train=r"\d+",
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_gpu(NEEDS.deqntk_regression),
    params:
        block=as_json(PLAN.deqntk_block("regression")),
        seed=config["seed"],
        device=config["device"],
        code=code_hash("deqntk_regression"),
        data=data_dir,
    shell:
        CLI["deqntk-regression"].shell()


rule deqntk_depth:
    input:
        DATA_FILES,
    output:
        "results/deqntk/depth/draw{draw}.parquet",
    log:
        "results/logs/deqntk/depth/draw{draw}.log",
    benchmark:
        "results/benchmarks/deqntk/depth/draw{draw}.tsv"
    wildcard_constraints:
        draw=r"\d+",
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_gpu(NEEDS.deqntk_depth),
    params:
        block=as_json(PLAN.deqntk_block("depth")),
        seed=config["seed"],
        device=config["device"],
        code=code_hash("deqntk_depth"),
        data=data_dir,
    shell:
        CLI["deqntk-depth"].shell()


rule deqntk_conv:
    input:
        DATA_FILES,
    output:
        "results/deqntk/conv.parquet",
    log:
        "results/logs/deqntk/conv.log",
    benchmark:
        "results/benchmarks/deqntk/conv.tsv"
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_gpu(NEEDS.deqntk_conv),
    params:
        block=as_json(PLAN.deqntk_block("conv")),
        seed=config["seed"],
        device=config["device"],
        code=code_hash("deqntk_conv"),
        data=data_dir,
    shell:
        CLI["deqntk-conv"].shell()


rule kernel_reference_member:
    input:
        DATA_FILES,
        checkpoint="results/zoo/{variant}/seed{seed}.pt",
    output:
        "results/deqntk/reference/{variant}/seed{seed}.parquet",
    log:
        "results/logs/deqntk/reference/{variant}/seed{seed}.log",
    benchmark:
        "results/benchmarks/deqntk/reference/{variant}/seed{seed}.tsv"
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_gpu(NEEDS.kernel_reference_member),
    params:
        block=as_json(PLAN.deqntk_block("reference")),
        seed=config["seed"],
        device=config["device"],
        code=lambda wc: variant_code_hash("kernel_reference", wc.variant),
        data=data_dir,
    shell:
        CLI["kernel-reference-member"].shell()


rule deqntk_table:
    input:
        PLAN.deqntk_parts,
    output:
        "results/tables/deqntk.parquet",
    log:
        "results/logs/tables/deqntk.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        code=code_hash("deqntk_table"),
    shell:
        CLI["deqntk-table"].shell()


rule kernel_reference_table:
    input:
        PLAN.kernel_reference_jobs,
    output:
        "results/tables/kernel_reference.parquet",
    log:
        "results/logs/tables/kernel_reference.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        code=code_hash("deqntk_table"),
    shell:
        CLI["table"].shell(schema="kernel_reference")


rule deqntk_figure:
    input:
        zoo="results/tables/zoo.parquet",
        table=PLAN.deqntk_tables,
        reference=PLAN.kernel_reference_tables,
    output:
        accuracy=[
            report(
                png,
                caption="../report/deqntk_accuracy.rst",
                category="DEQ neural tangent kernel",
            )
            for png in PLAN.deqntk_figures
            if png.endswith("deqntk_accuracy.png")
        ],
        depth=[
            report(
                png,
                caption="../report/deqntk_depth.rst",
                category="DEQ neural tangent kernel",
            )
            for png in PLAN.deqntk_figures
            if png.endswith("deqntk_depth.png")
        ],
        reference=[
            report(
                png,
                caption="../report/deqntk_reference.rst",
                category="DEQ neural tangent kernel",
            )
            for png in PLAN.deqntk_figures
            if png.endswith("deqntk_reference.png")
        ],
        other_formats=PLAN.other_formats(PLAN.deqntk_figures),
    log:
        "results/logs/figures/deqntk.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        # the figures the config asks for, each with the table it draws
        **CLI["deqntk-figure"].when_given(
            table=lambda wc, input: input.table,
            reference=lambda wc, input: input.reference,
            accuracy=lambda wc, output: output.accuracy,
            depth=lambda wc, output: output.depth,
            kernel_reference=lambda wc, output: output.reference,
        ),
        figures=as_json(config["figures"]),
        code=code_hash("deqntk_figures"),
    shell:
        CLI["deqntk-figure"].shell()
