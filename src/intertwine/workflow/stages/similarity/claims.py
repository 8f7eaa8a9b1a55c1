"""The similarity stage's claims, one row per architecture the paper measured (never pooled across
architectures, nor across the run's variants): C4.* (G_ReLU-Procrustes below orthogonal Procrustes
and the depth pattern, section 5, appendix D.3), C5.* (G_ReLU-CKA's diagonal decays more with depth
than linear CKA's, appendix D.8), C8 (Table 4 as the paper prints and reads it, appendix D.8) and C9
(the Procrustes pattern mirrors Fig. 1's stitching penalties, section 5)."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from intertwine.workflow.claims import (
    GODFREY,
    Claim,
    Comparison,
    Estimate,
    Result,
    describe,
    judge,
    not_run,
    pair_keys,
    pair_members,
    units_text,
)
from intertwine.workflow.paper import TABLE_2_PAIRS, TABLE_2_PROCRUSTES, TABLE_4_PAIRS, TABLE_4_PROCRUSTES

# --- the units: which variant is which architecture, and per pair its values by site ------------

#: The architectures the paper measured similarity on, by the suffix of their claim ids:
#: (arch, constant_width, name).
ARCHITECTURES = {
    "myrtle": ("myrtle", None, "Myrtle"),
    "resnet20": ("resnet20", None, "ResNet20"),
    "resnet18": ("resnet18", None, "ResNet18"),
    "myrtle512": ("myrtle", 512, "constant-width Myrtle (512 channels)"),
}

PROCRUSTES = ("grelu_procrustes", "orthogonal_procrustes")


def architecture_variants(settings: dict, key: str) -> list[str]:
    """The run's similarity variants of the paper's architecture ``key``: plain ReLU (not gated),
    the architecture, and constant width 512 for ``myrtle512`` only. A variant narrower than the
    paper's model, or without its batch norm or residual activation, still counts (the evidence
    says so: ``unlike_paper``). Each variant is judged on its own: variants are never pooled."""
    arch, width, _ = ARCHITECTURES[key]
    specs = settings["variant_specs"]
    return [
        variant
        for variant in settings["relu_similarity_variants"]
        if variant in specs
        and specs[variant]["arch"] == arch
        and specs[variant].get("constant_width") == width
    ]


def unlike_paper(settings: dict, variants) -> str:
    """ "; unlike the paper's models: myrtle width 0.25x" for the variants that differ from the
    paper's (width 1x, batch norm, the residual activation), or ""."""
    found = []
    for variant in variants:
        spec, parts = settings["variant_specs"][variant], []
        if spec.get("width_multiplier", 1.0) != 1.0:
            parts.append(f"width {spec['width_multiplier']:g}x")
        if not spec.get("batch_norm", True):
            parts.append("no batch norm")
        if not spec.get("residual_activation", True):
            parts.append("no residual activation")
        if parts:
            found.append(f"{variant} {', '.join(parts)}")
    return f"; unlike the paper's models: {'; '.join(found)}" if found else ""


def depth_order(settings: dict, variant: str, sites) -> list[str]:
    """``sites`` in the model's forward order (the plan's ``site_order``; else as given)."""
    present = list(dict.fromkeys(sites))
    order = settings.get("site_order", {}).get(variant) or present
    return [site for site in order if site in present]


def layer_70(settings: dict, variant: str) -> str | None:
    """The site the paper calls "layer 70" of its ResNet18: the penultimate site inside a residual
    block (appendix D.3's own gloss), or None when the plan names fewer than two such sites."""
    inside = settings["similarity_inside_residual"].get(variant, [])
    return inside[-2] if len(inside) >= 2 else None


def by_site(table: pd.DataFrame, variant: str, measures, settings: dict) -> dict[str, pd.DataFrame]:
    """Per measure, the variant's same-site values: one row per pair, one column per site in depth
    order, only the sites every measure has and the pairs with a value at each of them."""
    rows = table[
        (table["variant"] == variant) & (table["site_a"] == table["site_b"]) & table["measure"].isin(measures)
    ]
    if rows.empty or not set(measures) <= set(rows["measure"]):
        return {}
    wide = rows.pivot_table(index=pair_keys(rows), columns=["measure", "site_a"], values="value")
    shared = set.intersection(*(set(wide[m].columns) for m in measures))
    sites = depth_order(settings, variant, [s for s in rows["site_a"] if s in shared])
    if not sites:
        return {}
    columns = [(m, s) for m in measures for s in sites]
    wide = wide[columns].dropna()
    return {m: wide[m][sites] for m in measures}


def members(frame: pd.DataFrame) -> list[tuple] | None:
    """The zoo members each row of a ``by_site`` frame (a pair) rests on."""
    return pair_members(frame.index.to_frame(index=False))


def fall_and_rise(values: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per pair (a row; 3 or more sites in depth order): the fall over the sites before the last
    (minus a least-squares line's change from the first site to the penultimate) and the rise at
    the last site (the last minus the penultimate)."""
    array = values.to_numpy(float)
    before = array[:, :-1]
    depth = np.arange(before.shape[1], dtype=float)
    slope = np.polyfit(depth, before.T, 1)[0]
    return -slope * depth[-1], array[:, -1] - array[:, -2]


def correlation(a: pd.DataFrame, b: pd.DataFrame) -> np.ndarray:
    """Per pair (a row), the correlation over sites of ``a`` with ``b`` (NaN where either is flat)."""
    x, y = a.to_numpy(float), b.to_numpy(float)
    x = x - x.mean(axis=1, keepdims=True)
    y = y - y.mean(axis=1, keepdims=True)
    norms = np.sqrt((x * x).sum(axis=1) * (y * y).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norms > 0, (x * y).sum(axis=1) / norms, np.nan)


def decay(values: pd.DataFrame, order: list[str]) -> np.ndarray:
    """Per pair (a row; 2 or more sites), the fall of a least-squares line over depth from the
    first site to the last, depth being each site's place in the model's ``order``."""
    depth = np.array([order.index(site) for site in values.columns], dtype=float)
    slope = np.polyfit(depth, values.to_numpy(float).T, 1)[0]
    return -slope * (depth.max() - depth.min())


def means_text(frames: dict[str, pd.DataFrame], label: dict[str, str]) -> str:
    """The mean over pairs at each site, per measure: "G_ReLU 0.62/0.51 (act1/act2)"."""
    parts = []
    for measure, frame in frames.items():
        values = " / ".join(f"{v:.3f}" for v in frame.mean())
        parts.append(f"{label.get(measure, measure)} {values}")
    sites = " / ".join(next(iter(frames.values())).columns)
    return f"{' vs '.join(parts)} ({sites})"


# --- the tests ------------------------------------------------------------------------------------

LABELS = {
    "grelu_procrustes": "G_ReLU",
    "orthogonal_procrustes": "orthogonal",
    "grelu_cka": "G_ReLU-CKA",
    "linear_cka": "linear CKA",
    "channel_normalized_linear_cka": "channel-normalised linear CKA",
}

#: The site of Table 4 (the paper's layer 10 of the Myrtle: our act3, as in Table 2).
LAYER_10 = "act3"

#: The architectures whose rows test the sentence's depth shape (decreasing, then up at the last
#: layer): the Myrtle's four sites, which Table 2 prints. The ResNets' curves are figures whose
#: values are not in the text, and their last two sites sit inside and outside a residual block.
SHAPED = ("myrtle", "myrtle512")


def _needs(key: str, what: str) -> str:
    return (
        f"needs {what} of a {ARCHITECTURES[key][2]} variant in similarity.variants (plain ReLU, batch "
        "norm, width 1x)"
    )


def _procrustes_variant(key, variant, frames, settings, comparisons, missing, notes) -> int:
    """Add one variant's C4 comparisons; return its pairs."""
    g, o = frames["grelu_procrustes"], frames["orthogonal_procrustes"]
    if key == "resnet18":
        left = layer_70(settings, variant)
        if left in g.columns:
            gap = Estimate.of(o[left] - g[left], members(g))
            notes.append(
                f"{variant} {left} (the paper's layer 70, its stated exception) left out; orthogonal - "
                f"G_ReLU there {gap.text()} (reported, does not decide)"
            )
            g, o = g.drop(columns=left), o.drop(columns=left)
    who = members(g)
    comparisons.append(
        Comparison(f"{variant} orthogonal - G_ReLU", Estimate.of((o - g).mean(axis=1), who), +1)
    )
    if g.shape[1] < 3:
        missing.append(f"{variant} has {units_text('site', g.shape[1])}: the depth pattern needs 3")
        return len(g)
    pattern = Estimate.of(correlation(g, o), who)
    comparisons.append(Comparison(f"{variant} depth-pattern correlation", pattern, +1))
    if key in SHAPED:
        for label, values in (("G_ReLU", g), ("orthogonal", o)):
            fall, rise = fall_and_rise(values)
            comparisons.append(
                Comparison(f"{variant} {label} fall to {values.columns[-2]}", Estimate.of(fall, who), +1)
            )
            comparisons.append(
                Comparison(f"{variant} {label} rise at {values.columns[-1]}", Estimate.of(rise, who), +1)
            )
    return len(g)


def procrustes_order(key: str, tables, settings) -> Result:
    """C4.<key>: per variant of the architecture, each pair's mean over sites of orthogonal minus
    G_ReLU Procrustes above 0 ("less similarity"); each pair's correlation over sites of the two
    above 0 ("patterns ... largely follow"; 3 or more sites); on the Myrtles each measure's fall
    to the penultimate site and rise at the last above 0 ("decreasing ..., only to increase again
    in the last layer"). All paired within the pair; ResNet18 leaves out its layer 70."""
    comparisons, missing, notes, units, means, used = [], [], [], [], [], []
    for variant in architecture_variants(settings, key):
        frames = by_site(tables["similarity"], variant, PROCRUSTES, settings)
        if not frames or frames["grelu_procrustes"].empty:
            continue
        pairs = _procrustes_variant(key, variant, frames, settings, comparisons, missing, notes)
        units.append(f"{variant} {units_text('pair', pairs)}")
        used.append(variant)
        means.append(f"{variant} {means_text(frames, LABELS)}")
    if not comparisons:
        return not_run(_needs(key, "grelu_procrustes and orthogonal_procrustes"))
    judgement = judge(comparisons, missing="; ".join(missing))
    untested = (
        ""
        if key in SHAPED
        else "; untested: the decrease with depth and the rise at the last layer (Table 2's Myrtle "
        "shape; this architecture's figure has no values in the text)"
    )
    return Result(
        f"by site {'; '.join(means)}; " + describe(comparisons, judgement.agreement, 1, ".3f"),
        judgement.verdict,
        f"paired 95 % t-intervals over each variant's pairs (no pooling), {judgement.note}"
        + "".join(f"; {note}" for note in notes)
        + untested
        + unlike_paper(settings, used),
        "; ".join(units),
    )


def table_4(tables, settings) -> Result:
    """C8: at act3 (layer 10) of each constant-width Myrtle, each pair's G_ReLU minus orthogonal
    Procrustes above 0, as Table 4 prints (paired within the pair)."""
    comparisons, units, used = [], [], []
    for variant in architecture_variants(settings, "myrtle512"):
        frames = by_site(tables["similarity"], variant, PROCRUSTES, settings)
        if not frames or LAYER_10 not in frames["grelu_procrustes"].columns:
            continue
        g, o = frames["grelu_procrustes"][LAYER_10], frames["orthogonal_procrustes"][LAYER_10]
        comparisons.append(
            Comparison(
                f"{variant} {LAYER_10} G_ReLU - orthogonal",
                Estimate.of(g - o, members(frames[PROCRUSTES[0]])),
                +1,
            )
        )
        units.append(f"{variant} {units_text('pair', len(g))}")
        used.append(variant)
    if not comparisons:
        return not_run(_needs("myrtle512", f"grelu_procrustes and orthogonal_procrustes at {LAYER_10}"))
    judgement = judge(comparisons)
    return Result(
        describe(comparisons, judgement.agreement, 1, ".3f"),
        judgement.verdict,
        f"paired 95 % t-intervals over each variant's pairs, {judgement.note}; untested: "
        '"qualitatively very similar" to the Myrtle of Table 2 as a comparison (the paper gives no '
        "margin, and at layer 10 its Table 4 reverses Table 2's order: C4.myrtle512 reads that)"
        + unlike_paper(settings, used),
        "; ".join(units),
    )


def _cka_variant(variant, frames, settings, comparisons, extras) -> int:
    """Add one variant's C5 comparisons (and the released code's baseline to ``extras``)."""
    order = settings.get("site_order", {}).get(variant) or list(frames["grelu_cka"].columns)
    g, linear = decay(frames["grelu_cka"], order), decay(frames["linear_cka"], order)
    who = members(frames["grelu_cka"])
    comparisons.append(Comparison(f"{variant} G_ReLU-CKA decay", Estimate.of(g, who), +1))
    comparisons.append(Comparison(f"{variant} G_ReLU - linear CKA decay", Estimate.of(g - linear, who), +1))
    baseline = frames.get("channel_normalized_linear_cka")
    measured = None if baseline is None else baseline.notna().all(axis=1).to_numpy()
    if measured is not None and measured.any():
        released = np.full(len(g), np.nan)
        released[measured] = decay(baseline[measured], order)
        extras.append(
            f"{variant} G_ReLU - channel-normalised linear CKA decay {Estimate.of(g - released, who).text()} "
            f"(linear CKA {np.mean(linear):.3f}, channel-normalised {np.nanmean(released):.3f}; "
            f"{int(measured.sum())} of {units_text('pair', len(g))})"
        )
    else:
        extras.append(
            f"{variant}: the run did not measure channel_normalized_linear_cka (similarity.cka_measures), the "
            "baseline the paper's released code drew"
        )
    return len(g)


def cka_decay(key: str, tables, settings) -> Result:
    """C5.<key>: per variant of the architecture, the decay of each pair's diagonal (a site
    against the same site of the other member) along depth, a least-squares line from the first
    site to the last: G_ReLU-CKA's above 0 and above linear CKA's (paired within the pair). Linear
    CKA decides; the channel-normalised linear CKA of the released code is reported beside it."""
    comparisons, extras, units, decays, used = [], [], [], [], []
    table = tables["similarity"]
    for variant in architecture_variants(settings, key):
        frames = by_site(table, variant, ("grelu_cka", "linear_cka"), settings)
        if not frames or frames["grelu_cka"].shape[1] < 2 or frames["grelu_cka"].empty:
            continue
        # The released code's baseline, on the same pairs and sites where measured; it never
        # narrows the units the deciding comparison rests on.
        released = by_site(table, variant, ("grelu_cka", "channel_normalized_linear_cka"), settings)
        if released and set(frames["grelu_cka"].columns) <= set(released["grelu_cka"].columns):
            aligned = released["channel_normalized_linear_cka"][frames["grelu_cka"].columns]
            frames["channel_normalized_linear_cka"] = aligned.reindex(frames["grelu_cka"].index)
        pairs = _cka_variant(variant, frames, settings, comparisons, extras)
        units.append(f"{variant} {units_text('pair', pairs)}")
        used.append(variant)
        decays.append(f"{variant} sites {' / '.join(frames['grelu_cka'].columns)}")
    if not comparisons:
        return not_run(_needs(key, "grelu_cka and linear_cka (similarity.cka_measures) at 2 or more sites"))
    judgement = judge(comparisons)
    return Result(
        f"diagonal decay along depth ({'; '.join(decays)}): "
        + describe(comparisons, judgement.agreement, 1, ".3f"),
        judgement.verdict,
        f"paired 95 % t-intervals over each variant's pairs (no pooling), {judgement.note}; decided "
        'against plain linear CKA, the "orthogonal counterpart" (the paper\'s CKA counterpart is '
        "invariant to orthogonal transformations, which only plain linear CKA is); beside it, not "
        f'deciding: {"; ".join(extras)}; "much more" is read as more (ours: the paper gives no size)'
        + unlike_paper(settings, used),
        "; ".join(units),
    )


def _penalties(stitching, variant, sites):
    """The variant's G_ReLU stitching penalties, one row per stitching pair, one column per site."""
    rows = stitching[(stitching["variant"] == variant) & (stitching["method"] == "grelu")]
    keys = ["variant", "pair"] + [c for c in ("seed_a", "seed_b") if c in rows.columns]
    wide = rows.pivot_table(index=keys, columns="site", values="penalty")
    return wide[[s for s in sites if s in wide.columns]].dropna()


def fig1_mirror(tables, settings) -> Result:
    """C9: per Myrtle variant, on the sites both stages measured (3 or more, in depth order):
    G_ReLU-Procrustes falls to the penultimate site and rises at the last (similarity pairs), and
    the G_ReLU stitching penalty rises to the penultimate site and falls at the last (stitching
    pairs). The correlation of the two curves' site means is reported, not judged."""
    comparisons, units, shown, used = [], [], [], []
    stitching = tables["stitching"]
    for variant in architecture_variants(settings, "myrtle"):
        frames = by_site(tables["similarity"], variant, ("grelu_procrustes",), settings)
        if not frames or variant not in set(stitching["variant"]):
            continue
        sites = [s for s in frames["grelu_procrustes"].columns if s in set(stitching["site"])]
        sites = depth_order(settings, variant, sites)
        similarity, penalty = (
            frames["grelu_procrustes"][sites].dropna(),
            _penalties(stitching, variant, sites),
        )
        if len(sites) < 3 or penalty.shape[1] < len(sites) or similarity.empty or penalty.empty:
            continue
        fall, rise = fall_and_rise(similarity)
        climb, drop = fall_and_rise(-penalty)
        s_who, p_who = members(similarity), members(penalty)
        comparisons += [
            Comparison(f"{variant} G_ReLU-Procrustes fall to {sites[-2]}", Estimate.of(fall, s_who), +1),
            Comparison(f"{variant} G_ReLU-Procrustes rise at {sites[-1]}", Estimate.of(rise, s_who), +1),
            Comparison(f"{variant} G_ReLU penalty rise to {sites[-2]}", Estimate.of(climb, p_who), +1),
            Comparison(f"{variant} G_ReLU penalty fall at {sites[-1]}", Estimate.of(drop, p_who), +1),
        ]
        r = float(np.corrcoef(similarity.mean(), penalty.mean())[0, 1])
        shown.append(f"{variant} correlation of the {len(sites)} site means {r:+.2f}")
        units.append(f"{variant} {units_text('similarity pair', len(similarity))}, {len(penalty)} stitching")
        used.append(variant)
    if not comparisons:
        return not_run(
            "needs grelu_procrustes and G_ReLU stitching penalties of a Myrtle variant at 3 or more shared sites"
        )
    judgement = judge(comparisons)
    return Result(
        f"{'; '.join(shown)} (no interval: reported, does not decide); "
        + describe(comparisons, judgement.agreement, 1, ".3f"),
        judgement.verdict,
        f"paired 95 % t-intervals over each stage's own pairs, {judgement.note}; the statistic shows "
        "that the two curves have mirrored shapes at the same sites; it cannot show a correlation across "
        "units (the stitching and similarity pairs are different draws, and 4 sites give a correlation no "
        "useful interval), nor that the sizes of the changes track each other; untested: Fig. 1's full and "
        "reduced-rank penalties (the G_ReLU penalty is the one paired with G_ReLU-Procrustes)"
        + unlike_paper(settings, used),
        "; ".join(units),
    )


# --- the claims ------------------------------------------------------------------------------------

LESS = (
    '"We see that distinct representations register less similarity in terms of G_ReLU-Procrustes than '
    'they do in terms of orthogonal Procrustes." (section 5)'
)
PATTERN = (
    '"Otherwise patterns in G_ReLU-Procrustes similarity largely follow those of orthogonal Procrustes, '
    "with similarity between representations decreasing as one progresses through the network, only to "
    'increase again in the last layer." (section 5)'
)
DECAY = (
    '"A notable feature of our plots in figs. 2, 5 and 11 is that the G_ReLU-CKA exhibits a much more '
    'significant decay with network depth than its orthogonal counterpart." (appendix D.8)'
)
CONSTANT_WIDTH = (
    '"In table 4 and fig. 16 we see that these constant width CNNs exhibit qualitatively very similar '
    'dissimilarity measures as their non-constant width counterparts." (appendix D.8)'
)


def _printed(values: dict, pairs: int, table: str) -> str:
    def row(measure):
        return ", ".join(f"{m:.4f} ± {sd:.3f}" for m, sd in values[measure].values())

    sites = " / ".join(values["grelu_procrustes"])
    return f"{table} ({pairs} pairs), {sites}: G_ReLU {row('grelu_procrustes')}; orthogonal {row('orthogonal_procrustes')}"


C4_TEXT = {
    "myrtle": (
        "section 5, Table 2, appendix D.7",
        f"{LESS} {PATTERN}",
        _printed(TABLE_2_PROCRUSTES, TABLE_2_PAIRS, "Table 2") + " (layers 3/6/10/14 = act1..act4)",
    ),
    "resnet20": (
        "section 5, appendix D.3, Fig. 9",
        f'{LESS} {PATTERN} "The 2 measures seem qualitatively quite similar in this case." (appendix D.3)',
        "Fig. 9 (32 pairs): values not in the text",
    ),
    "resnet18": (
        "section 5, appendix D.3, Fig. 10",
        (
            f'{LESS} "For the most part the same applies to the ResNet18 in fig. 10, with the exception of '
            "layer 70 (penultimate inside-a-residual-block layer), where we see high G_ReLU similarity, in "
            'conflict with both fig. 7 and fig. 11 below." (appendix D.3)'
        ),
        "Fig. 10 (32 pairs): values not in the text",
    ),
    "myrtle512": (
        "section 5, appendix D.8, Table 4",
        f"{LESS} {PATTERN} {CONSTANT_WIDTH}",
        _printed(TABLE_4_PROCRUSTES, TABLE_4_PAIRS, "Table 4")
        + " (layer 10 = act3): G_ReLU above orthogonal, the paper's own numbers reverse the section-5 order here",
    ),
}
C5_TEXT = {
    "myrtle": ("Fig. 5", DECAY, "Fig. 5 (16 pairs): values not in the text"),
    "resnet20": ("Fig. 2", DECAY, "Fig. 2 (16 pairs): values not in the text"),
    "resnet18": ("Fig. 11", DECAY, "Fig. 11 (16 pairs): values not in the text"),
    "myrtle512": (
        "Fig. 16",
        (
            f'{DECAY} "This suggests that the G_ReLU-CKA decay with network depth is *not* an artifact of '
            'increasing channel dimension." (appendix D.8)'
        ),
        "Fig. 16 (4 pairs): values not in the text",
    ),
}


def _c4(key: str) -> Claim:
    where, sentence, paper = C4_TEXT[key]
    name = ARCHITECTURES[key][2]
    shape = (
        "; each measure falls to the penultimate site and rises at the last"
        if key in SHAPED
        else "; the depth shape untested (no values in the text)"
    )
    leave = (
        ", the paper's layer 70 (the penultimate site inside a residual block) left out"
        if key == "resnet18"
        else ""
    )
    return Claim(
        f"C4.{key}",
        f"{GODFREY}, {where}",
        sentence,
        f"{name}, per variant, over pairs{leave}: orthogonal - G_ReLU Procrustes (the pair's mean over sites) "
        f'above 0, and the pair\'s correlation over sites of the two above 0 (ours: "largely follow"){shape}',
        paper,
        ("similarity",),
        "similarity_procrustes.png",
        functools.partial(procrustes_order, key),
        ("select_on",),
        ("zoo", "similarity"),
    )


def _c5(key: str) -> Claim:
    where, sentence, paper = C5_TEXT[key]
    return Claim(
        f"C5.{key}",
        f"{GODFREY}, appendix D.8, {where}",
        sentence,
        f"{ARCHITECTURES[key][2]}, per variant, over pairs: the diagonal's decay along depth (a least-squares "
        "line, first site to last) of G_ReLU-CKA above 0 and above plain linear CKA's (decides); the "
        "channel-normalised linear CKA of the released code reported beside it",
        paper,
        ("similarity",),
        "similarity_cka.png",
        functools.partial(cka_decay, key),
        ("select_on",),
        ("zoo", "similarity"),
    )


CLAIMS = (
    *(_c4(key) for key in ARCHITECTURES),
    *(_c5(key) for key in ARCHITECTURES),
    Claim(
        "C8",
        f"{GODFREY}, appendix D.8, Table 4",
        CONSTANT_WIDTH,
        "constant-width Myrtle, per variant, over pairs: at act3 (layer 10) G_ReLU-Procrustes above "
        "orthogonal Procrustes (paired within the pair), as Table 4 prints",
        _printed(TABLE_4_PROCRUSTES, TABLE_4_PAIRS, "Table 4") + " (layer 10 = act3)",
        ("similarity",),
        "similarity_procrustes.png",
        table_4,
        ("select_on",),
        ("zoo", "similarity"),
    ),
    Claim(
        "C9",
        f"{GODFREY}, section 5, Table 2, Fig. 1",
        '"This correlates with the stitching penalties of fig. 1, which increase with depth only to decrease '
        'in the last layer." (section 5)',
        "Myrtle, per variant: G_ReLU-Procrustes falls to the penultimate shared site and rises at the last "
        "(over similarity pairs), and the G_ReLU stitching penalty rises to it and falls at the last (over "
        "stitching pairs): mirrored shapes; the correlation of the site means reported, not judged",
        _printed(TABLE_2_PROCRUSTES, TABLE_2_PAIRS, "Table 2")
        + "; Fig. 1 (32 pairs): values not in the text",
        ("similarity", "stitching"),
        "similarity_procrustes.png",
        fig1_mirror,
        ("select_on",),
        ("zoo", "similarity", "stitching"),
    ),
)

#: Per table, its column of evidence (a NaN there is a failed measurement, no evidence).
EVIDENCE = {"similarity": "value"}

#: The run's settings its claims and modes read (``SimilarityPlan.similarity_claims_settings``).
SETTINGS = ("relu_similarity_variants", "similarity_inside_residual")
