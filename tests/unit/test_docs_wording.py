"""The repository describes the software and its measurements, dated by date or commit; it never speaks of how it was
made: of work sessions (a chat's session is the product's own word, and fine), issue numbers, who read it over,
rounds of work, what someone asked for, or paths of the machine it was written on.

Every Markdown file is read whole; code is read where it speaks to a reader: Python's comments and docstrings, the
comments of JavaScript, shell and Make files, and the template (its descriptions are documentation).
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SKIPPED_FOLDERS = {"node_modules", "__pycache__", "vendor"}  # installed packages, third-party code as published

# Each pattern names one way of speaking of the work instead of the software. A chat's session stays free: only the
# phrases a chat never uses are refused (a session some time ago, the one before the last, what one changed or ran).
PATTERNS = {
    "an issue number": r"\bissues?\s*#?\d+",
    "the issue": r"\bthe issue(?:'s)?(?!\w)",
    "an issue reference (#N)": r"(?<![\w/.\-&])#\d+\b(?![\w-])",
    "a reviewer": r"\breview(?:er|ers|ed)\b|\buser's-eye review\b",
    "a work session": (
        r"\bsessions?\s+ago\b|\b(?:last|previous|earlier)\s+session\b|\bthe session before(?:\s+last)?\b"
        r"|\bsession(?:'s)?\s+(?:final\s+)?code\b"
        r"|\bth(?:is|at|e)\s+session(?:'s)?\s+(?:run|runs|changes?|changed|measured|found|wrote|fixed|added|work)\b"
    ),
    "a round of work": r"\b(?:this|that|last|next|previous|earlier)\s+rounds?\b|\bearlier rounds\b|\bround's start\b"
    r"|\bstart of (?:the|this) round\b",
    "what someone asked": r"\ba third asked\b|\bas (?:the issue|a reviewer|the lead) asks?\b",
    "last time": r"\blast time\b",
    "the lead": r"\bthe lead\b",
    "this machine's paths": r"/work/|farm-studio",
}
COMPILED = {name: re.compile(pattern, re.IGNORECASE) for name, pattern in PATTERNS.items()}


def _walk() -> list[Path]:
    """Every file of the repository, but in dot folders (virtual environments, the build, caches; ``.ci`` is read)
    and :data:`SKIPPED_FOLDERS`."""
    paths: list[Path] = []
    for folder, subfolders, files in os.walk(REPO_ROOT):
        subfolders[:] = [
            name for name in subfolders if (name == ".ci" or not name.startswith(".")) and name not in SKIPPED_FOLDERS
        ]
        paths += [Path(folder) / name for name in files]
    return sorted(paths)


def _files(suffixes: tuple[str, ...], names: tuple[str, ...] = ()) -> list[Path]:
    return [path for path in _walk() if path.suffix in suffixes or path.name in names]


def _python_prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of each comment and docstring of a Python module."""
    prose = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                value = body[0].value.value
                if isinstance(value, str):
                    prose.append((body[0].lineno, value))
    return prose


def _line_comments(source: str, marker: str) -> list[tuple[int, str]]:
    """(line, text) of what follows ``marker`` on each line (a rough cut: a marker inside a string counts too)."""
    return [(number, line.split(marker, 1)[1]) for number, line in enumerate(source.splitlines(), 1) if marker in line]


def _js_prose(source: str) -> list[tuple[int, str]]:
    prose = _line_comments(source, "//")
    for match in re.finditer(r"/\*.*?\*/", source, re.DOTALL):
        prose.append((source.count("\n", 0, match.start()) + 1, match.group()))
    return prose


def _whole(source: str) -> list[tuple[int, str]]:
    """(line, text) of each line together with the next, so a phrase wrapped over two lines is read whole."""
    lines = source.splitlines()
    return [(number, " ".join(lines[number - 1 : number + 1])) for number in range(1, len(lines) + 1)]


def prose_of_the_repository() -> list[tuple[Path, int, str]]:
    """Every piece of the repository's prose a reader meets, with where it is."""
    readers = [
        (_files((".md",)), _whole),
        (_files((".py",)), _python_prose),
        (_files((".js", ".mjs", ".css")), _js_prose),
        (_files((".mk", ".sh", ".toml", ".cfg", ".txt"), ("Makefile", "run")), lambda s: _line_comments(s, "#")),
        ([REPO_ROOT / "template.yaml"], _whole),
    ]
    found = []
    for paths, read in readers:
        for path in paths:
            for line, text in read(path.read_text(encoding="utf-8")):
                found.append((path, line, text))
    return found


def findings(prose: list[tuple[Path, int, str]]) -> list[str]:
    return [
        f"{path.relative_to(REPO_ROOT)}:{line}: {name}: {match.group()!r}"
        for path, line, text in prose
        for name, pattern in COMPILED.items()
        for match in pattern.finditer(text)
    ]


def test_no_document_or_comment_speaks_of_how_the_software_was_made() -> None:
    # GIVEN every Markdown file, and the comments and docstrings of the code
    prose = prose_of_the_repository()
    assert any(path.name == "README.md" for path, _, _ in prose)
    assert any(path.suffix == ".py" for path, _, _ in prose)
    # THEN none speaks of work sessions, issue numbers, who read it over, rounds, or this machine's paths
    assert findings(prose) == []


def test_the_patterns_find_what_they_are_for_and_leave_a_chat_session_alone() -> None:
    here = REPO_ROOT / "README.md"
    said = [
        "a run two sessions ago read +53 ms",
        "in the last session's runs",
        "this session changed no import",
        "the session before last read 148 ms",
        "beside the issue's cells",
        _whole("the code of this\nround's work")[0][1],  # a phrase wrapped over two lines
        '"a few hundred" as issue 7 asks',
        "(chat 7 of issue 14)",
        "fixed in #12",
        "(a third asked)",
        "At the start of this round the table read",
        "reported by a reviewer",
        "see /work/main/README.md",
    ]
    fine = [
        "the session's next turn",
        "continue this session id",
        "this session's history is too long for the model: start a new session",
        "a session that is full (409 turn_limit) is left",
        "the issuer's keys",
        "brefphp/bref#1250 and aws/aws-lambda-base-images#147",
        "`T#000003` and `[RelayFunction#3]`",
        "what the request asked for",
        "three rounds of 10 chats",
    ]
    # THEN each phrase of the work is found, and no phrase about a chat or the software is
    assert all(findings([(here, 1, text)]) for text in said), [t for t in said if not findings([(here, 1, t)])]
    assert findings([(here, 1, text) for text in fine]) == []
