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
include: "workflow/rules/zoo.smk"
include: "workflow/rules/symmetry.smk"
include: "workflow/rules/rotation.smk"
include: "workflow/rules/stitching.smk"
include: "workflow/rules/similarity.smk"
include: "workflow/rules/connectivity.smk"
include: "workflow/rules/dissection.smk"
include: "workflow/rules/gated.smk"
include: "workflow/rules/deqntk.smk"
include: "workflow/rules/pullback.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/claims.smk"


onstart:
    check_device()  # device: cuda without a GPU stops a local run before its first job (common.smk)


rule all:
    default_target: True
    input:
        PLAN.all_outputs,
