# Excitation pullbacks (Satkiewicz, "Tapping into the Black Box"): per zoo member, their invariance
# to the member's weight symmetries and their faithfulness; per pair of members, their agreement;
# per variant, image grids; then the stage's tables, summary and figures.


rule pullback_member:
    input:
        DATA_FILES,
        checkpoint="results/zoo/{variant}/seed{seed}.pt",
    output:
        symmetry="results/pullback/symmetry/{variant}/seed{seed}.parquet",
        faithfulness="results/pullback/faithfulness/{variant}/seed{seed}.parquet",
    log:
        "results/logs/pullback/{variant}/seed{seed}.log",
    benchmark:
        "results/benchmarks/pullback/{variant}/seed{seed}.tsv"
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_gpu(NEEDS.heavy),
    params:
        block=as_json(PLAN.pullback_block("member")),
        seed=config["seed"],
        device=config["device"],
        code=lambda wc: variant_code_hash("pullback", wc.variant),
        data=data_dir,
    shell:
        CLI["pullback-member"].shell()


rule pullback_pair:
    input:
        DATA_FILES,
        a=member(PLAN.pullback_pairs, "a"),
        b=member(PLAN.pullback_pairs, "b"),
    output:
        agreement="results/pullback/agreement/{variant}/pair{pair}.parquet",
        transfer="results/pullback/transfer/{variant}/pair{pair}.parquet",
    log:
        "results/logs/pullback/{variant}/pair{pair}.log",
    benchmark:
        "results/benchmarks/pullback/{variant}/pair{pair}.tsv"
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_gpu(NEEDS.heavy),
    params:
        block=as_json(PLAN.pullback_block("pair")),
        sites=lambda wc: as_json(PLAN.pullback_sites(wc.variant)),
        seed=config["seed"],
        device=config["device"],
        code=lambda wc: variant_code_hash("pullback", wc.variant),
        data=data_dir,
    shell:
        CLI["pullback-pair"].shell()


rule pullback_images:
    input:
        DATA_FILES,
        checkpoint="results/zoo/{variant}/seed0.pt",
    output:
        grid=report(
            "results/figures/pullback_grid_{variant}.png",
            caption="../report/pullback_grid.rst",
            category="Excitation pullbacks",
            subcategory="{variant}",
        ),
        pgd=report(
            "results/figures/pullback_pgd_{variant}.png",
            caption="../report/pullback_pgd.rst",
            category="Excitation pullbacks",
            subcategory="{variant}",
        ),
        other_formats=PLAN.other_formats(
            [
                "results/figures/pullback_grid_{variant}.png",
                "results/figures/pullback_pgd_{variant}.png",
            ]
        ),
    log:
        "results/logs/figures/pullback_images_{variant}.log",
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_gpu(NEEDS.heavy),
    params:
        block=as_json(PLAN.pullback_block("images")),
        figures=as_json(config["figures"]),
        seed=config["seed"],
        device=config["device"],
        code=lambda wc: [variant_code_hash("pullback", wc.variant), code_hash("pullback_figures")],
        data=data_dir,
    shell:
        CLI["pullback-images"].shell()


rule pullback_table:
    input:
        symmetry=PLAN.pullback_member_jobs,
        faithfulness=PLAN.pullback_faithfulness_parts,
        agreement=PLAN.pullback_pair_jobs,
        transfer=PLAN.pullback_transfer_parts,
    output:
        symmetry="results/tables/pullback_symmetry.parquet",
        faithfulness="results/tables/pullback_faithfulness.parquet",
        agreement="results/tables/pullback_agreement.parquet",
        transfer="results/tables/pullback_transfer.parquet",
        summary=report(
            "results/tables/pullback_summary.csv",
            caption="../report/pullback_summary.rst",
            category="Excitation pullbacks",
        ),
    log:
        "results/logs/tables/pullback.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        code=code_hash("pullback_table"),
    shell:
        CLI["pullback-table"].shell()


rule pullback_figure:
    input:
        symmetry="results/tables/pullback_symmetry.parquet",
        faithfulness="results/tables/pullback_faithfulness.parquet",
        agreement="results/tables/pullback_agreement.parquet",
        transfer="results/tables/pullback_transfer.parquet",
    output:
        symmetry=report(
            "results/figures/pullback_symmetry.png",
            caption="../report/pullback_symmetry.rst",
            category="Excitation pullbacks",
        ),
        agreement=[
            report(
                png,
                caption="../report/pullback_agreement.rst",
                category="Excitation pullbacks",
            )
            for png in PLAN.pullback_figures
            if png.endswith("pullback_agreement.png")
        ],
        transfer=[
            report(
                png,
                caption="../report/pullback_transfer.rst",
                category="Excitation pullbacks",
            )
            for png in PLAN.pullback_figures
            if png.endswith("pullback_transfer.png")
        ],
        faithfulness=report(
            "results/figures/pullback_faithfulness.png",
            caption="../report/pullback_faithfulness.rst",
            category="Excitation pullbacks",
        ),
        temperature=[
            report(
                png,
                caption="../report/pullback_temperature.rst",
                category="Excitation pullbacks",
            )
            for png in PLAN.pullback_figures
            if png.endswith("pullback_temperature.png")
        ],
        other_formats=PLAN.other_formats(PLAN.pullback_figures),
    log:
        "results/logs/figures/pullback.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        **CLI["pullback-figure"].when_given(
            agreement_figure=lambda wc, output: output.agreement,
            transfer=lambda wc, input, output: output.transfer and input.transfer,
            transfer_figure=lambda wc, output: output.transfer,
            temperature_figure=lambda wc, output: output.temperature,
        ),
        figures=as_json(config["figures"]),
        code=code_hash("pullback_figures"),
    shell:
        CLI["pullback-figure"].shell()


# Hypothesis 1 (early emergence of stable excitation patterns): the gate patterns the settling variants' members recorded while
# they trained (zoo.training.gate_probe_images), read from their checkpoints.
rule pullback_settling:
    input:
        PLAN.settling_checkpoints,
    output:
        table="results/tables/pullback_settling.parquet",
        figure=report(
            "results/figures/pullback_settling.png",
            caption="../report/pullback_settling.rst",
            category="Excitation pullbacks",
        ),
        other_formats=PLAN.other_formats(["results/figures/pullback_settling.png"]),
    log:
        "results/logs/tables/pullback_settling.log",
    conda:
        CONDA_ENV
    resources:
        **on_cpu(),
    params:
        figures=as_json(config["figures"]),
        code=[code_hash("pullback_settling"), code_hash("pullback_table")],
    shell:
        CLI["pullback-settling"].shell()


# The paper's own experiment: a torchvision ImageNet model with local weights on an image folder
# (pullback.external; Imagenette's layout), its raw pullbacks (Figure 2) and PGD grids along the
# gradient and the pullbacks (Figures 1, 3 and 4).
rule pullback_external:
    input:
        weights=lambda wc: config["pullback"]["external"][wc.name]["weights"],
    output:
        table="results/tables/pullback_external_{name}.parquet",
        figure=report(
            "results/figures/pullback_external_{name}.png",
            caption="../report/pullback_external.rst",
            category="Excitation pullbacks",
            subcategory="{name}",
        ),
        perturbed=report(
            "results/figures/pullback_external_{name}_perturbed.png",
            caption="../report/pullback_external.rst",
            category="Excitation pullbacks",
            subcategory="{name}",
        ),
        pullbacks=report(
            "results/figures/pullback_external_{name}_pullbacks.png",
            caption="../report/pullback_external.rst",
            category="Excitation pullbacks",
            subcategory="{name}",
        ),
        other_formats=PLAN.other_formats(
            [
                "results/figures/pullback_external_{name}.png",
                "results/figures/pullback_external_{name}_perturbed.png",
                "results/figures/pullback_external_{name}_pullbacks.png",
            ]
        ),
    log:
        "results/logs/pullback/external/{name}.log",
    wildcard_constraints:
        # the configured names only: "x_perturbed" and "x_pullbacks" are not models' names
        name="|".join(map(re.escape, config["pullback"]["external"])) or "(?!)",
    conda:
        CONDA_ENV
    threads: THREADS
    resources:
        **on_gpu(NEEDS.pullback_external),
    params:
        block=as_json(PLAN.pullback_block("external")),
        entry=lambda wc: as_json(config["pullback"]["external"][wc.name]),
        arch=lambda wc: config["pullback"]["external"][wc.name]["arch"],
        figures=as_json(config["figures"]),
        seed=config["seed"],
        device=config["device"],
        code=[code_hash("pullback"), code_hash("pullback_figures")],
    shell:
        CLI["pullback-external"].shell()
