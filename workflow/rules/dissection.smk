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
        code=code_hash("dissection"),
        data=data_dir,
    shell:
        "intertwine dissect-member --checkpoint {input.checkpoint} --data {params.data} --sites {params.sites:q}"
        " --config {params.block:q} --global-seed {params.seed} --device {params.device}"
        " --threads {threads} --out {output.summary} --units-out {output.units} > {log} 2>&1"


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
        "intertwine dissect-external --name {wildcards.name} --arch {params.arch} --weights {input.weights}"
        " --sites {params.sites:q} --config {params.block:q} --global-seed {params.seed}"
        " --device {params.device} --threads {threads} --out {output.summary} --units-out {output.units}"
        " > {log} 2>&1"


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
        code=code_hash("tables"),
    shell:
        "(intertwine table {input.summaries} --schema dissection --out {output.table}"
        " && intertwine table {input.units} --schema dissection_units --out {output.units}) > {log} 2>&1"
