"""The documentation: the README and docs/ link only to what exists, the configuration reference is
the schema's (generated, never written twice), and the site builds with no warning."""

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import chromium
import pytest

from intertwine.workflow import doc_numbers
from intertwine.workflow.config import reference_markdown
from intertwine.workflow.scorecard_page import SCORECARD_BLOCK, refresh_docs

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's (and Python-Markdown's, for these headings) anchor of a heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(m) for m in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def broken_links(page: Path) -> list[str]:
    """The relative links of ``page`` whose file or heading does not exist."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # an external address
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() or (anchor and file.suffix == ".md" and anchor not in _anchors(file)):
            broken.append(target)
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_resolve(page):
    assert not broken_links(page), f"{page.relative_to(REPO)}: links to nothing: {broken_links(page)}"


def test_the_link_check_sees_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# Its Heading: one\n")
    page.write_text(
        "# A heading\n\n[ok](#a-heading) [ok](there.md#its-heading-one) [gone](missing.md) "
        "[no anchor](#elsewhere) [no anchor there](there.md#two) [web](https://example.org)\n"
    )
    assert broken_links(page) == ["missing.md", "#elsewhere", "there.md#two"]


def test_config_reference_is_the_schemas():
    page = (REPO / "docs" / "config-reference.md").read_text()
    assert page == reference_markdown(), (
        "regenerate: python -m intertwine.workflow.config > docs/config-reference.md"
    )


def test_config_reference_lists_every_key():
    page = reference_markdown()
    for key in (
        "zoo.training.epochs",
        "stitching.permutation_update",
        "pullback.temperature",
        "cluster.margin",
    ):
        assert f"| `{key}` |" in page


def test_scorecard_tables_are_the_runs():
    """Every scorecard table in the docs is generated from the ``claims.csv`` its marker names (a
    run's, kept in docs/results/), and every table block from its CSV, never typed: numbers in
    prose cannot drift from the run."""
    blocks = {page.name: SCORECARD_BLOCK.findall(page.read_text()) for page in PAGES}
    assert blocks["results.md"] and blocks["scorecard.md"], "the docs lost their generated scorecards"
    for page in PAGES:
        text = page.read_text()
        assert refresh_docs(text, REPO) == text, (
            f"{page.name}: a scorecard or table block differs from its run's CSV; regenerate it with "
            f"python -m intertwine.workflow.scorecard_page {page.relative_to(REPO)}"
        )


def test_a_table_block_is_its_csv(tmp_path):
    (tmp_path / "t.csv").write_text('variant,measure,value\nmyrtle,"a, b",0.123456\nresnet20,c|d,\n')
    page = "before\n<!-- table: t.csv -->\n| typed |\n<!-- /table -->\nafter\n"
    assert refresh_docs(page, tmp_path) == (
        "before\n<!-- table: t.csv -->\n| variant | measure | value |\n| --- | --- | --- |\n"
        "| myrtle | a, b | 0.1235 |\n| resnet20 | c\\|d | - |\n<!-- /table -->\nafter\n"
    )


def test_the_scorecard_block_check_sees_a_typed_number(tmp_path):
    page = (
        "<!-- scorecard: docs/results/godfrey_cifar10_claims.csv -->\n| C1 | typed |\n<!-- /scorecard -->\n"
    )
    assert refresh_docs(page, REPO) != page


def test_numbers_about_the_configs_are_the_configs():
    """Variants, members, seeds and epochs the docs state are computed from the config they name
    (the job counts are checked against the dry runs of tests/test_workflow.py)."""
    stated = doc_numbers.stated(PAGES)
    assert {"paper.members", "paper.variants", "config.seeds", "paper.jobs"} <= set(stated)
    for name, texts in stated.items():
        if not name.endswith(".jobs"):
            assert texts == {doc_numbers.value(name)}, (
                f"{name} is stated as {sorted(texts)} but is {doc_numbers.value(name)}: regenerate with "
                "python -m intertwine.workflow.doc_numbers README.md docs/*.md"
            )


def test_the_number_check_sees_a_typed_number():
    page = "(<!-- number: paper.members -->1,800<!-- /number --> members)"
    refreshed = doc_numbers.refresh(page, {"paper.members": doc_numbers.value("paper.members")})
    assert refreshed != page and doc_numbers.names(refreshed) == ["paper.members"]
    with pytest.raises(ValueError, match="config 'nonesuch'"):
        doc_numbers.value("nonesuch.members")
    with pytest.raises(ValueError, match="<config>.<quantity>"):
        doc_numbers.value("paper.width")


def test_readme_is_short():
    # Issue 38: one or two screens; the rest lives in docs/.
    assert len((REPO / "README.md").read_text().splitlines()) <= 100


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The documentation site, built as `make docs` builds it (strict: a warning fails)."""
    site = tmp_path_factory.mktemp("docs") / "site"
    mkdocs = Path(sys.executable).with_name("mkdocs")
    built = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    return site


def test_site_builds_strict(site):
    api = (site / "api" / "index.html").read_text()
    for name in (
        "intertwine.measures.grelu_cka",
        "intertwine.compare.compare_models",
        "intertwine.kernels.npk.npk_fc",
    ):
        assert f'id="{name}"' in api, f"the API reference lacks {name}"


def test_every_stage_has_its_page():
    """A page per stage (its rule file's name) under docs/stages/, in the site's navigation, whose
    figure of the default run exists."""
    rules = {p.stem for p in (REPO / "workflow" / "rules").glob("*.smk")} - {"common", "figures"}
    pages = {p.stem for p in (REPO / "docs" / "stages").glob("*.md")}
    assert rules <= pages, sorted(rules - pages)
    nav = (REPO / "mkdocs.yml").read_text()
    for page in sorted(pages):
        assert f"stages/{page}.md" in nav, page
        text = (REPO / "docs" / "stages" / f"{page}.md").read_text()
        for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
            assert (REPO / "docs" / "stages" / image).stat().st_size > 1000, (page, image)


# What a page shows once Chromium has drawn it: its heading, how much text, whether each image
# loaded, where each link goes, which anchors it has, and anything it asked of the network.
_PAGE = """
const external = [...document.querySelectorAll("script[src], link[href], img[src]")]
    .map((e) => e.src || e.href).filter((u) => /^https?:/.test(u));
return {
    h1: (document.querySelector("h1") || {}).textContent || "",
    text: document.body.innerText.length,
    broken_images: [...document.images].filter((i) => !(i.complete && i.naturalWidth > 0)).map((i) => i.src),
    links: [...document.querySelectorAll("a[href]")].map((a) => a.getAttribute("href")),
    ids: [...document.querySelectorAll("[id]")].map((e) => e.id),
    external: external,
};
"""


def test_site_in_chromium(site):
    """Issue 38, item 2: every page of the site renders in headless Chromium (a heading, its text,
    every image loaded, nothing fetched from the network) and no internal link is broken: each
    goes to a file of the site and, with an anchor, to an element of that page with that id."""
    pages = sorted(site.rglob("*.html"))
    pages = [p for p in pages if p.parent.name != "search" and p.name != "404.html"]
    assert len(pages) >= len(re.findall(r"\.md\b", (REPO / "mkdocs.yml").read_text()))
    with ThreadPoolExecutor(4) as pool:  # each page mostly waits on its own browser
        seen = dict(zip(pages, pool.map(lambda page: chromium.measure(page, _PAGE), pages)))
    broken = []
    for page, shown in seen.items():
        name = page.relative_to(site)
        assert shown["h1"].strip(), f"{name} has no heading"
        assert shown["text"] > 300, f"{name} shows almost no text"
        assert not shown["broken_images"], (name, shown["broken_images"])
        assert not shown["external"], (name, shown["external"])
        for href in shown["links"]:
            link = urljoin(page.as_uri(), href)
            if not link.startswith("file:"):
                continue  # an address outside the site, not ours to check offline
            address, _, anchor = link.partition("#")
            target = Path(unquote(urlparse(address).path))
            if target.is_dir():
                target = target / "index.html"
            if site not in target.parents:
                broken.append((str(name), link))
            elif not target.exists():
                broken.append((str(name), link))
            elif anchor and target in seen and unquote(anchor) not in seen[target]["ids"]:
                broken.append((str(name), link))
    assert not broken, broken


def test_no_file_points_outside_the_repository():
    """Every file the project tracks names only what a clone holds: no folder beside the clone, and
    none of the summaries the project was first specified from (the pattern is assembled so that
    this file does not match itself)."""
    outside = re.compile(r"\.\./" + "shared" + r"|\b(?:PAPER|SEEDS)" + r"\.md\b")
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True)
    found = []
    for name in tracked.stdout.split():
        path = REPO / name
        if path.suffix in {".png", ".pdf", ".svg", ".pt", ".parquet", ".npz"} or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        found += [f"{name}: {m[0]}" for m in outside.finditer(text)]
    assert not found, "files naming what is outside the repository:\n" + "\n".join(found)
