"""Every relative link in README.md and docs/ names an existing file and, for a Markdown
file, an existing heading (GitHub's anchors): moving figures between docs/benchmarks.md,
docs/history.md and docs/notes/ must not leave a link behind."""

from __future__ import annotations

import re
from pathlib import Path

from test_readme import _anchors

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _links(text: str) -> list[str]:
    text = re.sub(r"(?ms)^```.*?^```", "", text)  # code blocks
    text = re.sub(r"`[^`]*`", "", text)  # inline code: `Literal[int](32)` is no link
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_links_between_documents_resolve():
    broken = []
    for doc in DOCS:
        for link in _links(doc.read_text()):
            if re.match(r"[a-z][a-z0-9+.-]*:", link):
                continue  # http(s):, mailto:
            path, _, anchor = link.partition("#")
            target = (doc.parent / path).resolve() if path else doc
            if not target.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {link}: no such file")
            elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
                broken.append(f"{doc.relative_to(ROOT)}: {link}: no such heading in {target.name}")
    assert broken == [], "broken links:\n" + "\n".join(broken)


def test_the_checker_finds_a_broken_anchor(tmp_path):
    doc = tmp_path / "a.md"
    doc.write_text("# Title\n\nsee [x](#title), [y](#nowhere) and `[z](#code)`\n")
    assert _links(doc.read_text()) == ["#title", "#nowhere"]
    assert "title" in _anchors(doc) and "nowhere" not in _anchors(doc)
