"""The similarity stage's zoo as a whole (``similarity.zoo``): the job over K members, its table,
summary and figure, and its plan."""

import copy

import numpy as np
import pytest
import torch

from intertwine import measures, models
from intertwine.workflow import tables
from intertwine.workflow.config import check_config, load_config
from intertwine.workflow.plan import Plan
from intertwine.workflow.stages.similarity.figures import similarity_zoo, similarity_zoo_summary
from intertwine.workflow.stages.similarity.tables import SIMILARITY_ZOO

SPEC = {"arch": "myrtle", "width_multiplier": 0.125}


def save_members(tmp_path, nets) -> list[str]:
    from intertwine.workflow.zoo import CHECKPOINT_FORMAT, save_checkpoint

    paths = []
    for seed, net in enumerate(nets):
        paths.append(str(tmp_path / f"seed{seed}.pt"))
        save_checkpoint(
            {
                "format": CHECKPOINT_FORMAT,
                "state_dict": net.state_dict(),
                "spec": models.normalize_spec(SPEC),
                "variant": "myrtle",
                "seed": seed,
            },
            paths[-1],
        )
    return paths


@pytest.fixture(scope="module")
def shapes_dir(tmp_path_factory, write_shapes):
    return write_shapes(tmp_path_factory.mktemp("zoo") / "shapes")


@pytest.fixture(scope="module")
def zoo_table(tmp_path_factory, shapes_dir):
    """The zoo view of three members: two independent networks and the first acted on by a
    G_ReLU element (a permutation of its channels), at two sites."""
    from intertwine.symmetry import act_on_weights, random_elements
    from intertwine.workflow.job import Job
    from intertwine.workflow.stages.similarity.job import similarity_zoo as job

    torch.manual_seed(0)
    first, other = models.build(SPEC).eval(), models.build(SPEC).eval()
    twin = act_on_weights(first, random_elements(first, "permutation", torch.Generator().manual_seed(1)))
    tmp_path = tmp_path_factory.mktemp("members")
    paths = save_members(tmp_path, (first, other, twin))
    block = {
        "samples": 40,
        "batch_size": 16,
        "measures": ["orthogonal_procrustes", "grelu_procrustes", "linear_cka"],
    }
    table = job(Job("cpu", shapes_dir, log=lambda _: None), "myrtle", paths, ["act1", "act3"], block)
    path = tmp_path / "zoo.parquet"
    tables.write_parquet(table, path, SIMILARITY_ZOO)  # the schema holds it, null seed_b included
    return tables.read_parquet([path], SIMILARITY_ZOO)


def test_the_zoo_job_holds_each_measures_matrix_and_the_distances_to_the_mean(zoo_table):
    table = zoo_table
    assert set(table["site"]) == {"act1", "act3"} and (table["n_samples"] == 40).all()
    pairs = table[table["seed_b"].notna()]
    # the whole 3 x 3 matrix per site and measure, symmetric with a zero diagonal
    assert len(pairs) == 2 * 3 * 9
    for (_, measure), part in pairs.groupby(["site", "measure"]):
        matrix = part.pivot(index="seed_a", columns="seed_b", values="distance").to_numpy()
        np.testing.assert_array_equal(matrix, matrix.T)
        np.testing.assert_array_equal(np.diag(matrix), 0.0)
        # member 2 is member 0 with its channels permuted: every measure here is invariant to that
        # (arccos of a CKA of 1 - e is sqrt(2 e): float32 activations' 1e-8 become 1e-4)
        assert matrix[0, 2] < (1e-3 if measure == "linear_cka" else 1e-5) and matrix[0, 1] > 0.01
    # the Procrustes measures have a mean (one row per member, seed_b null); linear CKA has none
    to_mean = table[table["seed_b"].isna()]
    assert set(to_mean["measure"]) == {"orthogonal_procrustes", "grelu_procrustes"}
    assert len(to_mean) == 2 * 2 * 3
    for (site, measure), part in to_mean.groupby(["site", "measure"]):
        matrix = pairs[(pairs["site"] == site) & (pairs["measure"] == measure)]
        best = matrix.groupby("seed_a")["distance"].apply(lambda d: (d**2).sum()).min()
        assert (part["distance"] ** 2).sum() <= best + 1e-9
        # members 0 and 2 are one point: equally far from the mean
        distances = part.set_index("seed_a")["distance"]
        assert distances[0] == pytest.approx(distances[2], abs=1e-6)


def test_the_zoo_summary_and_figure(zoo_table):
    summary = similarity_zoo_summary(zoo_table).set_index(["site", "measure"])
    assert (summary["members"] == 3).all()
    # three points, two of them one: the plane holds them exactly
    np.testing.assert_allclose(summary["plane_explained"], 1.0)
    assert summary["to_mean"].isna().sum() == 2  # linear CKA at both sites
    procrustes = summary.dropna(subset=["to_mean"])
    assert (procrustes["mean_vs_best_member"] < 1).all()
    # the summary's mean distance is the matrix's off-diagonal mean
    part = zoo_table[(zoo_table["site"] == "act1") & (zoo_table["measure"] == "linear_cka")]
    off = part[part["seed_a"] != part["seed_b"]]["distance"]
    assert summary.loc[("act1", "linear_cka"), "distance_mean"] == pytest.approx(off.mean(), abs=1e-4)
    fig = similarity_zoo(zoo_table)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert len(shown) == 3 * 2  # a row per measure, a panel per site
    # a star for the Procrustes mean in the Procrustes rows only
    stars = [ax for ax in shown if any(c.get_paths() and len(c.get_offsets()) == 1 for c in ax.collections)]
    assert len(stars) == 2 * 2


def test_the_zoo_job_names_a_dead_member(tmp_path, shapes_dir):
    from intertwine.workflow.job import Job
    from intertwine.workflow.stages.similarity.job import similarity_zoo as job

    torch.manual_seed(0)
    alive, dead = models.build(SPEC).eval(), models.build(SPEC).eval()
    with torch.no_grad():
        dead.bn3.weight.zero_(), dead.bn3.bias.fill_(-1.0)  # act3 is 0 on every input
    paths = save_members(tmp_path, (alive, dead))
    with pytest.raises(ValueError, match=r"myrtle at act3: .*Check .*seed1\.pt.*similarity\.zoo\.samples"):
        job(Job("cpu", shapes_dir, log=lambda _: None), "myrtle", paths, ["act3"], {"samples": 24})


@pytest.fixture(scope="module")
def tiny():
    config = load_config(["tests/configs/tiny.yaml"])
    assert check_config(config) == []
    return config


def test_the_plan_has_one_zoo_job_per_variant(tiny):
    plan = Plan(tiny)
    assert plan.similarity_zoo_jobs == ["results/similarity/myrtle/zoo.parquet"]
    assert plan.similarity_zoo_members("myrtle") == [0, 1, 2]  # null: every member
    assert plan.similarity_zoo_sites("myrtle") == ["act1", "act4"]
    assert set(plan.similarity_zoo_block) == {"measures", "samples", "mean_iterations", "batch_size"}
    assert {
        "results/tables/similarity_zoo.parquet",
        "results/tables/similarity_zoo_summary.csv",
        "results/figures/similarity_zoo.png",
    } <= set(plan.stage_outputs)
    # the pair jobs' settings are not the zoo view's: changing them reruns no zoo job
    changed = copy.deepcopy(tiny)
    changed["similarity"]["cka_measures"] = ["linear_cka"]
    assert Plan(changed).similarity_zoo_block == plan.similarity_zoo_block
    # without zoo variants, nothing of it
    changed["similarity"]["zoo"]["variants"] = []
    assert not {path for path in Plan(changed).stage_outputs if "similarity_zoo" in path}


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda z: z.update(variants=["nope"]),
            "config key similarity.zoo.variants: ['nope'] must be among zoo.variants",
        ),
        (lambda z: z.update(members=4), "config key similarity.zoo.members: 4 seeds of 'myrtle' asked for"),
        (lambda z: z.update(sites={"myrtle": ["act9"]}), "config key similarity.zoo.sites.myrtle: ['act9']"),
        (lambda z: z.update(sites={"resnet20": ["act"]}), "config key similarity.zoo.sites: ['resnet20']"),
        (lambda z: z.update(samples=100_000), "config key similarity.zoo.samples: 100000 test images"),
        (lambda z: z.update(variants=["convnext"]), "a zoo view needs at least 2 members"),
    ],
)
def test_the_zoo_views_config_errors_name_the_key(tiny, change, message):
    config = copy.deepcopy(tiny)
    change(config["similarity"]["zoo"])
    errors = Plan(config).errors()
    assert any(message in error for error in errors), errors


def test_every_measure_of_the_stage_has_a_distance():
    """The zoo view offers every measure of the library (the schema's list is MEASURES')."""
    from intertwine.workflow.settings import schema_block

    offered = schema_block("similarity.zoo")["properties"]["measures"]["items"]["enum"]
    assert sorted(offered) == sorted(measures.MEASURES) == sorted(measures.DISTANCE_FORMS)
    assert set(measures.MEAN_MEASURES) <= set(offered)
