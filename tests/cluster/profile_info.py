"""Print, as shell assignments, what the test cluster needs from a Snakemake profile.

    python profile_info.py profiles/slurm/config.yaml
    -> DEFAULT_PARTITION=cpu  PARTITIONS='cpu gpu'  GPU_MODELS=''

The partitions named by `slurm_partition` (default-resources first) and the GPU types
named by `gpu_model` or a `gres: gpu:<type>:<n>` string, so tests/cluster/run.sh can
build a cluster on which the profile runs unchanged.
"""

import re
import shlex
import sys

import yaml

NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def as_mapping(value):
    """Resources as a dict, from the profile's mapping or its list of 'key=value'."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    out = {}
    for item in value:
        key, _, val = str(item).partition("=")
        out[key.strip()] = val.strip()
    return out


def rule_resources(value):
    """set-resources as {rule: {resource: value}}, from a mapping or 'rule:res=value' list."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return {rule: as_mapping(res) for rule, res in value.items()}
    out = {}
    for item in value:
        rule, _, rest = str(item).partition(":")
        out.setdefault(rule.strip(), {}).update(as_mapping([rest]))
    return out


def clean(value):
    return str(value).strip().strip("'\"")


def main(path):
    with open(path) as fh:
        profile = yaml.safe_load(fh) or {}
    blocks = [as_mapping(profile.get("default-resources"))]
    blocks += list(rule_resources(profile.get("set-resources")).values())
    partitions, models = [], []
    for res in blocks:
        if res.get("slurm_partition"):
            partitions.append(clean(res["slurm_partition"]))
        if res.get("gpu_model"):
            models.append(clean(res["gpu_model"]))
        gres = clean(res.get("gres") or "")
        for part in gres.split(","):
            fields = part.strip().split(":")
            if fields[0] == "gpu" and len(fields) == 3:
                models.append(fields[1])
    default = clean(as_mapping(profile.get("default-resources")).get("slurm_partition") or "debug")
    partitions = list(dict.fromkeys([default] + partitions))
    models = list(dict.fromkeys(models))
    for name in partitions + models:
        if not NAME.match(name):
            sys.exit(f"{path}: unusable partition or GPU type name {name!r}")
    print(f"DEFAULT_PARTITION={shlex.quote(default)}")
    print(f"PARTITIONS={shlex.quote(' '.join(partitions))}")
    print(f"GPU_MODELS={shlex.quote(' '.join(models))}")


if __name__ == "__main__":
    main(sys.argv[1])
