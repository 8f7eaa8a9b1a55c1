"""One definition per setting: the schema holds every default; the settings dataclasses take
theirs from it, read every key a job is given, and refuse keys they do not know."""

from __future__ import annotations

import dataclasses

import pytest

from intertwine.workflow import settings
from intertwine.workflow.stages.deqntk.settings import DeqntkConfig
from intertwine.workflow.stages.dissection.settings import DissectionConfig
from intertwine.workflow.stages.pullback.settings import PullbackConfig
from intertwine.workflow.stages.rotation.settings import RotationConfig
from intertwine.workflow.stages.similarity.settings import SimilarityConfig, SimilarityZooConfig
from intertwine.workflow.settings import StitchConfig, TrainConfig, expand_methods, method_kind, schema_block
from intertwine.workflow.stages.symmetry.settings import SymmetryConfig

SETTINGS = [
    TrainConfig,
    StitchConfig,
    RotationConfig,
    SymmetryConfig,
    SimilarityConfig,
    SimilarityZooConfig,
    DissectionConfig,
    DeqntkConfig,
    PullbackConfig,
]

# The keys of each block that pick jobs (the plan reads them) rather than configure one.
FAN_OUT = {
    "zoo.training": {"threads"},
    "stitching": {
        "variants",
        "pairs",
        "pairs_per_variant",
        "pairs_per_method",
        "sites",
        "methods",
        "methods_per_variant",
        "ranks",
        "l1_lambdas",
        "settings_per_method",
    },
    "rotation": {"variants", "seeds", "sites", "trials"},
    "symmetry": {"seeds"},
    # zoo is a sub-block (below)
    "similarity": {"variants", "procrustes_pairs", "cka_pairs", "pairs_per_variant", "zoo"},
    "similarity.zoo": {"variants", "members", "sites"},
    "dissection": {"variants", "seeds", "sites", "external"},
    # depth, reference and conv are sub-blocks (below)
    "deqntk": {"n_train", "settings", "block_rows", "depth", "reference", "conv"},
    "deqntk.depth": {"draws"},
    "deqntk.conv": set(),  # its one job reads n_train (0: the plan runs none)
    "deqntk.reference": {"variants", "seeds"},
    "pullback": {"variants", "seeds", "pairs", "sites", "unit_sites", "external"},
}


@pytest.mark.parametrize("cls", SETTINGS, ids=lambda cls: cls.__name__)
def test_defaults_are_the_schemas(cls):
    instance = cls()
    for field in dataclasses.fields(cls):
        block, name = field.metadata["key"].rsplit(".", 1)
        assert getattr(instance, field.name) == settings.default(schema_block(block)["properties"][name]), (
            field.name
        )


@pytest.mark.parametrize("block", FAN_OUT)
def test_every_schema_key_is_a_setting_or_picks_jobs(block):
    """A key added to the schema must be read by a job (a settings field) or by the plan."""
    read = {
        f.metadata["key"].rsplit(".", 1)[1]
        for cls in SETTINGS
        for f in dataclasses.fields(cls)
        if f.metadata["key"].rsplit(".", 1)[0] == block
    }
    keys = set(schema_block(block)["properties"])
    assert read & FAN_OUT[block] == set()
    assert keys == read | FAN_OUT[block]


def test_from_block_refuses_unknown_keys():
    assert StitchConfig.from_block({"lr": 0.1}).lr == 0.1
    with pytest.raises(
        ValueError, match=r"config key stitching\.learning_rate: not a setting of StitchConfig"
    ):
        StitchConfig.from_block({"learning_rate": 0.1}, "stitching")
    with pytest.raises(ValueError, match="device"):
        TrainConfig.from_block({"device": "cpu"})


def test_job_block_reads_each_field_from_its_key():
    stitching = {name: f"s.{name}" for name in schema_block("stitching")["properties"]}
    training = {name: f"t.{name}" for name in schema_block("zoo.training")["properties"]}
    grelu = StitchConfig.job_block({"stitching": stitching, "zoo.training": training}, "grelu")
    assert grelu["lr"] == "s.lr" and grelu["translate"] == "t.translate" and grelu["alpha"] == "s.alpha"
    assert "alpha_grid" not in grelu and "softsort_tau" not in grelu
    full = StitchConfig.job_block({"stitching": stitching, "zoo.training": training}, "full")
    assert set(grelu) - set(full) == {
        "alpha",
        "scales_frozen_fraction",
        "sinkhorn_iters",
        "permutation_step",
        "permutation_update",
        "grelu_start",
    }
    # A job block of a validated config is exactly what from_block takes back.
    defaults = {
        "stitching": {k: settings.default(v) for k, v in schema_block("stitching")["properties"].items()},
        "zoo.training": {
            k: settings.default(v) for k, v in schema_block("zoo.training")["properties"].items()
        },
    }
    block = StitchConfig.job_block(defaults, "softsort")
    assert StitchConfig.from_block(block) == StitchConfig(**block) == StitchConfig()


def test_settings_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        TrainConfig().lr = 1.0


def test_method_names():
    assert expand_methods(["full", "rank", "l1", "grelu"], [1, 4], [0.01]) == [
        "full",
        "rank1",
        "rank4",
        "l1_0.01",
        "grelu",
    ]
    assert [method_kind(m) for m in ("rank4", "l1_0.01", "grelu_cv")] == ["rank", "l1", "grelu_cv"]
    with pytest.raises(ValueError, match="unknown stitching method 'rank0'"):
        method_kind("rank0")


def test_settings_module_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, intertwine.workflow.settings; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_affects_results_false_fields_are_in_run_block_not_job_block():
    training = {name: f"t.{name}" for name in schema_block("zoo.training")["properties"]}
    assert "eval_batch_size" not in TrainConfig.job_block({"zoo.training": training})
    assert TrainConfig.run_block({"zoo.training": training}) == {
        "eval_batch_size": "t.eval_batch_size",
        "cuda_graphs": "t.cuda_graphs",
        "compile": "t.compile",
        "pack_mode": "t.pack_mode",
    }
    together = TrainConfig.job_block({"zoo.training": training}) | TrainConfig.run_block(
        {"zoo.training": training}
    )
    assert set(together) == set(TrainConfig.names())
    quiet = [
        f.metadata["key"]
        for cls in SETTINGS
        for f in dataclasses.fields(cls)
        if f.metadata.get("affects_results") is False
    ]
    # stitching's eval_batch_size changes the batch-norm refresh; a CUDA graph replays the eager step's
    # kernels; a compiled step, or a pack on streams, is the same arithmetic in other kernels
    assert sorted(quiet) == [
        "zoo.training.compile",
        "zoo.training.cuda_graphs",
        "zoo.training.eval_batch_size",
        "zoo.training.pack_mode",
    ]


def test_from_block_fills_defaults_and_checks_each_value_against_the_schema():
    settings_ = DissectionConfig.from_block({"probe": {"images": 16, "shapes": {"clutter": 0}}}, "dissection")
    assert settings_.probe == {"source": "shapes", "images": 16, "broden": None, "shapes": {"clutter": 0}}
    assert settings_.alphas == DissectionConfig().alphas
    for block, message in [
        ({"epochs": "two"}, r"config key stitching\.epochs: 'two' is not of type 'integer'"),
        ({"epochs": 0}, r"config key stitching\.epochs: 0 is less than the minimum of 1"),
        (
            {"optimizer": "rmsprop"},
            r"config key stitching\.optimizer: 'rmsprop' is not one of \['sgd', 'adam'\]",
        ),
    ]:
        with pytest.raises(ValueError, match=message):
            StitchConfig.from_block(block, "stitching")
    with pytest.raises(ValueError, match=r"config key dissection\.probe\.source: 'web' is not one of"):
        DissectionConfig.from_block({"probe": {"source": "web"}}, "dissection")
    with pytest.raises(ValueError, match=r"config block similarity: expected a mapping"):
        SimilarityConfig.from_block(["grelu_cka"], "similarity")


def test_deqntk_job_blocks_hold_what_each_kind_reads():
    sources = {
        "deqntk": settings.default(schema_block("deqntk")),
        "deqntk.depth": settings.default(schema_block("deqntk.depth")),
        "deqntk.reference": settings.default(schema_block("deqntk.reference")),
    }
    assert DeqntkConfig.job_block(sources, "gram") == {"n_test": 1000, "tol": 1e-10, "preprocessing": "raw"}
    assert DeqntkConfig.job_block(sources, "regression") == {
        "n_test": 1000,
        "ridge": 0,
        "preprocessing": "raw",
    }
    depth = DeqntkConfig.job_block(sources, "depth")
    assert depth["finite_variances"] == [[1.0, 0.0, 0.0]] and "n_test" not in depth
    assert depth["panels"] == [] and depth["deq_sigma_b2"] == 0.1 and depth["frozen_ridge"] == 1.0
    assert set(DeqntkConfig.job_block(sources, "reference")) == {
        "tol",
        "preprocessing",
        "reference_samples",
        "reference_measures",
        "reference_variances",
    }
    with pytest.raises(ValueError, match=r"config key deqntk\.depths\.0: 0 is less than the minimum of 1"):
        DeqntkConfig.from_block({"depths": [0]}, "deqntk")


def test_each_stage_keeps_its_config_block_and_settings_in_its_folder():
    """Issue 35: a stage's block of the schema is ``schema.yaml`` in its folder and its settings
    dataclass ``settings.py``; ``schema()`` is the core file with every stage's block, in the
    report's order, and the core file holds no stage's block."""
    import yaml

    from intertwine.workflow import stages

    core = yaml.safe_load(settings.CORE_SCHEMA_PATH.read_text())
    whole = settings.schema()
    assert not set(core["properties"]) & set(stages.STAGES)
    assert list(whole["properties"]) == [
        "seed",
        "device",
        "pairs_share_members",
        "data",
        *stages.STAGES,
        "figures",
        "cluster",
        "replaces_default",
    ]
    for stage in stages.STAGES:
        assert whole["properties"][stage] == yaml.safe_load(settings.stage_schema_path(stage).read_text())
    for stage in ("rotation", "dissection", "deqntk"):
        module = stages.part(stage, "settings")
        config = getattr(module, f"{stage.capitalize()}Config")
        assert config.__module__ == module.__name__
        assert not hasattr(settings, config.__name__)  # one home: the stage's folder


@pytest.mark.parametrize("name", ["config/config.yaml", "config/paper.yaml", "tests/configs/tiny.yaml"])
def test_validation_fills_the_defaults_as_snakemakes_validate(name, tmp_path):
    """``validate_config`` (the joined schema) against an independent reference: Snakemake's
    ``validate(..., set_default=True)`` on the same schema written to one file."""
    import copy
    from pathlib import Path

    import yaml
    from snakemake.utils import validate

    from intertwine.workflow.config import load_config

    root = Path(__file__).resolve().parents[1]
    config = load_config([root / name])
    reference = copy.deepcopy(config)
    schema_file = tmp_path / "schema.yaml"  # the joined schema as one file
    schema_file.write_text(yaml.safe_dump(settings.schema(), sort_keys=False))
    validate(reference, str(schema_file), set_default=True)
    settings.validate_config(config)
    assert config == reference and config["rotation"]["epochs"] == reference["rotation"]["epochs"]
    config["zoo"]["training"]["lr_milestones"].append(99)  # a filled default is the config's own
    assert 99 not in settings.schema_block("zoo.training")["properties"]["lr_milestones"]["default"]


def test_validation_names_the_value_that_does_not_fit():
    import jsonschema

    with pytest.raises(jsonschema.ValidationError, match="-1 is less than the minimum of 1"):
        settings.validate_config({"rotation": {"epochs": -1}})


def test_a_key_written_twice_is_refused_naming_the_file_the_key_and_its_lines(tmp_path):
    """YAML keeps the last of two equal keys: a second ``symmetry:`` block dropped ``monomial``
    from ``groups`` without a word."""
    from intertwine.workflow.config import load_config

    twice = tmp_path / "twice.yaml"
    twice.write_text("symmetry:\n  groups: [monomial]\nzoo:\n  seeds: 2\nsymmetry:\n  seeds: 1\n")
    with pytest.raises(
        ValueError, match=rf"{twice}: key symmetry is written twice, on lines 1 and 5; .* merge"
    ):
        load_config([twice])
    nested = tmp_path / "nested.yaml"
    nested.write_text("zoo:\n  training:\n    lr: 0.1\n    epochs: 2\n    lr: 0.5\n")
    with pytest.raises(ValueError, match=r"key zoo.training.lr is written twice, on lines 3 and 5"):
        load_config([nested])
    listed = tmp_path / "listed.yaml"
    listed.write_text("pullback:\n  models:\n    - {name: a, name: b}\n")
    with pytest.raises(ValueError, match=r"key pullback.models.0.name is written twice, on lines 3 and 3"):
        load_config([listed])
    once = tmp_path / "once.yaml"  # the same key in two blocks, or in two files, is no repetition
    once.write_text("zoo:\n  seeds: 2\nsymmetry:\n  seeds: 1\n")
    assert load_config([once, once])["symmetry"] == {"seeds": 1}


def test_a_yte_template_is_refused(tmp_path):
    from intertwine.workflow.config import load_config

    template = tmp_path / "template.yaml"
    template.write_text("__use_yte__: true\nzoo:\n  seeds: ?1 + 1\n")
    with pytest.raises(ValueError, match=rf"{template}: key __use_yte__: .*YTE template.* Delete the key"):
        load_config([template])


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_number_that_is_not_finite_is_refused_naming_the_key(value):
    """NaN passes every minimum and maximum: ``lr: .nan`` passed the check and failed late in torch."""
    from intertwine.workflow.config import check_config

    errors = check_config({"zoo": {"training": {"lr": value}}})
    assert errors == [f"config key zoo.training.lr: {value} is not a finite number; write a number"]
    assert check_config({"zoo": {"training": {"lr": 0.05}}}) == []


def tiny_config(change):
    from pathlib import Path

    from intertwine.workflow.config import load_config

    config = load_config([Path(__file__).parent / "configs" / "tiny.yaml"])
    change(config)
    return config


def test_sizes_are_bounded_before_anything_is_allocated():
    """``zoo.seeds: 1000000000`` passed the check and a dry run died of MemoryError after 3.1 GB;
    ``width_multiplier: 1000`` ended in an allocator's traceback, as the check built the model
    with its weights: it is built on the meta device now, its parameters counted from shapes."""
    from intertwine.workflow.config import check_config

    errors = check_config(tiny_config(lambda c: c["zoo"].update(seeds=10**9)))
    assert errors == [
        "config key zoo.seeds: 1000000000 is greater than the maximum of 1000; lower it (the limit and "
        "its reason are in the key's description, docs/config-reference.md)"
    ]
    errors = check_config(tiny_config(lambda c: c["zoo"]["seeds_per_variant"].update(myrtle=10**9)))
    assert errors[0].startswith("config key zoo.seeds_per_variant.myrtle: 1000000000 is greater than")
    wide = check_config(tiny_config(lambda c: c["zoo"]["variants"]["myrtle"].update(width_multiplier=1000)))
    assert wide == [
        "config key zoo.variants.myrtle: 1.55e+12 parameters, more than the 1e+09 a zoo model may have "
        "(4 bytes each, 4 times over in training); lower its width_multiplier (or constant_width, depth)"
    ]
    assert check_config(tiny_config(lambda c: c["zoo"].update(seeds=1000))) == []  # the bound itself runs


def test_the_config_checks_model_is_the_real_ones_shapes():
    """Sites and parameter counts from the meta-device model equal those of a model with weights."""
    from intertwine import models
    from intertwine.workflow.plan import as_json
    from intertwine.workflow.planning import spec_cut_sites, spec_parameters, spec_sites

    for spec in tiny_config(lambda c: None)["zoo"]["variants"].values():
        model = models.build(spec)
        assert spec_parameters(as_json(spec)) == models.count_parameters(model)
        assert list(spec_sites(as_json(spec))) == models.sites(model)
        assert list(spec_cut_sites(as_json(spec))) == models.cut_sites(model)


def test_a_validation_split_larger_than_the_training_set_is_named_as_such():
    """It was reported under pullback.probe_images, with a training split of -80 images."""
    from intertwine.workflow.config import check_config

    errors = check_config(tiny_config(lambda c: c["data"].update(val_size=400)))
    assert errors == [
        "config key data.val_size: 400 validation images are held out of the 320 training images of "
        "shapes, leaving 0 to train on; set data.val_size to at most 319 (or raise data.shapes.train_size)"
    ]
    assert check_config(tiny_config(lambda c: c["data"].update(val_size=304))) == []  # 16 to probe


def test_a_shapes_data_set_too_large_to_hold_is_named_before_it_is_generated():
    from intertwine.workflow.config import check_config

    errors = check_config(tiny_config(lambda c: c["data"]["shapes"].update(train_size=10**9)))
    assert errors == [
        "config key data.shapes: 1000000000 + 128 images of 16 x 16 pixels are 715 GiB, more than the "
        "16 GiB the data set may take; lower data.shapes.train_size, test_size or image_size"
    ]


def test_run_config_merges_the_files_onto_the_default_mappings_by_key_lists_replaced(tmp_path):
    """What `--configfile` files give a run (the Snakefile's `configfile:` and Snakemake's merge):
    the default with each file on top in order, a mapping merged key by key, a list replaced whole;
    or, when the files' merge says ``replaces_default: true``, the files alone."""
    from intertwine.workflow.config import run_config

    default = tmp_path / "default.yaml"
    default.write_text(
        "zoo:\n  seeds: 3\n  training: {epochs: 4, lr: 0.002}\nsymmetry:\n  groups: [grelu, monomial]\n"
    )
    first = tmp_path / "first.yaml"
    first.write_text("zoo:\n  training: {epochs: 2}\nsymmetry:\n  groups: [orthogonal]\n")
    second = tmp_path / "second.yaml"
    second.write_text("zoo:\n  training: {lr: 0.01}\n")
    assert run_config([first, second], default) == {
        "zoo": {"seeds": 3, "training": {"epochs": 2, "lr": 0.01}},
        "symmetry": {"groups": ["orthogonal"]},
    }
    whole = tmp_path / "whole.yaml"
    whole.write_text("replaces_default: true\nzoo:\n  seeds: 2\n")
    assert run_config([whole, first], default) == {
        "replaces_default": True,
        "zoo": {"seeds": 2, "training": {"epochs": 2}},
        "symmetry": {"groups": ["orthogonal"]},
    }
    with pytest.raises(ValueError, match=rf"{tmp_path / 'missing.yaml'}: the default config is not there"):
        run_config([first], tmp_path / "missing.yaml")


def test_the_shipped_whole_configs_replace_the_default():
    """config/config.yaml's variants merged into paper.yaml's would add zoos the paper never
    trained: every shipped config but the default says it is whole."""
    from pathlib import Path

    from intertwine.workflow.config import load_config, replaces_default

    root = Path(__file__).resolve().parents[1]
    whole = sorted(p.name for p in (root / "config").glob("*.yaml") if replaces_default(load_config([p])))
    assert whole == sorted(p.name for p in (root / "config").glob("*.yaml") if p.name != "config.yaml")
    assert replaces_default(load_config([root / "tests" / "configs" / "tiny.yaml"]))
