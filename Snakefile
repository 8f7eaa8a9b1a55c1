# intertwine: model zoos and the symmetries of their internal representations.
# Default config: config/config.yaml (set by profiles/default); paper scale: --configfile config/paper.yaml.
from snakemake.utils import min_version

min_version("9.20")


if not config:
    configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/zoo.smk"
include: "workflow/rules/figures.smk"


rule all:
    input:
        ZOO_TABLES,
        ZOO_FIGURES,
    default_target: True
