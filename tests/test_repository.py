"""The house rules of the tree a newcomer reads (docs/reliability.md): short documents, a README
for users whose figures come from result files in the tree, and a ``perf/results/`` that holds
only what is cited, no lab records."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: The most lines a document under docs/ may have (its history goes to docs/history/, condensed).
DOC_LINES = 1000
#: The most lines the README may have.
README_LINES = 150
#: The most bytes perf/results/ may hold.
RESULTS_BYTES = 3 * 1024 * 1024


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


@pytest.mark.parametrize("doc", sorted((ROOT / "docs").rglob("*.md")), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_document_is_longer_than_the_limit(doc):
    assert _lines(doc) <= DOC_LINES, f"{doc.relative_to(ROOT)} has {_lines(doc)} lines, more than {DOC_LINES}"


def test_the_readme_is_short_and_its_result_files_are_in_the_tree():
    readme = ROOT / "README.md"
    assert _lines(readme) <= README_LINES, f"README.md has {_lines(readme)} lines, more than {README_LINES}"
    cited = re.findall(r"perf/results/[\w.-]+\.json", readme.read_text(encoding="utf-8"))
    assert cited, "the README names no result file for its figures"
    missing = [name for name in cited if not (ROOT / name).is_file()]
    assert not missing, f"the README cites result files that are not in the tree: {missing}"


def test_perf_results_holds_cited_files_only_flat_and_small():
    results = ROOT / "perf" / "results"
    entries = list(results.iterdir())
    folders = [p.name for p in entries if p.is_dir() and p.name != "__pycache__"]
    assert not folders, f"perf/results/ holds folders (per-run records belong in a scratch folder): {folders}"
    size = sum(p.stat().st_size for p in entries if p.is_file())
    assert size <= RESULTS_BYTES, f"perf/results/ holds {size} bytes, more than {RESULTS_BYTES}"


def test_no_patch_files_in_the_tree():
    patches = [str(p.relative_to(ROOT)) for top in ("sgblas", "perf", "docs", "tests") for p in (ROOT / top).rglob("*")
               if p.suffix in (".patch", ".diff")]
    assert not patches, f"lab patches belong in a scratch folder, not the tree: {patches}"
