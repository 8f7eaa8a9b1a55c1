"""The job plan: which jobs and outputs a config gives, what each job is given, and the config
cross-checks, without Snakemake (milliseconds each; the workflow tests run the same plan)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml


from intertwine.workflow.plan import Plan, draw_pairs
from intertwine.workflow.planning import spec_sites
from intertwine.workflow.stages.deqntk.plan import gram_layout
from intertwine.workflow.stages.similarity.settings import SimilarityConfig
from intertwine.workflow.settings import validate_config

REPO = Path(__file__).resolve().parents[1]


def load(path: str | Path, change=None) -> dict:
    config = yaml.safe_load((REPO / path).read_text())
    if change is not None:
        change(config)
    validate_config(config)
    return config


@pytest.fixture(scope="module")
def tiny() -> dict:
    return load("tests/configs/tiny.yaml")


def test_shipped_configs_plan_without_errors():
    for path in (
        "config/config.yaml",
        "config/paper.yaml",
        "config/cifar10_cpu.yaml",
        "config/deqntk_mnist.yaml",
        "tests/configs/tiny.yaml",
    ):
        assert Plan(load(path)).errors() == [], path


def test_mnist_config_is_the_papers_deqntk_run():
    """config/deqntk_mnist.yaml: the paper's MNIST number (98.6 % at (.25, .25, .5)) is compared
    with the regression on all 60,000 training and 10,000 test images."""
    from intertwine.workflow.paper import reported_deqntk

    config = load("config/deqntk_mnist.yaml")
    plan = Plan(config)
    assert plan.dataset_sizes() == (60_000, 10_000) and plan.deqntk_train_rows == 60_000
    assert plan.deqntk_regression_jobs[-1] == "results/deqntk/accuracy/w0.25_u0.25_b0.5/n60000.parquet"
    assert reported_deqntk("mnist", (0.25, 0.25, 0.5), 60_000, config["deqntk"]["n_test"]) == 98.6
    assert plan.deqntk_depth_jobs == [] and plan.kernel_reference_jobs == []


def test_paper_plan_counts():
    plan = Plan(load("config/paper.yaml"))
    assert len(plan.stitch_jobs) == 816 - 2 * (16 - 5)  # the CCT: 5 pairs of its 10 members (full, grelu)
    assert len(set(plan.stitch_jobs)) == len(plan.stitch_jobs)
    assert set(plan.leaky_slopes.values()) == {0.0, 0.0001, 0.001, 0.01, 0.1, 0.5, 0.9, 1.0}


def test_tiny_plan_jobs(tiny):
    plan = Plan(tiny)
    assert list(plan.zoo_seeds("convnext")) == [0] and list(plan.zoo_seeds("myrtle")) == [0, 1, 2]
    assert plan.stitch_methods("myrtle") == ["full", "rank2", "grelu", "grelu_cv", "softsort", "l1_0.01"]
    assert plan.stitch_methods("resnet20") == ["full", "rank2", "grelu"]
    assert "results/stitching/myrtle/pair0/l1_0.01.parquet" in plan.stitch_jobs
    assert len(plan.stitch_jobs) == 6 + 3 + 1 + 2 + 2  # c4gap_dgn: grelu and monomial
    assert plan.rotation_trials == [
        f"results/rotation/myrtle/seed0/act2/{g}/trial0.parquet" for g in ("grelu", "orthogonal")
    ]
    # The symmetry check runs on the architectures whose weight action it knows.
    gated = ["c4gap", "c4gap_dgn", "c4gap_dlgn_reversed", "c4gap_dgn_fl"]
    assert plan.symmetry_checks == [
        "results/symmetry/myrtle/seed0.parquet",
        "results/symmetry/resnet20/seed0.parquet",
        "results/symmetry/myrtle_leaky/seed0.parquet",
    ] + [f"results/symmetry/{v}/seed0.parquet" for v in gated]
    assert plan.similarity_jobs == [
        "results/similarity/myrtle/pair0.parquet",
        "results/similarity/myrtle/pair1.parquet",
        "results/similarity/c4gap_dgn/pair0.parquet",
        "results/similarity/c4gap_dgn/pair1.parquet",
    ]
    assert plan.npk_jobs == [f"results/gated/{v}/seed0.parquet" for v in gated]
    assert plan.features_checkpoint("c4gap_dgn_fl", 1) == ["results/zoo/c4gap/seed1.pt"]
    assert plan.features_checkpoint("c4gap_dgn", 1) == []
    assert plan.gated_permuted and "results/figures/gated_permutations.png" in plan.all_outputs
    assert plan.cut_site_names("c4gap_dgn") == [f"value.act{i}" for i in range(1, 5)]
    assert plan.similarity_measures(0) == {"procrustes": True, "cka": True}
    assert plan.similarity_measures(1) == {"procrustes": True, "cka": False}
    assert plan.leaky_slopes == {"myrtle": 0.0, "myrtle_leaky": 0.5}
    assert plan.transformers == ["cct"]
    assert set(plan.study_figures) == {"leaky_relu", "alpha_cv", "l1", "softsort", "transformer"}
    assert plan.dissection_jobs == [
        "results/dissection/resnet20/seed0.parquet",
        "results/dissection/convnext/seed0.parquet",
    ]
    assert plan.category_sites == {v: plan.mask_site(v) for v in ("resnet20", "convnext")}
    # tiny.yaml draws png only: no other formats.
    assert all(path.endswith((".png", ".csv", ".parquet")) for path in plan.stage_outputs)


def test_figure_formats_follow_the_config(tiny):
    plan = Plan(copy.deepcopy(tiny) | {"figures": {"formats": ["png", "pdf", "svg"], "dpi": 60}})
    assert "results/figures/rotation_penalty.svg" in plan.rotation_outputs
    assert "results/figures/stitching_softsort.pdf" in plan.stitching_outputs


def test_stages_off_have_no_outputs(tiny):
    config = copy.deepcopy(tiny)
    for stage in ("rotation", "stitching", "similarity", "connectivity", "dissection", "gated", "pullback"):
        config[stage]["variants"] = {} if stage == "rotation" else []
    config["stitching"].update(sites={}, methods_per_variant={})
    config["symmetry"]["seeds"] = 0  # gated.ensembles stays: with the study off it asks for nothing
    config["deqntk"]["n_train"] = []
    config["deqntk"]["depth"]["draws"] = 0
    config["deqntk"]["reference"]["variants"] = []
    config["similarity"]["zoo"].update(variants=[], sites={})  # the zoo view has its own
    plan = Plan(config)
    assert plan.errors() == []
    assert plan.all_outputs == [
        "results/tables/zoo.parquet",
        "results/tables/zoo_epochs.parquet",
        "results/figures/zoo_accuracy.png",
        "results/tables/zoo_summary.csv",
        "results/tables/claims.csv",  # every claim but those on the zoo alone reads `not run`
        "results/tables/claims.rst",
    ]
    assert plan.claims_tables == {"zoo": "results/tables/zoo.parquet"}
    # C2 is about the ReLU Myrtle: not its LeakyReLU or gated forms.
    assert Plan(tiny).claims_settings["myrtle_variants"] == ["myrtle"]


def test_stitch_block_holds_what_the_method_reads(tiny):
    plan = Plan(tiny)
    full, grelu, cv, l1 = (plan.stitch_block(m) for m in ("full", "grelu", "grelu_cv", "l1_0.01"))
    assert "alpha" not in full and grelu["alpha"] == 0.1 and "alpha_grid" not in grelu
    assert cv["alpha_grid"] == [0.1, 1.0] and cv["cv_epochs"] == 1 and "alpha" not in cv
    assert l1["epochs"] == 2 and full["epochs"] == 1  # settings_per_method: {l1: {epochs: 2}}
    # The zoo's augmentation, and nothing that only picks jobs.
    assert full["translate"] == 2 and full["flip"] is True
    assert not {"variants", "pairs", "methods", "ranks", "settings_per_method"} & set(full)


def test_training_blocks(tiny):
    config = copy.deepcopy(tiny)
    config["zoo"]["training_per_variant"] = {"resnet20": {"lr": 0.004}}
    plan = Plan(config)
    assert plan.train_block("resnet20")["lr"] == 0.004 and plan.train_block("myrtle")["lr"] == 0.001
    assert plan.train_block()["lr"] == 0.001  # rotation fine-tunes with zoo.training as written
    assert "threads" not in plan.train_block("myrtle")  # the rule's threads, not a training setting


def test_rotation_similarity_dissection_blocks(tiny):
    plan = Plan(tiny)
    assert set(plan.rotation_block) == {"epochs", "lr", "train_images", "lognormal_sigma"}
    assert set(plan.similarity_block) == {
        "procrustes_measures",
        "cka_measures",
        "samples",
        "intervals",
        "jackknife_groups",
        "batch_size",
        "npk_images",
    }
    assert plan.similarity_block["npk_images"] == tiny["gated"]["probe_images"] and plan.gated_block == {
        "probe_images": 8,
        "value_ntk_draws": tiny["gated"]["value_ntk_draws"],
    }
    assert "seeds" not in plan.symmetry_block and plan.symmetry_block["images"] == 16
    block = plan.dissection_block()
    assert "masks" not in block and plan.dissection_block("masks")["masks"]["units"] == 2
    assert block["probe"]["images"] == 64 and block["probe"]["shapes"]["clutter"] == 3
    assert "train_size" not in block["probe"]["shapes"]


def test_the_jackknife_groups_are_a_setting_of_the_jobs_only_with_intervals(tiny):
    """similarity.jackknife_groups is read only with similarity.intervals: without, it is not in
    the jobs' params, so changing it reruns nothing (and the job takes the schema's default)."""
    config = copy.deepcopy(tiny)
    config["similarity"]["intervals"] = False
    off = Plan(config).similarity_block
    assert "jackknife_groups" not in off and off["intervals"] is False
    config["similarity"]["jackknife_groups"] += 7
    assert Plan(config).similarity_block == off
    assert SimilarityConfig.from_block(off).jackknife_groups == SimilarityConfig().jackknife_groups
    config["similarity"]["intervals"] = True
    assert Plan(config).similarity_block["jackknife_groups"] == config["similarity"]["jackknife_groups"]


def test_pairs_are_deterministic_and_distinct():
    """With pairs_share_members (the paper's draw, with replacement); member-disjoint pairs, the
    default: tests/test_claims.py."""
    pairs = draw_pairs(6, 20, 0, "stitching", "myrtle", share_members=True)
    assert pairs == draw_pairs(6, 20, 0, "stitching", "myrtle", share_members=True)
    assert pairs != draw_pairs(6, 20, 0, "stitching", "resnet20", share_members=True)
    assert all(a != b and 0 <= a < 6 and 0 <= b < 6 for a, b in pairs)
    assert len(set(pairs)) == 20
    # Every ordered pair of 4 members, or every unordered one for a symmetric measure.
    assert len(set(draw_pairs(4, 12, 0, "s", "v", share_members=True))) == 12
    unordered = draw_pairs(4, 6, 0, "s", "v", symmetric=True, share_members=True)
    assert len({frozenset(pair) for pair in unordered}) == 6
    with pytest.raises(ValueError, match="at least 2 zoo members"):
        draw_pairs(1, 3, 0)
    with pytest.raises(ValueError, match="3 members form only 3 distinct unordered pairs"):
        draw_pairs(3, 4, 0, symmetric=True, share_members=True)
    # The first k pairs of a draw are the same whatever the count: stages that take a prefix of
    # another's draw (pullbacks of the similarity stage's) compare the same pairs.
    assert draw_pairs(10, 2, 0, "s", "v") == draw_pairs(10, 5, 0, "s", "v")[:2]


def test_models_are_built_once_per_spec(tiny):
    spec_sites.cache_clear()
    plan = Plan(tiny)
    plan.errors()
    plan.all_outputs
    for variant in plan.variants:
        plan.site_names(variant)
    assert spec_sites.cache_info().misses <= len(plan.variants)


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda c: c["zoo"].update(seeds=1),
            "config key stitching.variants: stitching pairs need at least 2",
        ),
        (
            lambda c: c["stitching"].update(variants=["resnet18"]),
            "config key stitching.variants: ['resnet18'] must be among",
        ),
        (
            lambda c: c["stitching"].update(sites={"myrtle": ["act9"]}),
            "config key stitching.sites.myrtle: ['act9'] must be among",
        ),
        (
            lambda c: c["dissection"].update(sites={"resnet20": ["layer9.act"]}),
            "config key dissection.sites.resnet20: ['layer9.act'] must be among",
        ),
        (
            lambda c: c["dissection"].update(seeds=3),
            "config key dissection.seeds: 3 seeds of 'resnet20' asked for",
        ),
        (lambda c: c["rotation"].update(seeds=4), "config key rotation.seeds: 4 seeds of 'myrtle' asked for"),
        (lambda c: c["rotation"].update(sites=["act9"]), "config key rotation.sites: ['act9'] must be among"),
        (
            lambda c: c["zoo"].update(training_per_variant={"convnext": {"learning_rate": 0.1}}),
            "config key zoo.training_per_variant.convnext: ['learning_rate'] must be among",
        ),
        (
            lambda c: c["zoo"].update(training_per_variant={"vgg": {"lr": 0.1}}),
            "config key zoo.training_per_variant: ['vgg'] must be among",
        ),
        (
            lambda c: c["zoo"].update(seeds_per_variant={"vgg": 2}),
            "config key zoo.seeds_per_variant: ['vgg'] must be among",
        ),
        (
            lambda c: c["dissection"].update(external={"r50": {"arch": "resnet50", "weights": "r50.pth"}}),
            "set dissection.probe.broden to your Broden directory",
        ),
        (
            lambda c: c["stitching"].update(methods_per_variant={"vgg": ["grelu"]}),
            "config key stitching.methods_per_variant: ['vgg'] must be among",
        ),
        (
            lambda c: c["stitching"].update(pairs_per_variant={"vgg": 2}),
            "config key stitching.pairs_per_variant: ['vgg']",
        ),
        (
            lambda c: c["stitching"].update(settings_per_method={"l1": {"epoch": 3}}),
            "config key stitching.settings_per_method.l1: ['epoch'] must be among",
        ),
        (
            lambda c: c["stitching"].update(settings_per_method={"l1": {"translate": 0}}),
            "config key stitching.settings_per_method.l1: ['translate'] must be among",
        ),
        (
            lambda c: c["similarity"].update(variants=["convnext"]),
            "config key similarity.variants: similarity pairs",
        ),
        (
            lambda c: c["zoo"].update(training_per_variant={"convnext": {"epochs": "3"}}),
            "config key zoo.training_per_variant.convnext.epochs: '3' is not of type 'integer'",
        ),
        (
            lambda c: c["zoo"].update(training_per_variant={"convnext": {"epochs": -4}}),
            "config key zoo.training_per_variant.convnext.epochs: -4 is less than the minimum of 1",
        ),
        (
            lambda c: c["stitching"].update(settings_per_method={"l1": {"epochs": 0}}),
            "config key stitching.settings_per_method.l1.epochs: 0 is less than the minimum of 1",
        ),
        (
            lambda c: c["stitching"].update(settings_per_method={"grelu": {"optimizer": "lbfgs"}}),
            "config key stitching.settings_per_method.grelu.optimizer: 'lbfgs' is not one of",
        ),
        (
            lambda c: c["similarity"].update(procrustes_pairs=4),
            "config key similarity.procrustes_pairs: 4 pairs of 'myrtle' asked for, but its 3 zoo members form only 3",
        ),
        (
            lambda c: c["stitching"].update(pairs_per_variant={"resnet20": 3}),
            "config key stitching.pairs: 3 pairs of 'resnet20' asked for, but its 2 zoo members form only 2",
        ),
        (
            lambda c: c["dissection"].update(variants=["cct"]),
            "config key dissection.variants: 'cct' is a transformer",
        ),
        (
            lambda c: c["zoo"]["variants"].update(bad={"arch": "resnet20", "constant_width": 8}),
            "config key zoo.variants.bad: unknown model option 'constant_width'",
        ),
    ],
)
def test_config_errors_name_the_key(change, message):
    errors = Plan(load("tests/configs/tiny.yaml", change)).errors()
    assert any(message in error for error in errors), errors


def test_settings_that_cannot_change_a_result_are_not_params(tiny):
    """zoo.training.eval_batch_size (and cuda_graphs, compile) go to the jobs beside the params (a rule's
    resources), so that changing them reruns nothing; the per-variant overrides apply to them too."""
    config = copy.deepcopy(tiny)
    config["zoo"]["training"]["eval_batch_size"] = 123
    config["zoo"]["training_per_variant"] = {"resnet20": {"eval_batch_size": 77}}
    plan = Plan(config)
    assert "eval_batch_size" not in plan.train_block("myrtle") and "eval_batch_size" not in plan.train_block()
    graphs = {"cuda_graphs": True, "compile": "none", "pack_mode": "wide"}
    assert plan.train_run("myrtle") == {"eval_batch_size": 123} | graphs
    assert plan.train_run("resnet20") == {"eval_batch_size": 77} | graphs
    assert plan.train_run() == {"eval_batch_size": 123} | graphs
    assert plan.train_block("resnet20") == Plan(tiny).train_block("resnet20")
    # stitching.eval_batch_size is also the batch of the batch-norm refresh, which changes results.
    assert plan.stitch_block("full")["eval_batch_size"] == config["stitching"]["eval_batch_size"]


@pytest.mark.parametrize(
    "variants, message",
    [
        (
            {"fl": {"arch": "myrtle", "gated": {"regime": "fl", "features_from": "nowhere"}}},
            "zoo.variants.fl.gated.features_from: 'nowhere' is not a zoo variant",
        ),
        (
            {
                "plain": {"arch": "myrtle", "width_multiplier": 0.5},
                "fl": {"arch": "myrtle", "gated": {"regime": "fl", "features_from": "plain"}},
            },
            "is not the plain form",
        ),
    ],
)
def test_gated_config_errors_name_the_key(tiny, variants, message):
    config = copy.deepcopy(tiny)
    config["zoo"]["variants"].update(variants)
    assert any(message in error for error in Plan(config).errors())


def test_fl_source_needs_as_many_seeds(tiny):
    config = copy.deepcopy(tiny)
    config["zoo"]["seeds_per_variant"]["c4gap"] = 1
    assert any("raise zoo.seeds_per_variant.c4gap" in error for error in Plan(config).errors())


def test_gated_study_takes_networks_with_a_gated_form(tiny):
    config = copy.deepcopy(tiny)
    config["gated"]["variants"] = ["resnet20"]
    assert any("config key gated.variants: 'resnet20'" in error for error in Plan(config).errors())


def test_stitching_a_feature_site_is_a_config_error(tiny):
    config = copy.deepcopy(tiny)
    config["stitching"]["sites"]["c4gap_dgn"] = ["features.act2"]
    assert any("stitching.sites.c4gap_dgn" in error for error in Plan(config).errors())


def test_deqntk_plan(tiny):
    """tiny.yaml: a 64-row training Gram in blocks of 40 and one test block; regressions on its
    first 40 and all 64 rows; two depth draws; the reference on myrtle's first member."""
    plan = Plan(tiny)
    gram = "results/deqntk/gram/w0.6_u0.4_b0"
    assert plan.deqntk_gram_jobs == [f"{gram}/train0.npz", f"{gram}/train40.npz", f"{gram}/test0.npz"]
    assert plan.deqntk_stop("train", 40) == 64 and plan.deqntk_stop("test", 0) == 32
    assert plan.deqntk_blocks("w0.6_u0.4_b0", 40) == [f"{gram}/train0.npz", f"{gram}/test0.npz"]
    assert plan.deqntk_blocks("w0.6_u0.4_b0", 64) == plan.deqntk_gram_jobs
    assert plan.deqntk_regression_jobs == [
        "results/deqntk/accuracy/w0.6_u0.4_b0/n40.parquet",
        "results/deqntk/accuracy/w0.6_u0.4_b0/n64.parquet",
    ]
    assert plan.deqntk_depth_jobs == [
        "results/deqntk/depth/draw0.parquet",
        "results/deqntk/depth/draw1.parquet",
    ]
    assert plan.kernel_reference_jobs == ["results/deqntk/reference/myrtle/seed0.parquet"]
    assert plan.deqntk_block("gram") == {"n_test": 32, "tol": 1e-10, "preprocessing": "raw"}
    # every DEQ-NTK job reads the preprocessing (changing it reruns them, and only them)
    for kind in ("gram", "regression", "depth", "reference"):
        assert plan.deqntk_block(kind)["preprocessing"] == "raw", kind
    assert plan.deqntk_block("reference")["reference_samples"] == 64  # similarity.samples
    assert {
        "results/tables/deqntk.parquet",
        "results/tables/kernel_reference.parquet",
        "results/figures/deqntk_accuracy.png",
        "results/figures/deqntk_depth.png",
        "results/figures/deqntk_reference.png",
    } <= set(plan.all_outputs)
    # Each part of the stage runs on its own.
    config = copy.deepcopy(tiny)
    config["deqntk"]["n_train"] = []
    config["deqntk"]["reference"]["variants"] = []
    plan = Plan(config)
    assert plan.deqntk_gram_jobs == [] and plan.deqntk_regression_jobs == []
    assert plan.deqntk_figures == ["results/figures/deqntk_depth.png"]
    assert plan.deqntk_outputs == ["results/tables/deqntk.parquet", "results/figures/deqntk_depth.png"]


def test_paper_deqntk_depth_sweep_is_the_papers_panels():
    """Figure 1 as the paper's: per panel the depth-L NTK at (sigma_w2, 0, sigma_b2) against the
    DEQ-NTK at (sigma_w2, sigma_b2 - 0.1, 0.1), 1,000 / 100 images, 20 draws, with the regulariser."""
    depth = Plan(load("config/paper.yaml")).deqntk_block("depth")
    assert depth["depth_n_train"] == 1000 and depth["depth_n_test"] == 100
    assert depth["deq_sigma_b2"] == 0.1 and depth["frozen_ridge"] > 0
    assert depth["panels"] and depth["finite_variances"] == [] and depth["depth_variances"] is None
    assert depth["depths"] == list(range(1, 33)) and depth["preprocessing"] == "raw"
    assert load("config/paper.yaml")["deqntk"]["depth"]["draws"] == 20


def test_conv_deqntk_is_one_job_where_asked_for(tiny):
    assert Plan(tiny).deqntk_conv_jobs == [] and Plan(load("config/config.yaml")).deqntk_conv_jobs == []
    plan = Plan(load("config/paper.yaml"))
    assert plan.deqntk_conv_jobs == ["results/deqntk/conv.parquet"]
    assert plan.deqntk_parts[-1] == "results/deqntk/conv.parquet"
    block = plan.deqntk_block("conv")
    # section 5: "we compute the kernel matrix on 2000 training data and tested on 10000 samples";
    # the readout the text's dense one, Tr (appendix B)
    assert block["conv_n_train"] == 2000 and block["conv_n_test"] == 10_000
    assert block["conv_readout"] == "trace"
    assert {"conv_n_train", "tol", "ridge"} <= set(block) and "n_test" not in block
    assert not any(key.startswith("conv_") for key in plan.deqntk_block("gram"))


def test_paper_deqntk_gram_is_one_per_setting_for_every_training_size():
    plan = Plan(load("config/paper.yaml"))
    assert plan.deqntk_train_rows == 50_000 and len(plan.deqntk_layout) == 50 + 10
    assert len(plan.deqntk_gram_jobs) == 3 * 60 and len(plan.deqntk_regression_jobs) == 9
    assert len(plan.deqntk_blocks("w0.6_u0.4_b0", 1000)) == 1 + 10
    assert gram_layout(2500, 0, 1000) == [("train", 0, 1000), ("train", 1000, 2000), ("train", 2000, 2500)]


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda c: c["deqntk"].update(settings=[[0.6, 0.4, 0.1]]),
            "config key deqntk.settings.0: [0.6, 0.4, 0.1] sums to 1.1",
        ),
        (
            lambda c: c["deqntk"].update(settings=[[1.0, 0.0, 0.0]]),
            "config key deqntk.settings.0: sigma_w2 = 1; the equilibrium needs sigma_w2 < 1",
        ),
        (lambda c: c["deqntk"].update(settings=[]), "config key deqntk.settings: empty"),
        (
            lambda c: c["deqntk"].update(n_train=[400]),
            "config key deqntk.n_train: 400 training images asked for, but the training split of shapes has 320; ask for at most 320 (its validation images included)",
        ),
        (lambda c: c["deqntk"].update(n_test=200), "config key deqntk.n_test: 200 test images asked for"),
        (
            lambda c: c["deqntk"]["depth"].update(finite=[[1.0, 0.5, 0.0]]),
            "config key deqntk.depth.finite.0: [1.0, 0.5, 0.0] sums to 1.5",
        ),
        (
            lambda c: c["deqntk"]["depth"].update(variances=[1.0, 0.0, 0.0]),
            "config key deqntk.depth.variances: sigma_w2 = 1",
        ),
        (lambda c: c["deqntk"]["depth"].update(n_train=1000), "config key deqntk.depth.n_train: 1000"),
        (
            lambda c: c["deqntk"]["depth"].update(panels=[[0.95, 0.05]]),
            "config key deqntk.depth.panels.0: sigma_b2 = 0.05 is below deqntk.depth.deq_sigma_b2 = 0.1",
        ),
        (
            lambda c: c["deqntk"]["depth"].update(panels=[[0.5, 0.4]]),
            "config key deqntk.depth.panels.0: [0.5, 0.0, 0.4] sums to 0.9",
        ),
        (
            lambda c: c["deqntk"].update(conv={"n_train": 400}),
            "config key deqntk.conv.n_train: 400 training images asked for, but the training split of shapes has 320",
        ),
        (
            lambda c: c["deqntk"].update(conv={"n_train": 10, "settings": [[1.0, 0.0, 0.0]]}),
            "config key deqntk.conv.settings.0: sigma_w2 = 1",
        ),
        (
            lambda c: c["deqntk"]["depth"].update(variances=None, finite=[]),
            "config key deqntk.depth: draws asks for the depth sweep, but it has no kernel",
        ),
        (
            lambda c: c["deqntk"]["reference"].update(variants=["vgg"]),
            "config key deqntk.reference.variants: ['vgg'] must be among",
        ),
        (
            lambda c: c["deqntk"]["reference"].update(seeds=4),
            "config key deqntk.reference.seeds: 4 seeds of 'myrtle' asked for",
        ),
        (
            lambda c: c["deqntk"]["reference"].update(samples=500),
            "config key deqntk.reference.samples: 500 test images asked for, but the test split of shapes has 128",
        ),
    ],
)
def test_deqntk_config_errors_name_the_key(change, message):
    errors = Plan(load("tests/configs/tiny.yaml", change)).errors()
    assert any(message in error for error in errors), errors


def test_pullback_plan(tiny):
    plan = Plan(tiny)
    assert plan.pullback_member_jobs == [
        "results/pullback/symmetry/myrtle/seed0.parquet",
        "results/pullback/symmetry/c4gap_dgn/seed0.parquet",
    ]
    assert plan.pullback_faithfulness_parts == [
        "results/pullback/faithfulness/myrtle/seed0.parquet",
        "results/pullback/faithfulness/c4gap_dgn/seed0.parquet",
    ]
    assert plan.pullback_pair_jobs == [
        "results/pullback/agreement/myrtle/pair0.parquet",
        "results/pullback/agreement/c4gap_dgn/pair0.parquet",
    ]
    assert plan.pullback_transfer_parts == [
        "results/pullback/transfer/myrtle/pair0.parquet",
        "results/pullback/transfer/c4gap_dgn/pair0.parquet",
    ]
    # the similarity stage's pairs: the same draw, its first pullback.pairs
    assert plan.pullback_pairs("myrtle") == plan.similarity_pairs("myrtle")[:1]
    # unit_sites of the cut sites on the residual stream, evenly spaced (a gated network's value sites)
    assert plan.pullback_sites("myrtle") == ["act1", "act4"]
    assert plan.pullback_sites("c4gap_dgn") == ["value.act1", "value.act4"]
    config = copy.deepcopy(tiny)
    config["pullback"].update(variants=["myrtle", "resnet20"], unit_sites=3, sites={"myrtle": ["act2"]})
    plan = Plan(config)
    assert plan.errors() == []
    assert plan.pullback_sites("myrtle") == ["act2"]
    assert plan.pullback_sites("resnet20") == ["act", "layer2.0.act2", "layer3.2.act2"]
    # the member job reads the settings of its kind only
    assert set(plan.pullback_block("member")) == {
        "images",
        "probe_images",
        "temperature",
        "sweep",
        "functional",
        "pool_padding",
        "spreads",
        "deletion_steps",
        "pgd",
    }
    swaps = {"temperature", "functional", "pool_padding"}
    assert set(plan.pullback_block("pair")) == {"images", "probe_images", "units", "sweep"} | swaps
    assert set(plan.pullback_block("images")) == {"probe_images", "pgd", "grid_images"} | swaps
    assert plan.pullback_outputs == [
        "results/tables/pullback_symmetry.parquet",
        "results/tables/pullback_faithfulness.parquet",
        "results/tables/pullback_agreement.parquet",
        "results/tables/pullback_transfer.parquet",
        "results/tables/pullback_summary.csv",
        "results/figures/pullback_symmetry.png",
        "results/figures/pullback_agreement.png",
        "results/figures/pullback_transfer.png",
        "results/figures/pullback_faithfulness.png",
        "results/figures/pullback_grid_myrtle.png",
        "results/figures/pullback_pgd_myrtle.png",
        "results/figures/pullback_grid_resnet20.png",
        "results/figures/pullback_pgd_resnet20.png",
    ]
    assert set(plan.pullback_outputs) <= set(plan.all_outputs)
    # seeds: null measures every member; no pairs, no agreement figure (its table is still written)
    config["pullback"].update(seeds=None, pairs=0)
    plan = Plan(config)
    assert len(plan.pullback_member_jobs) == 3 + 2 and plan.pullback_pair_jobs == []
    assert "results/figures/pullback_agreement.png" not in plan.pullback_outputs
    assert "results/figures/pullback_transfer.png" not in plan.pullback_outputs
    assert "results/tables/pullback_agreement.parquet" in plan.pullback_outputs
    # the paper's own experiment: an external ImageNet model's table and grids, without zoo variants;
    # its job's memory grows with the grid
    from intertwine.workflow.cluster import JobNeeds

    external = copy.deepcopy(config)
    external["pullback"].update(
        variants=[], external={"r50": {"arch": "resnet50", "weights": "w.pth", "images": "val"}}
    )
    assert Plan(external).pullback_outputs == [
        "results/tables/pullback_external_r50.parquet",
        "results/figures/pullback_external_r50.png",
        "results/figures/pullback_external_r50_perturbed.png",
        "results/figures/pullback_external_r50_pullbacks.png",
    ]
    needs = JobNeeds(Plan(external))
    small = needs.pullback_external("r50")
    external["pullback"]["external"]["r50"]["classes"] = 10
    assert JobNeeds(Plan(external)).pullback_external("r50").mem_mb > small.mem_mb > needs.gpu_base.mem_mb
    assert Plan(external).pullback_block("external") == {
        "temperature": 0.3,
        "functional": "soft",
        "pool_padding": "zeros",
        "pgd": external["pullback"]["pgd"],
    }
    # members that record gate patterns add Hypothesis 1's table and figure; a packed one is refused
    recorded = copy.deepcopy(config)
    recorded["zoo"]["training_per_variant"] = {"myrtle": {"gate_probe_images": 8}}
    plan = Plan(recorded)
    assert plan.settling_variants == ["myrtle"] and len(plan.settling_checkpoints) == 3
    assert "results/tables/pullback_settling.parquet" in plan.pullback_outputs
    recorded["zoo"]["pack_size_per_variant"] = {"myrtle": 3}
    assert any("gate_probe_images" in e and "pack" in e for e in Plan(recorded).errors())
    # a temperature sweep adds its figure (the default, no sweep, makes none)
    assert "results/figures/pullback_temperature.png" not in plan.pullback_outputs
    config["pullback"].update(sweep=[0.1, 0.5])
    assert "results/figures/pullback_temperature.png" in Plan(config).pullback_outputs
    assert Plan(config).pullback_block("member")["sweep"] == [0.1, 0.5]


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"variants": ["vgg"]},
            "config key pullback.variants: ['vgg'] must be among",
        ),
        (
            {"variants": ["cct"]},
            "config key pullback.variants: 'cct' is a cct; the stage acts on the weights of",
        ),
        (
            {"variants": ["convnext"]},
            "config key pullback.variants: 'convnext' is a convnext",
        ),
        (
            {"variants": ["myrtle_sigmoid"]},
            "config key pullback.variants: 'myrtle_sigmoid' has sigmoid activations",
        ),
        (
            {"variants": ["resnet20"], "seeds": 3},
            "config key pullback.seeds: 3 seeds of 'resnet20' asked for, but the zoo trains 2",
        ),
        (
            {"pairs": 4},
            "config key pullback.pairs: 4 pairs of 'myrtle' asked for, but its 3 zoo members form only 3",
        ),
        (
            {"variants": ["convnext"], "pairs": 0},
            "config key pullback.variants: 'convnext' is a convnext",
        ),
        (
            {"sites": {"resnet20": ["act"]}},
            "config key pullback.sites: ['resnet20'] must be among",
        ),
        (
            {"sites": {"myrtle": ["act9"]}},
            "config key pullback.sites.myrtle: ['act9'] must be among",
        ),
        (
            {"sites": {"c4gap_dgn": ["features.act1"]}},
            "config key pullback.sites.c4gap_dgn: ['features.act1'] must be among",
        ),
    ],
)
def test_pullback_config_errors_name_the_key(change, message):
    def edit(config):
        config["zoo"]["variants"]["myrtle_sigmoid"] = {"arch": "myrtle", "activation": "sigmoid"}
        config["pullback"].update(change)

    errors = Plan(load("tests/configs/tiny.yaml", edit)).errors()
    assert any(message in error for error in errors), errors


def test_packs_cover_each_member_once(tiny):
    import re

    plan = Plan(tiny)
    assert plan.packs("c4gap_dgn") == [range(0, 2), range(2, 3)] and plan.packs("myrtle") == []
    assert plan.member_pack("c4gap_dgn", 2) == "results/zoo/c4gap_dgn/packs/seeds2-2"
    assert plan.pack_features("c4gap_dgn_fl", 0, 1) == [
        "results/zoo/c4gap/seed0.pt",
        "results/zoo/c4gap/seed1.pt",
    ]
    packed, alone = plan.packed_variants(), plan.packed_variants(packed=False)
    for variant in plan.variants:  # exactly one of the two rules makes each member's checkpoint
        assert bool(re.fullmatch(packed, variant)) != bool(re.fullmatch(alone, variant)), variant
    assert re.fullmatch(packed, "c4gap_dgn") and not re.fullmatch(packed, "c4gap_dgn_fl2")
    everything = load("tests/configs/tiny.yaml", lambda c: c["zoo"].update(pack_size=4))
    assert not re.fullmatch(Plan(everything).packed_variants(packed=False), "myrtle")
    bad = load("tests/configs/tiny.yaml", lambda c: c["zoo"].update(pack_size_per_variant={"vgg": 2}))
    assert any(
        e.startswith("config key zoo.pack_size_per_variant") and "vgg" in e for e in Plan(bad).errors()
    )


# --- checks at plan time that were silent until a job ran (issue 33) ------------------------------


@pytest.mark.parametrize(
    "change, key, message",
    [
        (
            lambda c: c["zoo"]["variants"].update(
                perm={
                    "arch": "c4gap",
                    "width_multiplier": 0.0625,
                    "gated": {"family": "dlgn", "gate_perm": [1, 0, 2]},
                }
            ),
            "zoo.variants.perm",
            "model option 'gated.gate_perm': the network has 4 gated layers, got a permutation of 3",
        ),
        (
            lambda c: c["similarity"].update(samples=500),
            "similarity.samples",
            "500 test images asked for, but the test split of shapes has 128; ask for at most 128 (or null for the whole split)",
        ),
        (
            lambda c: c["gated"].update(probe_images=129),
            "gated.probe_images",
            "129 test images asked for, but the test split of shapes has 128",
        ),
        (lambda c: c["pullback"].update(images=200), "pullback.images", "200 test images asked for"),
        (
            lambda c: c["pullback"].update(probe_images=300),
            "pullback.probe_images",
            "300 training images asked for, but the training split of shapes has 256; ask for at most 256 (data.val_size",
        ),
        (lambda c: c["symmetry"].update(images=1000), "symmetry.images", "1000 test images asked for"),
    ],
)
def test_image_counts_and_gate_permutations_are_checked_at_plan_time(change, key, message):
    errors = Plan(load("tests/configs/tiny.yaml", change)).errors()
    assert any(error.startswith(f"config key {key}: ") and message in error for error in errors), errors
    # the key the user set, and no other: an oversized similarity.samples is not reported under
    # deqntk.reference.samples, which takes it when null
    assert not any("deqntk.reference.samples" in error for error in errors), errors


def test_image_counts_at_the_split_size_plan(tiny):
    config = copy.deepcopy(tiny)
    config["similarity"]["samples"] = 128
    config["pullback"]["probe_images"] = 256
    assert Plan(config).errors() == []


def test_logit_ensembles_are_of_the_studys_variants_and_trained_members(tiny):
    config = copy.deepcopy(tiny)
    config["gated"]["ensembles"] = {"c4gap_dgn": 3}
    plan = Plan(config)
    assert not plan.errors()
    assert plan.gated_ensembles == ["results/gated/c4gap_dgn/ensemble.parquet"]
    assert plan.ensemble_checkpoints("c4gap_dgn") == [f"results/zoo/c4gap_dgn/seed{s}.pt" for s in range(3)]
    assert "results/tables/gated_ensembles.csv" in plan.all_outputs
    config["gated"]["ensembles"] = {"c4gap_dgn": 4, "myrtle": 2}
    errors = Plan(config).errors()
    assert any("config key gated.ensembles: ['myrtle'] must be among gated.variants" in e for e in errors)
    config["gated"]["ensembles"] = {"c4gap_dgn": 4}
    errors = Plan(config).errors()
    assert any(
        "config key gated.ensembles.c4gap_dgn: 4 seeds of 'c4gap_dgn' asked for, but the zoo trains 3" in e
        for e in errors
    )


def test_the_plans_core_the_cluster_and_the_rules_common_part_name_no_stage():
    """Issue 52: a stage is its folder, its rule file and its name in the registry. The plan's core,
    the cluster's needs and common.smk find every stage's parts through the registry: no other
    stage's name is in their code (identifiers, attributes, strings; comments and docstrings
    aside). The zoo's variants, which every stage's models are built from, are read by name."""
    import ast
    from pathlib import Path

    from intertwine.workflow import stages

    root = Path(__file__).resolve().parents[1]
    for path in (
        "src/intertwine/workflow/plan.py",
        "src/intertwine/workflow/cluster.py",
        "workflow/rules/common.smk",
    ):
        tree = ast.parse((root / path).read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        words = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                words.add(node.id)
            elif isinstance(node, ast.Attribute):
                words.add(node.attr)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                words.add(node.name)
            elif (
                isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            ):
                words.add(node.value)
        words.discard("gated")  # a model spec's key (zoo.variants.*.gated: a gated network), not the stage
        for stage in stages.STAGES:
            if stage != "zoo":
                named = sorted(word for word in words if stage in word.lower())
                assert not named, f"{path} names the {stage} stage: {named}"


def _cifar_folders(root: Path, per_class: dict[str, int], classes) -> Path:
    """A CIFAR-10 copy in image folders: per split, that many 4x4 PNGs of each class."""
    import numpy as np
    from PIL import Image

    for split, n in per_class.items():
        for name in classes:
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                Image.fromarray(np.full((4, 4, 3), i, dtype=np.uint8)).save(root / split / name / f"{i}.png")
    return root


def _on_folders(root: Path):
    def change(config):
        config["data"].update(dataset="cifar10", cifar10={"root": str(root)})

    return change


def test_a_cifar_folder_with_fewer_test_images_than_asked_is_refused_at_plan_time(tmp_path):
    """similarity.samples 64 on a folder of 40 test images: the similarity job used to take 40
    without a word; the plan names the key, the folder and its count."""
    from intertwine.data.cifar10 import CLASSES

    root = _cifar_folders(tmp_path / "cifar", {"train": 10, "test": 4}, CLASSES)
    errors = Plan(load("tests/configs/tiny.yaml", _on_folders(root))).errors()
    expected = f"config key similarity.samples: 64 test images asked for, but {root / 'test'} holds 40"
    assert any(expected in error for error in errors), errors
    assert not any("symmetry.images" in error for error in errors)  # its 16 of the 40 fit

    # the training split after data.val_size (64 of 100 held out): pullback.probe_images 16 fits, 40 does not
    def more(config):
        _on_folders(root)(config)
        config["pullback"]["probe_images"] = 40

    errors = Plan(load("tests/configs/tiny.yaml", more)).errors()
    assert any(
        f"config key pullback.probe_images: 40 training images asked for, but {root / 'train'} holds 36" in e
        for e in errors
    ), errors


def test_a_cifar_folder_too_short_for_the_deqntk_kernels_is_refused_at_plan_time(tmp_path):
    """The DEQ-NTK's kernels take the training split with its validation images: 90 of a folder's
    100 training images fit though data.val_size holds out 64, 120 do not, and the message names
    the key and the folder."""
    from intertwine.data.cifar10 import CLASSES

    root = _cifar_folders(tmp_path / "cifar", {"train": 10, "test": 8}, CLASSES)

    def asking(n_train):
        def change(config):
            _on_folders(root)(config)
            config["deqntk"].update(n_train=[n_train], n_test=8)

        return change

    errors = Plan(load("tests/configs/tiny.yaml", asking(90))).errors()
    assert not any("deqntk.n_train" in error for error in errors), errors
    errors = Plan(load("tests/configs/tiny.yaml", asking(120))).errors()
    expected = f"config key deqntk.n_train: 120 training images asked for, but {root / 'train'} holds 100;"
    assert any(expected in error for error in errors), errors


def test_a_cifar_folder_missing_a_class_is_refused_at_plan_time(tmp_path):
    """A class missing from both splits used to make a 9-class data set; a class in one split
    only is named too."""
    from intertwine.data.cifar10 import CLASSES

    root = _cifar_folders(tmp_path / "cifar", {"train": 10, "test": 8}, CLASSES[:-1])
    errors = Plan(load("tests/configs/tiny.yaml", _on_folders(root))).errors()
    expected = f"config key data.cifar10.root: {root} has 9 class folders with images in train/ and test/, but CIFAR-10 has 10 (missing: truck)"
    assert any(expected in error for error in errors), errors
    (root / "train" / "truck").mkdir()
    from PIL import Image

    Image.new("RGB", (4, 4)).save(root / "train" / "truck" / "0.png")
    errors = Plan(load("tests/configs/tiny.yaml", _on_folders(root))).errors()
    assert any(
        f"{root / 'test'} has no images of class truck, which {root}/train has" in e for e in errors
    ), errors
    # A complete copy with enough images plans without a folder error.
    (root / "test" / "truck").mkdir()
    for i in range(8):
        Image.new("RGB", (4, 4)).save(root / "test" / "truck" / f"{i}.png")
    errors = Plan(load("tests/configs/tiny.yaml", _on_folders(root))).errors()
    assert not any(str(root) in error for error in errors), errors
