# intertwine: model zoos and the symmetries of their internal representations.
# Default config: config/config.yaml; paper scale: --configfile config/paper.yaml (which replaces it).
import os

from snakemake.utils import min_version

min_version("9.20")


# A --configfile on the command line replaces the default rather than being merged into it.
if not workflow.overwrite_configfiles:

    configfile: os.path.join(workflow.basedir, "config", "config.yaml")


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"


# Each stage's rules, workflow/rules/<stage>.smk, in the order of the stage registry
# (intertwine.workflow.stages).
for stage in stages.STAGES:

    include: f"workflow/rules/{stage}.smk"


include: "workflow/rules/claims.smk"


onstart:
    check_device()  # device: cuda without a GPU stops a local run before its first job (common.smk)


rule all:
    default_target: True
    input:
        PLAN.all_outputs,
