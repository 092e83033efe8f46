"""Every relative link of the repository's Markdown resolves: to a file or folder that exists, and to a heading of that
file when it names an anchor (as GitHub renders both)."""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SKIPPED_FOLDERS = {"node_modules", "__pycache__"}
FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)
EXTERNAL = ("http://", "https://", "mailto:")


def markdown_files() -> list[Path]:
    found = []
    for folder, subfolders, files in os.walk(REPO_ROOT):
        subfolders[:] = [name for name in subfolders if not name.startswith(".") and name not in SKIPPED_FOLDERS]
        found += [Path(folder) / name for name in files if name.endswith(".md")]
    return sorted(found)


def _prose(text: str) -> str:
    """The text without its code blocks and code spans, where a bracket is no link."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its rendered text, lowercased, without punctuation, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    text = re.sub(r"[*]|(?<!\w)_|_(?!\w)", "", text)  # emphasis, not an underscore inside a word
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings (a repeated one gets -1, -2, … as on GitHub)."""
    seen: Counter[str] = Counter()
    found = set()
    for match in HEADING.finditer(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(match.group(1))
        found.add(base if not seen[base] else f"{base}-{seen[base]}")
        seen[base] += 1
    return found


def links(path: Path) -> list[str]:
    text = _prose(path.read_text(encoding="utf-8"))
    return [match.group(1) for pattern in (LINK, REFERENCE) for match in pattern.finditer(text)]


def broken(path: Path) -> list[str]:
    """The relative links of ``path`` that lead nowhere, each with why."""
    found = []
    for target in links(path):
        if target.startswith(EXTERNAL):
            continue
        name, _, anchor = target.partition("#")
        destination = (path.parent / name).resolve() if name else path
        if not destination.exists():
            found.append(f"{target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            found.append(f"{target}: no heading with that anchor")
    return found


@pytest.mark.parametrize("path", markdown_files(), ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    # GIVEN a Markdown file of the repository THEN each of its relative links leads to a file, and to a heading there
    assert broken(path) == []


def test_the_readme_and_the_docs_are_checked() -> None:
    checked = {str(path.relative_to(REPO_ROOT)) for path in markdown_files()}
    assert {"README.md", "docs/DEPLOY.md", "docs/HTTP_API.md", "bench/README.md", "client/README.md"} <= checked


def test_a_broken_link_and_a_missing_anchor_are_found(tmp_path: Path) -> None:
    # GIVEN a page with a good link, a link to no file, a link to no heading, and links that are code, not links
    (tmp_path / "other.md").write_text("# Other\n\n## `GET /x` — the thing, part 2\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](other.md#get-x--the-thing-part-2) [self](#page) [gone](nowhere.md) [no](other.md#absent)\n\n"
        "`[code](nowhere.md)`\n\n```\n[block](nowhere.md)\n```\n",
        encoding="utf-8",
    )
    # THEN exactly the two broken ones are found
    assert broken(page) == ["nowhere.md: no such file", "other.md#absent: no heading with that anchor"]


def test_slugs_are_githubs() -> None:
    assert slug("2. Choose the region and the model") == "2-choose-the-region-and-the-model"
    assert slug("9. Tear down: `make delete`") == "9-tear-down-make-delete"
    assert slug("`/v1` — OpenAI's API on the same turns") == "v1--openais-api-on-the-same-turns"
    assert slug("`GET /sessions/{session_id}/turns/{turn}/events` — attach or resume") == (
        "get-sessionssession_idturnsturnevents--attach-or-resume"
    )
    assert slug("Calling the relay with AWS_IAM") == "calling-the-relay-with-aws_iam"
