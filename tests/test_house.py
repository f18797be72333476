"""The house rules a review would otherwise have to catch: a product module holds one concept in
at most 400 lines (the README's Development section); the README stays a front page."""

from __future__ import annotations

import re

from tests.product import PRODUCT, ROOT

MODULE_LINES_MAX = 400


def test_no_product_module_is_over_400_lines() -> None:
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for package in PRODUCT
        for path in (ROOT / package).rglob("*.py")
    }
    assert len(sizes) > 100  # the packages were found
    assert {path: lines for path, lines in sizes.items() if lines > MODULE_LINES_MAX} == {}


def test_every_product_folder_of_modules_is_a_package() -> None:
    """A folder of modules without `__init__.py` is a namespace package: setuptools leaves it
    out of the wheel and a zip import (the Spark job's executors) does not find it."""
    folders = {
        path.parent.relative_to(ROOT).as_posix()
        for package in PRODUCT
        for path in (ROOT / package).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert len(folders) > 10
    assert sorted(f for f in folders if not (ROOT / f / "__init__.py").exists()) == []


def test_the_readme_stays_a_front_page() -> None:
    """What hifi is, the chain, the quickstart, the keys most used and a table of `docs/`, in at
    most 150 lines; every document it links exists."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    linked = set(re.findall(r"\]\((docs/[^)#]+)", text))
    assert {"docs/cli.md", "docs/operations.md", "docs/performance.md"} <= linked
    assert sorted(path for path in linked if not (ROOT / path).exists()) == []


def test_performance_md_holds_the_current_figures_only() -> None:
    """The current figures, how to reproduce each and what limits them, in at most 250 lines;
    the dated runs belong in `performance-history.md`."""
    assert len((ROOT / "docs" / "performance.md").read_text().splitlines()) <= 250


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


def test_links_between_documents_reach_their_headings() -> None:
    """Every `[..](doc.md#anchor)` in the README and `docs/` names a file that exists and, with an
    anchor, one of its headings: moving a section cannot leave a dead link behind."""
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for document in documents:
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md)?#?([\w-]*)\)", document.read_text()):
            path = (document.parent / target) if target else document
            if not path.exists():
                broken.append(f"{document.name}: {target}")
                continue
            headings = re.findall(r"^#+ (.+)$", path.read_text(), flags=re.MULTILINE)
            if anchor and anchor not in {_slug(heading) for heading in headings}:
                broken.append(f"{document.name}: {target}#{anchor}")
    assert broken == []
