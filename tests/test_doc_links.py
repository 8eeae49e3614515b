"""Every relative link in the repository's documents resolves from a checkout: the file it
names exists, and the heading it points at (``#anchor``) is one of that file's headings, in
GitHub's anchor form. The wheel test (tests/e2e/test_fresh_machine.py) follows the shipped
runbooks' links in the installed package; this holds every document, at once, on every run."""

from __future__ import annotations

import re
from pathlib import Path

from support import ROOT

DOCS = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md"),
               *(ROOT / "runbooks").glob("*.md"), ROOT / "bench" / "README.md"])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def anchors(md: Path) -> set[str]:
    """GitHub's anchors for a file's headings: lower case, punctuation other than ``-`` and
    ``_`` dropped, spaces to ``-``; a repeated heading gets ``-1``, ``-2``..."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in FENCE.sub("", md.read_text()).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(md: Path) -> list[str]:
    return [t for t in LINK.findall(FENCE.sub("", md.read_text()))
            if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]          # http:, https:, mailto:, file:


def test_the_documents_are_there():
    assert len(DOCS) >= 15 and all(d.is_file() for d in DOCS)
    assert sum(len(links(d)) for d in DOCS) > 20


def broken(docs: list[Path], root: Path) -> list[str]:
    out = []
    for doc in docs:
        for target in links(doc):
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.exists():
                out.append(f"{doc.relative_to(root)}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                out.append(f"{doc.relative_to(root)}: {target}: no heading #{anchor} in {dest.name}")
    return out


def test_every_relative_link_resolves_to_a_file_and_a_heading():
    bad = broken(DOCS, ROOT)
    assert not bad, "\n".join(bad)


def test_a_missing_file_or_heading_is_caught(tmp_path):
    (tmp_path / "a.md").write_text("# Top\n\n## Evidence first: `docs/` and **more**\n\n## Top\n\n"
                                   "```\n## not a heading\n[x](nowhere.md)\n```\n")
    (tmp_path / "b.md").write_text("[ok](a.md#evidence-first-docs-and-more) [ok](a.md#top-1) [web](https://x/y.md)\n"
                                   "[gone](c.md) [no heading](a.md#not-a-heading) [self](#top)\n")
    assert anchors(tmp_path / "a.md") == {"top", "evidence-first-docs-and-more", "top-1"}
    assert broken([tmp_path / "a.md", tmp_path / "b.md"], tmp_path) == [
        "b.md: c.md: no such file", "b.md: a.md#not-a-heading: no heading #not-a-heading in a.md",
        "b.md: #top: no heading #top in b.md"]
