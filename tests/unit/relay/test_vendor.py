"""The page's vendored code is the published file its README names, with its licences beside it."""

from __future__ import annotations

import hashlib
import re

from chatstream.relay.page import STATIC_DIR

VENDOR = STATIC_DIR / "vendor"
README = VENDOR / "README.md"
# A row of the README's table: | `file` | what | version | source | `sha256` |
ROW = re.compile(
    r"^\| `(?P<file>[^`]+)` \|[^|]+\| (?P<version>[0-9][^ |]*) \| (?P<source>[^|]+) \| `(?P<sha256>[0-9a-f]{64})` \|$"
)


def vendored() -> dict[str, re.Match[str]]:
    rows = (ROW.match(line) for line in README.read_text(encoding="utf-8").splitlines())
    return {row["file"]: row for row in rows if row}


def test_every_vendored_file_matches_the_checksum_its_readme_gives() -> None:
    # GIVEN the README's table of vendored files
    rows = vendored()
    assert set(rows) == {"markdown-it.umd.min.js", "oauth4webapi.js"}
    for name, row in rows.items():
        # WHEN each file's bytes are hashed THEN they are the published file the README names
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == row["sha256"], name
        assert f"{name.split('.')[0]}@{row['version']}" in row["source"], name


def test_every_file_in_vendor_is_accounted_for() -> None:
    # GIVEN the vendor folder THEN it holds the listed files, their licences and the README, nothing unlisted
    listed = set(vendored())
    assert {path.name for path in VENDOR.iterdir()} == listed | {
        "README.md",
        "LICENSE",
        "LICENSE-bundled",
        "LICENSE-oauth4webapi",
    }


def test_the_licences_of_markdown_it_and_what_its_build_bundles_are_kept() -> None:
    # GIVEN markdown-it's licence and the bundled packages' licences
    licence = (VENDOR / "LICENSE").read_text(encoding="utf-8")
    bundled = (VENDOR / "LICENSE-bundled").read_text(encoding="utf-8")
    # THEN markdown-it's is its MIT licence, and each package its build bundles has its own licence text
    assert "Vitaly Puzrin, Alex Kocharin" in licence and "Permission is hereby granted" in licence
    for package in (
        "mdurl 2.1.0 (MIT)",
        "uc.micro 3.0.0 (MIT)",
        "entities 8.1.0 (BSD-2-Clause)",
        "linkify-it 6.1.0 (MIT)",
        "punycode.js 2.3.1 (MIT)",
    ):
        assert package in bundled, package
    assert "Copyright (c) Felix Böhm" in bundled and "Copyright Mathias Bynens" in bundled


def test_oauth4webapi_s_licence_is_kept() -> None:
    licence = (VENDOR / "LICENSE-oauth4webapi").read_text(encoding="utf-8")
    assert "Filip Skokan" in licence and "Permission is hereby granted" in licence
