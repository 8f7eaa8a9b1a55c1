"""Every figure readable at the report's width: shown 800 px wide, its smallest text (tick labels,
axis labels, titles, legends, annotations, suptitles: whatever is drawn) is at least 8 pt, i.e.
font size / figure width in inches >= 0.96 (8 pt is
10.67 CSS px); figures with many variants, sites or measures wrap into rows instead of widening."""

from __future__ import annotations

import functools
import itertools

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from test_study_figures import SLOPES, stitching_rows, zoo_rows

from intertwine.workflow.stages.connectivity.figures import (
    CONNECTIVITY_METHODS,
    connectivity_barriers,
    connectivity_curves,
)
from intertwine.workflow.stages.deqntk.figures import deqntk_accuracy, deqntk_depth, deqntk_reference
from intertwine.workflow.stages.dissection.figures import (
    dissection_categories,
    dissection_fraction,
    dissection_masks,
)
from intertwine.workflow.stages.gated.figures import gated_accuracy, gated_kernels, gated_permutations
from intertwine.workflow.stages.pullback.figures import (
    PULLBACK_MODES,
    pullback_agreement,
    pullback_external,
    pullback_faithfulness,
    pullback_grid,
    pullback_pgd,
    pullback_settling,
    pullback_symmetry,
    pullback_temperature,
    pullback_transfer,
)
from intertwine.workflow.stages.rotation.figures import rotation_penalty
from intertwine.workflow.stages.similarity.figures import (
    similarity_cka,
    similarity_procrustes,
    similarity_zoo,
)
from intertwine.workflow.stages.stitching.figures import (
    alpha_selection,
    l1_sparsity,
    leaky_relu_accuracy,
    leaky_relu_penalty,
    softsort_comparison,
    stitching_convergence,
    stitching_dimension,
    stitching_penalty,
    transformer_penalty,
)
from intertwine.workflow.stages.zoo.figures import zoo_accuracy
from intertwine.workflow import stages

READABLE = 8 * 96 / 800  # points of text per inch of figure width: 8 pt at 800 px (0.96)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def drawn_texts(fig) -> list[tuple[str, float]]:
    """(text, size in points) of every text the figure draws, as the renderer is asked to."""
    renderer = FigureCanvasAgg(fig).get_renderer()
    seen = []
    draw_text = renderer.draw_text

    def record(gc, x, y, s, prop, angle, ismath=False, mtext=None):
        if s.strip():
            seen.append((s, prop.get_size_in_points()))
        return draw_text(gc, x, y, s, prop, angle, ismath=ismath, mtext=mtext)

    renderer.draw_text = record
    fig.draw(renderer)
    return seen


def assert_readable(fig) -> None:
    width = fig.get_size_inches()[0]
    texts = drawn_texts(fig)
    assert texts
    small = [(text, size) for text, size in texts if size / width < READABLE - 1e-9]
    assert not small, f"{width:.1f} in wide: {small[:5]}"


# --- tables like the default run's (small), and like the paper config's (many variants) -----------

RNG = np.random.default_rng(0)
SITES = ["act1", "act2", "act3", "act4"]
MANY_SITES = [f"layer{i}.{j}.act2" for i in range(1, 4) for j in range(4)]  # 12 of a ResNet20


def names(n, stem="resnet20_leaky"):
    return [f"{stem}{k}" for k in range(n)]


def zoo_table(variants):
    return pd.concat(
        [zoo_rows({v: 0.0 for v in variants[i : i + 1]}, members=4) for i in range(len(variants))]
    )


def rotation_table(variants):
    rows = [
        {
            "variant": v,
            "seed": s,
            "site": site,
            "inside_residual": k == 1,
            "group": g,
            "penalty": RNG.uniform(),
        }
        for v in variants
        for s in range(3)
        for k, site in enumerate(SITES)
        for g in ("grelu", "orthogonal")
    ]
    return pd.DataFrame(rows)


def similarity_table(
    variants,
    sites=SITES,
    measures=("grelu_procrustes", "orthogonal_procrustes", "grelu_cka", "linear_cka", "gate_cka"),
):
    rows = []
    for v, pair, measure in itertools.product(variants, range(3), measures):
        pairs = [(s, s) for s in sites] if measure.endswith("procrustes") else itertools.product(sites, sites)
        rows += [
            {
                "variant": v,
                "pair": pair,
                "seed_a": 0,
                "seed_b": 1,
                "site_a": a,
                "site_b": b,
                "measure": measure,
                "value": RNG.uniform(),
            }
            for a, b in pairs
        ]
    return pd.DataFrame(rows)


def similarity_zoo_table(variants, sites=SITES, members=12, measures=("orthogonal_procrustes", "linear_cka")):
    """The zoo view's table: members as random points (their euclidean distances), the mean as
    their centroid where the measure has one."""
    rows = []
    for v, site, measure in itertools.product(variants, sites, measures):
        points = RNG.standard_normal((members, 3))
        distances = np.linalg.norm(points[:, None] - points[None], axis=2)
        rows += [
            {
                "variant": v,
                "site": site,
                "measure": measure,
                "seed_a": a,
                "seed_b": b,
                "distance": distances[a, b],
            }
            for a in range(members)
            for b in range(members)
        ]
        if measure.endswith("procrustes"):
            centre = np.linalg.norm(points - points.mean(0), axis=1)
            rows += [
                {"variant": v, "site": site, "measure": measure, "seed_a": a, "seed_b": None, "distance": d}
                for a, d in enumerate(centre)
            ]
    return pd.DataFrame(rows).astype({"seed_b": "Int64"})


def dissection_table(variants, sites=SITES):
    rows = [
        {
            "variant": v,
            "seed": seed,
            "site": site,
            "inside_residual": k == 3,
            "alpha": alpha,
            "rotation_seed": r,
            "n_units": 16,
            "fraction_interpretable": RNG.uniform(0, 0.4),
            "n_unique_concepts": int(RNG.integers(0, 8)),
        }
        for v in variants
        for seed in range(2)
        for k, site in enumerate(sites)
        for alpha in (0.0, 0.5, 1.0)
        for r in range(2)
    ]
    return pd.DataFrame(rows)


def units_table(variants):
    rows = [
        {
            "variant": v,
            "seed": 0,
            "site": "act4",
            "alpha": alpha,
            "rotation_seed": 0,
            "unit": u,
            "concept": "circle",
            "category": c,
            "iou": 0.1,
            "detector": bool(RNG.uniform() > 0.5),
        }
        for v in variants
        for alpha in (0.0, 0.5, 1.0)
        for u in range(8)
        for c in ("object", "color", "texture", "part")
    ]
    return pd.DataFrame(rows)


def gated_table(perms=5):
    rows = []
    for family, value_input in [
        ("dnn", "x"),
        ("dgn", "x"),
        ("dgn", "ones"),
        ("dlgn", "x"),
        ("dlgn", "ones"),
        ("dlgn_sf", "x"),
    ]:
        for seed in range(3):
            rows.append(
                {
                    "variant": f"c4gap_{family}_{value_input}",
                    "seed": seed,
                    "base": "c4gap",
                    "family": family,
                    "regime": "standalone",
                    "value_input": value_input,
                    "gate_perm": None,
                    "permuted": False,
                    "test_acc": RNG.uniform(0.4, 0.8),
                    "paper_table": "I",
                    "paper_row": "C4GAP",
                    "paper_acc": 0.7,
                    "paper_sd": 0.01,
                }
            )
    for k in range(perms):
        rows.append({**rows[3], "variant": f"c4gap_dgn_x_{k}", "gate_perm": f"{k:04d}", "permuted": True})
    for regime in ("fl", "fr"):
        rows.append({**rows[3], "variant": f"c4gap_dgn_{regime}", "regime": regime, "paper_acc": None})
    return pd.DataFrame(rows)


def npk_table(variants):
    rows = [
        {"variant": v, "seed": 0, "kernel": "gate", "site": s, "ntk_cka": RNG.uniform()}
        for v in variants
        for s in SITES
    ]
    rows += [
        {"variant": v, "seed": 0, "kernel": "npk", "site": "model", "ntk_cka": RNG.uniform()}
        for v in variants
    ]
    return pd.DataFrame(rows)


def connectivity_table(variants, corrections=("reset",)):
    rows = [
        {
            "variant": v,
            "width_multiplier": w,
            "pair": pair,
            "method": m,
            "correction": c,
            "split": "test",
            "lam": lam,
            "loss": RNG.uniform(),
            "accuracy": RNG.uniform(),
            "barrier": RNG.uniform(),
            "barrier_line": RNG.uniform(),
            "accuracy_barrier": RNG.uniform(),
            "align_seconds": 1.0,
        }
        for v, w in variants
        for pair in range(3)
        for m in CONNECTIVITY_METHODS
        for c in corrections
        for lam in np.linspace(0, 1, 5)
    ]
    return pd.DataFrame(rows)


def deqntk_table(panels=("",)):
    rows = [
        {
            "study": "accuracy",
            "dataset": "cifar10",
            "sigma_w2": w,
            "sigma_u2": u,
            "sigma_b2": b,
            "n_train": 2000,
            "n_test": 1000,
            "depth": "deq",
            "draw": 0,
            "panel": None,
            "test_acc": RNG.uniform(0.3, 0.5),
        }
        for w, u, b in [(0.25, 0.25, 0.5), (0.6, 0.4, 0.0), (0.8, 0.2, 0.0)]
    ]
    for panel, draw in itertools.product(panels, range(3)):
        rows += [
            {**rows[0], "study": "depth", "panel": panel, "depth": str(d), "draw": draw} for d in (1, 2, 4, 8)
        ]
        rows.append({**rows[0], "study": "depth", "panel": panel, "depth": "deq", "draw": draw})
    return pd.DataFrame(rows)


def reference_table(variants):
    rows = [
        {"variant": v, "seed": s, "site": site, "kernel": k, "cka": RNG.uniform()}
        for v in variants
        for s in range(2)
        for site in SITES
        for k in ("linear_cka", "grelu_cka")
    ]
    return pd.DataFrame(rows)


MODES = list(PULLBACK_MODES)


def pullback_tables(variants):
    temperatures = {"gradient": [1.0], "global": [0.5, 1.0], "per_neuron": [0.5, 1.0]}
    symmetry, agreement, faithfulness, transfer = [], [], [], []
    for v, mode in itertools.product(variants, MODES):
        for t in temperatures[mode]:
            stage = {"temperature": t, "sweep": t == 0.5}
            for seed, group, spread in itertools.product(range(2), ("permutation", "grelu"), (0.0, 0.5, 1.0)):
                symmetry.append(
                    {
                        "variant": v,
                        "seed": seed,
                        "group": group,
                        "scale_spread": spread if group == "grelu" else 0.0,
                        "mode": mode,
                        "cos_mean": 1 - RNG.uniform(0, 1e-3),
                        "cos_min": 1 - RNG.uniform(0, 1e-2),
                        **stage,
                    }
                )
            for pair, site in itertools.product(range(2), ("logit", "act2")):
                agreement.append(
                    {
                        "variant": v,
                        "pair": pair,
                        "site": site,
                        "unit_a": 0 if site != "logit" else None,
                        "mode": mode,
                        "cos_mean": RNG.uniform(),
                        **stage,
                    }
                )
                transfer.append(
                    {
                        "variant": v,
                        "pair": pair,
                        "seed_source": pair,
                        "mode": mode,
                        "source_success": RNG.uniform(),
                        "transfer_success": RNG.uniform(),
                        "transfer_prob_gain": RNG.uniform(),
                        **stage,
                    }
                )
            for seed in range(2):
                faithfulness.append(
                    {
                        "variant": v,
                        "seed": seed,
                        "mode": mode,
                        "deletion_auc": RNG.uniform(),
                        "insertion_auc": RNG.uniform(),
                        "pgd_success": RNG.uniform(),
                        "pgd_success_by_step": list(np.sort(RNG.uniform(size=5))),
                        "pgd_epsilon": 0.5,
                        **stage,
                    }
                )
    return tuple(pd.DataFrame(rows) for rows in (symmetry, agreement, faithfulness, transfer))


def settling_table(variants, sites=MANY_SITES):
    rows = [
        {
            "variant": v,
            "seed": s,
            "epoch": e,
            "site": site,
            "agreement": 0.5 + 0.1 * e,
            "chance": 0.5,
            "path_rho_low": -0.1 + 0.275 * e,
        }
        for v in variants
        for s in range(2)
        for e in range(5)
        for site in sites
    ]
    return pd.DataFrame(rows)


def grid_arrays(classes=10, per_class=2):
    n = classes * per_class
    return {
        "title": "resnet20 seed 0",
        "classes": [f"class{k}" for k in range(classes)],
        "images": RNG.integers(0, 255, (n, 3, 8, 8)).astype(np.uint8),
        "labels": np.repeat(np.arange(classes), per_class),
        "attributions": {m: RNG.normal(size=(n, 3, 8, 8)) for m in MODES},
        "pgd_images": RNG.integers(0, 255, (classes, 3, 8, 8)).astype(np.uint8),
        "pgd_labels": np.arange(classes),
        "pgd_targets": (np.arange(classes) + 1) % classes,
        "pgd_moved": {m: RNG.uniform(size=(classes, 3, 8, 8)) for m in MODES},
        "pgd_predicted": {m: (np.arange(classes) + 1) % classes for m in MODES},
    }


def external_arrays(n=5, t=6):
    labels = ["tench", "English springer", "cassette player", "chain saw", "church", "golf ball", "parachute"]
    return {
        "title": "resnet50_v1 (resnet50, 224 px)",
        "images": RNG.uniform(size=(n, 3, 16, 16)),
        "labels": labels[:n],
        "targets": (labels * 2)[:t],
        "perturbed": {m: RNG.uniform(size=(n, t, 3, 16, 16)) for m in MODES},
        "pullbacks": {m: RNG.normal(size=(n, t, 3, 16, 16)) for m in MODES},
        "steps": 10,
        "epsilon": 3.0,
    }


def mask_panels(units=4, images=5):
    panels = [
        {
            "title": f"alpha {a:g}, unit {u}: circle (object), IoU 0.123",
            "examples": [(i, RNG.uniform(size=(8, 8)) > 0.5) for i in range(images)],
        }
        for a in (0.0, 1.0)
        for u in range(units)
    ]
    return RNG.integers(0, 255, (images, 3, 8, 8)).astype(np.uint8), panels


def study_figures(variants, sites):
    table = stitching_rows(
        variants=variants,
        sites=sites,
        methods=("full", "l1_0.01", "rank1", "grelu", "grelu_cv", "softsort"),
        pairs=2,
    )
    leaky = stitching_rows(variants=tuple(SLOPES), sites=sites, methods=("grelu",))
    accuracy = leaky_relu_accuracy(zoo_rows(), SLOPES)
    return {
        "stitching_penalty": lambda: stitching_penalty(table),
        "stitching_dimension": lambda: stitching_dimension(table),
        "stitching_convergence": lambda: stitching_convergence(table),
        "leaky_relu_penalty": lambda: leaky_relu_penalty(leaky, SLOPES, accuracy, zoo_rows()),
        "alpha_selection": lambda: alpha_selection(table),
        "l1_sparsity": lambda: l1_sparsity(table),
        "softsort_comparison": lambda: softsort_comparison(table),
        "transformer_penalty": lambda: transformer_penalty(table, [variants[0]]),
    }


@functools.cache  # the tables are built once per shape, not once per figure
def every_figure(n: int, sites: tuple[str, ...]):
    """Each stage's figure functions, called as the workflow calls it, on tables of ``n``
    variants (2: the default run's; more: the paper config's) with ``sites`` sites."""
    variants = names(n)
    symmetry, agreement, faithfulness, transfer = pullback_tables(variants)
    similarity = similarity_table(variants, sites)
    return {
        "zoo_accuracy": lambda: zoo_accuracy(zoo_table(names(8 * n)), {"resnet20_leaky0": 91.0}),
        "rotation_penalty": lambda: rotation_penalty(rotation_table(variants)),
        **study_figures(tuple(variants), sites),
        "similarity_procrustes": lambda: similarity_procrustes(similarity, {}),
        "similarity_cka": lambda: similarity_cka(similarity),
        "similarity_zoo": lambda: similarity_zoo(similarity_zoo_table(variants, sites)),
        "dissection_fraction": lambda: dissection_fraction(dissection_table(variants, sites)),
        "dissection_categories": lambda: dissection_categories(
            units_table(variants), {v: "act4" for v in variants}
        ),
        "dissection_masks": lambda: dissection_masks(*mask_panels()),
        "gated_accuracy": lambda: gated_accuracy(gated_table()),
        "gated_permutations": lambda: gated_permutations(gated_table(perms=4 * n)),
        "gated_kernels": lambda: gated_kernels(npk_table(variants), similarity),
        "connectivity_curves": lambda: connectivity_curves(
            connectivity_table([(v, 1.0) for v in variants], ("reset", "repair"))
        ),
        "connectivity_barriers": lambda: connectivity_barriers(
            connectivity_table([(f"{v}_w{w}", w) for v in variants for w in (0.5, 1.0, 2.0)]),
            {f"{v}_w{w}": v for v in variants for w in (0.5, 1.0, 2.0)},
        ),
        "deqntk_accuracy": lambda: deqntk_accuracy(
            deqntk_table(), zoo_table(names(6 * n)), {(0.25, 0.25, 0.5): 40.0}
        ),
        "deqntk_depth": lambda: deqntk_depth(deqntk_table([f"w{k}_b0.1" for k in range(1, n)] + [""])),
        "deqntk_reference": lambda: deqntk_reference(reference_table(variants)),
        "pullback_symmetry": lambda: pullback_symmetry(symmetry),
        "pullback_agreement": lambda: pullback_agreement(agreement),
        "pullback_transfer": lambda: pullback_transfer(transfer),
        "pullback_faithfulness": lambda: pullback_faithfulness(faithfulness),
        "pullback_temperature": lambda: pullback_temperature(symmetry, agreement, faithfulness),
        "pullback_settling": lambda: pullback_settling(settling_table(variants)),
        "pullback_grid": lambda: pullback_grid(grid_arrays()),
        "pullback_pgd": lambda: pullback_pgd(grid_arrays(classes=5 * n, per_class=1)),
        "pullback_external": lambda: pullback_external(external_arrays(t=3 + 2 * n)),
        "pullback_external_perturbed": lambda: pullback_external(external_arrays(), perturbed=True),
        "pullback_external_pullbacks": lambda: pullback_external(external_arrays(), pullbacks=True),
    }


FIGURE_FUNCTIONS = sorted(every_figure(2, tuple(SITES)))


def test_every_figure_function_is_checked():
    drawn = {name.removesuffix("_perturbed").removesuffix("_pullbacks") for name in FIGURE_FUNCTIONS}
    modules = [stages.part(stage, "figures") for stage in stages.with_part("figures")]
    made = {
        name
        for module in modules
        for name, value in vars(module).items()
        if callable(value)
        and not name.startswith("_")
        and getattr(value, "__module__", "") == module.__name__
        and value.__annotations__.get("return") in ("plt.Figure", plt.Figure)
    }
    assert made and made <= drawn, sorted(made - drawn)


@pytest.mark.parametrize("name", FIGURE_FUNCTIONS)
def test_figure_is_readable_at_the_reports_width(name):
    """The default run's shape: two variants of four sites."""
    assert_readable(every_figure(2, tuple(SITES))[name]())


@pytest.mark.parametrize("name", FIGURE_FUNCTIONS)
def test_figure_of_many_variants_wraps_into_rows(name):
    """The paper config's shape: five variants of 12 sites; the width stays, the height grows."""
    fig = every_figure(5, tuple(MANY_SITES))[name]()
    assert fig.get_size_inches()[0] <= 8.3
    assert_readable(fig)


def test_counts_are_singular_and_plural():
    one = stitching_rows(variants=("v1",), pairs=1)
    assert stitching_penalty(one).axes[0].get_title() == "v1 (1 pair)"
    two = stitching_rows(variants=("v1",), pairs=2)
    assert stitching_penalty(two).axes[0].get_title() == "v1 (2 pairs)"
    symmetry = pullback_tables(["v1"])[0]
    titles = [ax.get_title() for ax in pullback_symmetry(symmetry[symmetry["seed"] == 0]).axes]
    assert "v1 (1 member)" in titles
    settling = settling_table(["v1"], SITES)
    assert "v1 (2 members)" in [ax.get_title() for ax in pullback_settling(settling).axes]
