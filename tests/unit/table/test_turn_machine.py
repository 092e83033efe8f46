"""A turn's state machine held to its table and its drawing.

``chatstream.table.turns.TRANSITIONS`` is the truth: every transition is driven against moto from every state a
turn item can be in (each status, claimed or not, expired or not, and no item at all), and must change the turn
exactly from the states its row allows, to a status its row names, and leave it untouched otherwise. ARCHITECTURE.md
("A turn's lifecycle") must draw and tabulate the same transitions, and no code outside ``turns.py`` may write a
turn's status.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError

from chatstream.errors import ChatstreamError
from chatstream.records import ErrorInfo, TokenRecord, Usage
from chatstream.status import StopReason, TurnStatus
from chatstream.table.dynamodb import deser, ser
from chatstream.table.turns import (
    ANY_STATUS,
    START_FIRST,
    START_NEXT,
    TRANSITIONS,
    Transition,
    Trigger,
    Turns,
    condition,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from chatstream.table import ChatTable

ROOT = Path(__file__).resolve().parents[3]
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
TABLE_PACKAGE = ROOT / "layers" / "chatstream" / "chatstream" / "table"
OWNER = "caller-a"
NOW_MS = 1_700_000_000_000
NOW_S = NOW_MS // 1000
BY_NAME = {transition.name: transition for transition in TRANSITIONS}


# ------------------------------------------------------------------------------------------ the walk


@dataclass(frozen=True)
class State:
    """What a turn item can be, as far as a transition's condition looks: its status (None: there is no item),
    whether a generation has claimed it, whether it has expired."""

    status: TurnStatus | None
    claimed: bool = False
    expired: bool = False

    def __str__(self) -> str:
        if self.status is None:
            return "no turn"
        return ", ".join([self.status.value] + ["claimed"] * self.claimed + ["expired"] * self.expired)


BOTH = (False, True)
STATES = (
    State(None),
    *(State(status, claimed, expired) for status in TurnStatus for claimed in BOTH for expired in BOTH),
)


def allowed(transition: Transition, state: State) -> bool:
    """Whether the table lets ``transition`` act on a turn in ``state``."""
    if state.status is None:
        return not transition.sources
    return (
        state.status in transition.sources
        and not (transition.unclaimed and state.claimed)
        and not (transition.unexpired and state.expired)
    )


def stop(session_id: str, reason: StopReason) -> TokenRecord:
    return TokenRecord.stop(session_id, 1, 2, reason, Usage(1, 1), NOW_MS)


def failure(session_id: str, code: str) -> TokenRecord:
    return TokenRecord.failure(session_id, 1, 2, ErrorInfo(code, "it failed", True), NOW_MS)


# How each transition is made, and the status it must reach (None: its only one). A transition added to the table
# needs its driver here (test_every_transition_is_driven).
DRIVERS: dict[str, list[tuple[str, Callable[[Turns, str], object], TurnStatus | None]]] = {
    "start_first": [("", lambda turns, sid: turns.start_first(OWNER, "hello", session_id=sid), None)],
    "start_next": [("", lambda turns, sid: turns.start_next(sid, OWNER, "hello"), None)],
    "claim": [("", lambda turns, sid: turns.claim(sid, 1, "request-1"), None)],
    "request_cancel": [("", lambda turns, sid: turns.request_cancel(sid, 1), None)],
    "cancel_unclaimed": [
        ("", lambda turns, sid: turns.cancel_unclaimed(stop(sid, StopReason.CANCELLED)), TurnStatus.CANCELLED)
    ],
    "end_unclaimed": [("", lambda turns, sid: turns.end_unclaimed(failure(sid, "timeout")), TurnStatus.ERROR)],
    "end_from_stream": [
        ("stop", lambda turns, sid: turns.end_from_stream(stop(sid, StopReason.END_TURN), "Hi"), TurnStatus.COMPLETE),
        (
            "cancelled",
            lambda turns, sid: turns.end_from_stream(stop(sid, StopReason.CANCELLED), "H"),
            TurnStatus.CANCELLED,
        ),
        ("error", lambda turns, sid: turns.end_from_stream(failure(sid, "throttled"), "H"), TurnStatus.ERROR),
    ],
    "end_presumed_lost": [
        ("", lambda turns, sid: turns.end_presumed_lost(failure(sid, "generation_failed")), TurnStatus.ERROR)
    ],
    "end_stale": [("", lambda turns, sid: turns.end_stale(sid, 1, NOW_MS), TurnStatus.ERROR)],
}


def given(table: ChatTable, transition: Transition, state: State, session_id: str) -> None:
    """A session whose turn 1 is in ``state``: the session holds it as its active turn, but for a start (none for
    ``start_first``, one that has taken no turn yet for ``start_next``)."""
    if transition is not START_FIRST:
        session: dict[str, Any] = {
            "pk": f"S#{session_id}",
            "sk": "SESSION",
            "owner": OWNER,
            "turn_count": 0 if transition is START_NEXT else 1,
            "created_at": NOW_MS - 60_000,
            "expires_at": NOW_S + 86_400,
        }
        if transition is not START_NEXT:
            session.update(active_turn=1, active_since=NOW_MS - 60_000)
        table.client.put_item(TableName=table.table_name, Item=ser(session))
    if state.status is None:
        return
    item: dict[str, Any] = {
        "pk": f"S#{session_id}",
        "sk": "T#000001",
        "turn": 1,
        "user": "hello",
        "status": state.status,
        "cancel_requested": False,
        "created_at": NOW_MS - 60_000,
        "updated_at": NOW_MS - 60_000,
        "expires_at": NOW_S - 1 if state.expired else NOW_S + 86_400,
    }
    if state.claimed:
        item["generator"] = "request-0"
    table.client.put_item(TableName=table.table_name, Item=ser(item))


def partition(table: ChatTable, session_id: str) -> dict[str, dict[str, Any]]:
    """The session's items as stored (expired ones too), by sort key."""
    page = table.client.query(
        TableName=table.table_name,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues=ser({":pk": f"S#{session_id}"}),
        ConsistentRead=True,
    )
    return {str(item["sk"]): item for item in map(deser, page["Items"])}


WALKS = [
    pytest.param(name, driver, reaches, id=f"{name}-{label}" if label else name)
    for name, drivers in DRIVERS.items()
    for label, driver, reaches in drivers
]


@pytest.mark.parametrize(("name", "driver", "reaches"), WALKS)
def test_a_transition_acts_exactly_from_its_from_states(
    chat_table: ChatTable, name: str, driver: Callable[[Turns, str], object], reaches: TurnStatus | None
) -> None:
    transition = BY_NAME[name]
    chat_table.now_ms = lambda: NOW_MS
    for number, state in enumerate(STATES):
        # GIVEN a turn in one state
        session_id = f"walk-{number:02d}"
        given(chat_table, transition, state, session_id)
        before = partition(chat_table, session_id)
        # WHEN the transition is made on it
        try:
            result = driver(chat_table.turns, session_id)
        except (ChatstreamError, ClientError) as err:
            result = err
        after = partition(chat_table, session_id)
        turn = after.get("T#000001")
        changed = turn != before.get("T#000001")
        # THEN the turn changed exactly when the table allows it, to a status the table names; otherwise not at all
        assert changed == allowed(transition, state), f"{name} from {state}: changed={changed}, result={result!r}"
        if changed:
            assert turn is not None and not isinstance(result, Exception), f"{name} from {state}: {result!r}"
            assert turn["status"] in transition.dests and turn["status"] == (reaches or turn["status"])
        else:
            assert result is False or result is None or isinstance(result, Exception), f"{name} from {state}"
        if isinstance(result, bool):
            assert result == changed, f"{name} from {state}: returned {result}"
        # AND the session is freed by an ending that frees it, once it ended the turn (an ending from the stream also
        # when the turn item is gone), and left alone by the other transitions but the starts
        if transition.sources and transition.frees_session:
            freed = "active_turn" not in after["SESSION"]
            assert freed == (changed or transition.sources == ANY_STATUS), f"{name} from {state}: freed={freed}"
        elif transition.sources:
            assert after["SESSION"] == before["SESSION"], f"{name} from {state} changed the session"


def test_a_transition_from_several_statuses_acts_from_each_of_them_only(chat_table: ChatTable) -> None:
    # GIVEN a transition allowed from two statuses (no transition of today's is: the condition is built for any)
    transition = Transition(
        "example", frozenset({TurnStatus.COMPLETE, TurnStatus.ERROR}), frozenset({TurnStatus.ERROR}), (Trigger.RELAY,)
    )
    expression, names, values = condition(transition, NOW_MS)
    for number, status in enumerate(TurnStatus):
        session_id = f"several-{number}"
        given(chat_table, START_NEXT, State(status), session_id)
        # WHEN a write on its condition is made on a turn in each status
        try:
            chat_table.client.update_item(
                TableName=chat_table.table_name,
                Key=ser({"pk": f"S#{session_id}", "sk": "T#000001"}),
                UpdateExpression="SET updated_at = :now",
                ConditionExpression=expression,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=ser({**values, ":now": NOW_MS}),
            )
            written = True
        except ClientError as err:
            assert err.response["Error"]["Code"] == "ConditionalCheckFailedException"
            written = False
        # THEN it is written exactly from those two
        assert written == (status in transition.sources), status


def test_every_transition_is_driven_and_is_a_method_of_turns() -> None:
    assert set(DRIVERS) == set(BY_NAME)
    for transition in TRANSITIONS:
        assert callable(getattr(Turns, transition.name, None)), transition.name


# ---------------------------------------------------------------------------------- the drawing


def lifecycle_section() -> str:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.index("### A turn's lifecycle\n")
    end = text.index("\n#", start + 1)
    return text[start:end]


def _statuses(cell: str) -> frozenset[TurnStatus]:
    return frozenset(TurnStatus(value) for value in re.findall(r"`(\w+)`", cell))


def documented_table() -> dict[str, tuple[object, ...]]:
    """The section's table: per transition, its from statuses, guards, to statuses, triggers and whether it frees
    the session."""
    rows = [line for line in lifecycle_section().splitlines() if line.startswith("| `")]
    table: dict[str, tuple[object, ...]] = {}
    for row in rows:
        name, sources, dests, by, frees, _what_for = (cell.strip() for cell in row.strip("|").split("|"))
        table[name.strip("`")] = (
            {"any": ANY_STATUS, "(no turn)": frozenset()}.get(sources, _statuses(sources)),
            "unclaimed" in sources,
            "unexpired" in sources,
            _statuses(dests),
            tuple(Trigger(who.strip()) for who in by.split(",")),
            {"yes": True, "no": False}[frees],
        )
    return table


def test_the_architecture_s_table_is_the_code_s() -> None:
    # GIVEN the table ARCHITECTURE.md shows THEN it is TRANSITIONS, row for row
    expected = {t.name: (t.sources, t.unclaimed, t.unexpired, t.dests, t.by, t.frees_session) for t in TRANSITIONS}
    assert documented_table() == expected


def test_the_diagram_draws_every_transition_from_and_to_its_statuses() -> None:
    # GIVEN the mermaid diagram: edges "from --> to: name (by, by); name (by)", with "ended" the composite of the
    # finished statuses and "[*]" no turn yet
    section = lifecycle_section()
    diagram = section[section.index("```mermaid\n") : section.index("```\n", section.index("```mermaid\n") + 3)]
    ended = frozenset(status.value for status in TurnStatus if status.finished)
    states: dict[str, frozenset[str]] = {"[*]": frozenset({"[*]"}), "ended": ended}
    drawn: dict[str, tuple[set[str], set[str], set[tuple[Trigger, ...]]]] = {}
    for line in diagram.splitlines():
        edge = re.fullmatch(r"\s*(\S+) --> (\S+): (.+)", line)
        if edge is None:
            continue
        source, dest, label = edge.groups()
        for part in label.split(";"):
            named = re.fullmatch(r"\s*(\w+) \(([\w, ]+)\)\s*", part)
            assert named is not None, f"an edge's label names a transition and who makes it: {part!r}"
            sources, dests, by = drawn.setdefault(named[1], (set(), set(), set()))
            sources |= states.get(source, {source})
            dests |= states.get(dest, {dest})
            by.add(tuple(Trigger(who.strip()) for who in named[2].split(",")))
    # THEN it draws every transition, each from exactly its from statuses to its to statuses, by who makes it
    expected = {
        t.name: ({s.value for s in t.sources} or {"[*]"}, {s.value for s in t.dests}, {t.by}) for t in TRANSITIONS
    }
    assert drawn == expected


# ------------------------------------------------------------------------------- no other writer


DYNAMODB_WRITES = frozenset(
    {
        "put_item",
        "update_item",
        "delete_item",
        "batch_write_item",
        "transact_write_items",
        "execute_statement",
        "batch_execute_statement",
        "execute_transaction",
    }
)
PRODUCT = ("layers", "functions", "local", "bench", "chaos", "client")
# The local stack's patches of moto's own DynamoDB backend (its put_item, update_item...): moto's code, not a writer
# of the table.
MOTO_BACKEND = ROOT / "local" / "chatstream_local" / "moto"


def product_modules() -> list[Path]:
    return sorted(
        path
        for top in PRODUCT
        for path in (ROOT / top).rglob("*.py")
        if MOTO_BACKEND not in path.parents and "node_modules" not in path.parts
    )


def code_strings(tree: ast.AST) -> list[str]:
    """Every string constant of a module but its docstrings."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_only_the_table_package_writes_to_dynamodb() -> None:
    # GIVEN every module of the product WHEN it is read THEN only the table package names DynamoDB's writes (a client's
    # method, called or handed to the call that translates its errors)
    writers = {
        path.relative_to(ROOT).as_posix()
        for path in product_modules()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and node.attr in DYNAMODB_WRITES
    }
    assert writers and all(writer.startswith("layers/chatstream/chatstream/table/") for writer in writers), writers


def test_in_the_table_package_only_the_turn_module_names_a_turn_s_status() -> None:
    # GIVEN the table package's modules WHEN their code (not their docstrings) is read
    # THEN only turns.py names the status attribute or the statuses: no other part can write them
    naming = {
        path.name
        for path in TABLE_PACKAGE.glob("*.py")
        for tree in [ast.parse(path.read_text(encoding="utf-8"))]
        if any(re.search(r"\bstatus\b", text) for text in code_strings(tree))
        or any(isinstance(node, ast.Name) and node.id == "TurnStatus" for node in ast.walk(tree))
    }
    assert naming == {"turns.py"}
