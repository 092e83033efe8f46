"""An owner's budget: the limits it runs under, what it has used, the turns it has generating, and each turn's
reservation, settled once when the turn ends.

An owner is the sessions' owner (the relay's identity: an IAM principal, a JWT subject, or everyone together,
``anonymous``, under ``NONE``). Its items share the partition ``O#<owner>``:

=================  =========================  =========================================================================
item               sort key                   attributes
=================  =========================  =========================================================================
limits             ``LIMITS``                 the operator's overrides, each absent (the deployment's default) or a
                                              number (0: no limit): requests_per_minute, tokens_per_day, turns_at_once;
                                              version (new at every change), updated_at
requests           ``RPM#<epoch minute>``     n: the turns started in that minute (a fixed window); expires after it
tokens             ``TPD#<yyyy-mm-dd>``       tokens: those charged and reserved on that UTC day; held: the part still
                                              reserved by turns that have not ended; expires a day after it
turns at once      ``ACTIVE``                 turns: the string set of the owner's turns generating,
                                              ``<since ms>#<session>#<turn>``
idempotency key    ``K#<key>``                :mod:`chatstream.table.idempotency`
=================  =========================  =========================================================================

and a turn's reservation lives beside the turn, ``S#<session>`` / ``B#<turn:06d>`` (owner, day, reserved, charged,
held, entry, basis), so whoever ends the turn finds it by the turn's key alone.

**Admission.** :meth:`Budgets.plan` gives the writes a turn's start adds to its own transaction
(:meth:`~chatstream.table.turns.Turns._start`): a check that the owner's overrides are the ones this execution
environment knows (``LIMITS``: absent, or of the known ``version``), one more request in the minute's counter on
``n < limit``, the turn's ``max_tokens`` reserved in the day's on ``tokens <= limit - reserve`` (a condition cannot
add, so the subtraction is made here), the turn added to the set of those generating on ``size(turns) < limit``, its
reservation, and its idempotency key's record. DynamoDB applies all of them or none: a refused request writes
nothing. Which condition refused it comes back in the cancellation's reasons, in the order of the writes, each with
the item as it was (``ReturnValuesOnConditionCheckFailure``), which :meth:`Budgets.judge` reads: overrides this
environment did not know are learnt from the returned item and the start is made again (so they are never read on
the first token's path, and never stale); a set of turns that holds entries older than the stale-turn limit is
cleaned and the start made again once; a key already recorded is
:class:`~chatstream.table.idempotency.KeyInUse`; a limit is :class:`LimitExceeded` with a :class:`Refusal` that says
which and when to try again. A limit of 0 writes nothing for it.

**Settlement.** A turn ends through :meth:`~chatstream.table.turns.Turns._end`, which settles its reservation
(:meth:`Budgets.settle`) with a :class:`Charge`: the model's usage (input and output tokens) when the ending carries
it, nothing when no generation ever claimed the turn (the model was not called), else the reservation (the model may
have billed; the ending does not say). One transaction moves the day's counter by the difference between the new
charge and what the turn had been charged, releases its hold, removes it from the turns generating, and records the
charge and its basis on the reservation, conditioned on the reservation being as read: two settlers cannot both
apply. A presumed ending's charge (the relay's, the reaper's, a stale takeover's) may be corrected once by the turn's
terminal record (the token log is what happened: the difference is charged or given back); nothing corrects the
stream's.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from enum import IntEnum, StrEnum
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from chatstream.config import MAX_LIMIT, Limits
from chatstream.errors import ChatstreamError, Throttled
from chatstream.table.dynamodb import call, deser, ser
from chatstream.table.idempotency import IdempotencyKeys, KeyClaim, KeyInUse, KeyRecord
from chatstream.table.store import owner_pk, reservation_key

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from chatstream.records import TokenRecord
    from chatstream.table.store import Store

logger = logging.getLogger(__name__)

LIMITS_SK = "LIMITS"
ACTIVE_SK = "ACTIVE"
MINUTE_MS = 60_000
DAY_MS = 86_400_000
# How long a refusal asks to wait when a running turn must end first (turns at once, or tokens its reservation holds):
# a reply takes seconds; OpenAI's SDKs wait this long between their two retries.
TURN_WAIT_MS = 5_000
OVERRIDES_CACHED = 4096  # owners whose overrides an execution environment remembers
# Reasons a cancelled transaction gives for DynamoDB's capacity, not for a condition: try again later.
_BUSY = frozenset({"ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded"})
_CONFLICT = "TransactionConflict"
_FAILED = "ConditionalCheckFailed"
SETTLE_ATTEMPTS = 4


class LimitKind(StrEnum):
    """The three limits of an owner (their names are the limits item's attributes and the operator command's)."""

    REQUESTS = "requests_per_minute"
    TOKENS = "tokens_per_day"
    TURNS = "turns_at_once"


@dataclass(frozen=True)
class Overrides:
    """An operator's overrides of one owner's limits (the ``LIMITS`` item): a limit not given is the deployment's."""

    values: Mapping[LimitKind, int]
    version: str = ""
    updated_at: int = 0

    def over(self, defaults: Limits) -> Limits:
        return replace(defaults, **{kind.value: value for kind, value in self.values.items()})

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Overrides:
        values = {kind: int(item[kind.value]) for kind in LimitKind if item.get(kind.value) is not None}
        return cls(values, str(item.get("version", "")), int(item.get("updated_at", 0)))


def check_limit(kind: LimitKind, value: object) -> int:
    """``value`` as a limit of ``kind``, or ``ValueError`` saying what a limit must be."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LIMIT:
        raise ValueError(f"{kind.value} must be a whole number from 0 (no limit) to {MAX_LIMIT:,}, got {value!r}")
    return value


@dataclass(frozen=True)
class Admission:
    """What a turn's start must pass: ``owner``'s limits (``defaults``, the deployment's, under its overrides), with
    ``reserve`` tokens reserved for the turn (its ``max_tokens``); entries of the turns generating older than
    ``stale_after_ms`` are dropped before a refusal for turns at once; ``key``: the request's idempotency key."""

    owner: str
    defaults: Limits
    reserve: int
    stale_after_ms: int
    key: KeyClaim | None = None


class Part(StrEnum):
    """What each write an admission adds to a start's transaction is for."""

    LIMITS = "limits"
    REQUESTS = "requests"
    TOKENS = "tokens"
    TURNS = "turns"
    RESERVATION = "reservation"
    KEY = "key"


_KIND_OF_PART = {Part.REQUESTS: LimitKind.REQUESTS, Part.TOKENS: LimitKind.TOKENS, Part.TURNS: LimitKind.TURNS}


@dataclass(frozen=True)
class Plan:
    """An admission's writes for one start, and the limits they enforce."""

    limits: Limits
    parts: tuple[tuple[Part, dict[str, Any]], ...]
    now_ms: int
    cleaned: bool = False  # stale entries of the turns generating were dropped for it: not again

    @property
    def items(self) -> list[dict[str, Any]]:
        return [item for _, item in self.parts]


class Verdict(StrEnum):
    """What a cancelled start should do, when it is not refused (:meth:`Budgets.judge`)."""

    AGAIN = "again"  # the owner's overrides were learnt: make the start again
    CONFLICT = "conflict"  # another transaction held one of its items: make the start again, after a pause
    CLEANED = "cleaned"  # stale entries of the turns generating were dropped: make the start again, once
    NOT_OURS = "not_ours"  # the session's or the turn's own write failed: the start's caller tells why


@dataclass(frozen=True)
class Refusal:
    """Why an owner's turn was not started, and when to try again.

    ``spent``: nothing but the day's reset frees enough tokens (the day's tokens are charged, or the turn asks for more
    than the budget), so waiting a few seconds will not help."""

    kinds: frozenset[LimitKind]
    limits: Limits
    retry_after_ms: int
    spent: bool
    reserve: int
    requests_used: int | None = None
    tokens_used: int | None = None
    tokens_held: int | None = None
    turns_running: int | None = None


class LimitExceeded(ChatstreamError):
    """The owner's limits refused a turn (requests per minute, tokens per day, turns at once): nothing was written.
    ``refusal`` says which, and when to try again."""

    def __init__(self, message: str, refusal: Refusal) -> None:
        super().__init__(message)
        self.refusal = refusal


@dataclass(frozen=True)
class Standing:
    """An owner's limits and what it has used of them now (the relay's ``x-ratelimit-*`` headers)."""

    limits: Limits
    requests_used: int
    tokens_used: int
    turns_running: int
    minute_reset_ms: int  # until the minute's window ends
    day_reset_ms: int  # until the UTC day ends

    @property
    def requests_left(self) -> int:
        return max(self.limits.requests_per_minute - self.requests_used, 0)

    @property
    def tokens_left(self) -> int:
        return max(self.limits.tokens_per_day - self.tokens_used, 0)


class Basis(IntEnum):
    """What a turn's charge rests on; a settlement acts only on a charge of a higher basis than the recorded one."""

    NONE = 0  # not settled: the reservation stands
    PRESUMED = 1  # an ending that presumed how the turn ended (the relay's, the reaper's, a stale takeover's)
    STREAM = 2  # the turn's terminal record: final


@dataclass(frozen=True)
class Charge:
    """What an ending charges a turn: ``tokens``, or the turn's reservation (``None``), on ``basis``."""

    tokens: int | None
    basis: Basis

    @classmethod
    def nothing(cls) -> Charge:
        """No generation ever claimed the turn: the model was not called."""
        return cls(0, Basis.PRESUMED)

    @classmethod
    def reservation(cls) -> Charge:
        """The turn was claimed and ended without usage: the model may have billed what it was allowed."""
        return cls(None, Basis.PRESUMED)

    @classmethod
    def from_record(cls, record: TokenRecord) -> Charge:
        """The turn's terminal record: its usage, input and output (a record without usage: the reservation)."""
        usage = record.usage
        return cls(None if usage is None else usage.input_tokens + usage.output_tokens, Basis.STREAM)


@dataclass(frozen=True)
class Reservation:
    """A turn's hold on its owner's budget (``S#<session>`` / ``B#<turn>``)."""

    owner: str
    day: str  # the UTC day whose counter holds it ("": tokens are not limited)
    reserved: int
    charged: int
    held: bool  # its reservation is still counted in the day's ``held``
    entry: str  # its element of the owner's turns generating ("": none)
    basis: Basis

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Reservation:
        return cls(
            owner=str(item["owner"]),
            day=str(item.get("day", "")),
            reserved=int(item.get("reserved", 0)),
            charged=int(item.get("charged", 0)),
            held=bool(item.get("held", False)),
            entry=str(item.get("entry", "")),
            basis=Basis(int(item.get("basis", 0))),
        )


def minute_of(now_ms: int) -> int:
    return now_ms // MINUTE_MS


def day_of(now_ms: int) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(now_ms // 1000))


def _key(owner: str, sk: str) -> dict[str, str]:
    return {"pk": owner_pk(owner), "sk": sk}


def _since(entry: str) -> int:
    head = entry.split("#", 1)[0]
    return int(head) if head.isdigit() else 0


@dataclass
class Budgets:
    """The owners' budgets of ChatTable. Build it once per execution environment: it remembers the owners' overrides
    (each start checks them in its transaction, so what it remembers is never used stale)."""

    store: Store
    keys: IdempotencyKeys
    _overrides: OrderedDict[str, Overrides | None] = field(default_factory=OrderedDict, init=False, repr=False)

    # ------------------------------------------------------------------------- admission

    def plan(self, admission: Admission, session_id: str, turn: int, now_ms: int, *, cleaned: bool = False) -> Plan:
        """The writes ``admission`` adds to the start of ``session_id``'s ``turn`` at ``now_ms``."""
        owner = admission.owner
        known = self._known(owner)
        limits = self.limits_of(owner, admission.defaults)
        if limits.tokens_per_day and admission.reserve > limits.tokens_per_day:
            # Refused before any write, so on limits read now, not on those this environment knew: they may have been
            # raised since (one read, on this refusal's path only)
            known = self._learn(owner, self.store.get(_key(owner, LIMITS_SK)))
            limits = self.limits_of(owner, admission.defaults)
        table = self.store.table_name
        parts: list[tuple[Part, dict[str, Any]]] = []
        check: dict[str, Any] = {
            "TableName": table,
            "Key": ser(_key(owner, LIMITS_SK)),
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if known is None:
            check["ConditionExpression"] = "attribute_not_exists(pk)"
        else:
            check["ConditionExpression"] = "version = :version"
            check["ExpressionAttributeValues"] = ser({":version": known.version})
        parts.append((Part.LIMITS, {"ConditionCheck": check}))
        if limits.requests_per_minute:
            minute = minute_of(now_ms)
            parts.append((Part.REQUESTS, self._count_request(owner, minute, limits.requests_per_minute)))
        reserved, day, entry = 0, "", ""
        if limits.tokens_per_day:
            reserved, day = admission.reserve, day_of(now_ms)
            if reserved > limits.tokens_per_day:  # it could never fit: no write can tell, so it is refused here
                raise LimitExceeded(
                    f"the turn reserves {reserved} tokens, more than {owner}'s {limits.tokens_per_day} a day",
                    self._refusal(frozenset({LimitKind.TOKENS}), limits, admission.reserve, now_ms, spent=True),
                )
            parts.append((Part.TOKENS, self._reserve_tokens(owner, day, reserved, limits.tokens_per_day, now_ms)))
        if limits.turns_at_once:
            entry = f"{now_ms:013d}#{session_id}#{turn}"
            parts.append((Part.TURNS, self._add_turn(owner, entry, limits.turns_at_once, now_ms)))
        if reserved or entry:
            item = {
                **reservation_key(session_id, turn),
                "owner": owner,
                "reserved": reserved,
                "charged": reserved,
                "held": bool(reserved),
                "basis": int(Basis.NONE),
                "created_at": now_ms,
                "expires_at": self.store.expires_at(now_ms),
            }
            item.update({name: value for name, value in (("day", day), ("entry", entry)) if value})
            put = {"TableName": table, "Item": ser(item), "ConditionExpression": "attribute_not_exists(pk)"}
            parts.append((Part.RESERVATION, {"Put": put}))
        if admission.key is not None:
            parts.append((Part.KEY, self.keys.put(owner, admission.key, session_id, turn, now_ms)))
        return Plan(limits, tuple(parts), now_ms, cleaned)

    def judge(
        self, plan: Plan, admission: Admission, reasons: Sequence[Mapping[str, Any]], own_failed: bool
    ) -> Verdict:
        """What a cancelled start does, from the reasons of its admission's writes (``reasons``, in the plan's order)
        and whether the start's own writes (the session's, the turn's) failed their conditions.

        Raises :class:`~chatstream.table.idempotency.KeyInUse` (the key names a turn already: that one, whatever else
        failed), :class:`~chatstream.errors.Throttled` (DynamoDB's capacity; retryable) or :class:`LimitExceeded`."""
        by_part = {part: reasons[index] if index < len(reasons) else {} for index, (part, _) in enumerate(plan.parts)}
        codes = _codes(list(by_part), reasons)
        if codes.get(Part.KEY) == _FAILED:
            raise KeyInUse(KeyRecord.from_item(deser(by_part[Part.KEY].get("Item") or {})))
        if any(code in _BUSY for code in codes.values()):
            raise Throttled(f"DynamoDB refused the start for capacity: {sorted(set(codes.values()) & _BUSY)}")
        if codes.get(Part.LIMITS) == _FAILED:
            raw = by_part[Part.LIMITS].get("Item")
            self._learn(admission.owner, deser(raw) if raw else None)
            return Verdict.AGAIN
        if own_failed:
            return Verdict.NOT_OURS
        if _CONFLICT in codes.values():
            return Verdict.CONFLICT
        refused = {part: deser(by_part[part].get("Item") or {}) for part in _KIND_OF_PART if codes.get(part) == _FAILED}
        if not refused:
            return Verdict.NOT_OURS
        if set(refused) == {Part.TURNS} and not plan.cleaned and self._drop_stale(admission, refused[Part.TURNS], plan):
            return Verdict.CLEANED
        raise self._refused(plan, admission, refused)

    def _count_request(self, owner: str, minute: int, limit: int) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": self.store.table_name,
                "Key": ser(_key(owner, f"RPM#{minute}")),
                "UpdateExpression": "ADD n :one SET expires_at = :exp",
                "ConditionExpression": "attribute_not_exists(n) OR n < :limit",
                "ExpressionAttributeValues": ser(
                    {":one": 1, ":limit": limit, ":exp": (minute + 2) * MINUTE_MS // 1000}
                ),
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def _reserve_tokens(self, owner: str, day: str, reserve: int, limit: int, now_ms: int) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": self.store.table_name,
                "Key": ser(_key(owner, f"TPD#{day}")),
                "UpdateExpression": "ADD tokens :reserve, held :reserve SET expires_at = :exp",
                "ConditionExpression": "attribute_not_exists(tokens) OR tokens <= :room",
                "ExpressionAttributeValues": ser(
                    {":reserve": reserve, ":room": limit - reserve, ":exp": _day_end_ms(now_ms) // 1000 + 86_400}
                ),
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def _add_turn(self, owner: str, entry: str, limit: int, now_ms: int) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": self.store.table_name,
                "Key": ser(_key(owner, ACTIVE_SK)),
                "UpdateExpression": "ADD turns :entry SET expires_at = :exp",
                "ConditionExpression": "attribute_not_exists(turns) OR size(turns) < :limit",
                "ExpressionAttributeValues": ser(
                    {":entry": {entry}, ":limit": limit, ":exp": self.store.expires_at(now_ms)}
                ),
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def _drop_stale(self, admission: Admission, active: Mapping[str, Any], plan: Plan) -> bool:
        """Drop the entries of the owner's turns generating that are older than the stale-turn limit (turns whose
        ending never settled: a generation lost without its record, a settlement that failed); whether any were."""
        entries = set(active.get("turns") or ())
        stale = sorted(entry for entry in entries if plan.now_ms - _since(entry) > admission.stale_after_ms)
        if not stale:
            return False
        logger.warning("dropped stale entries of the turns generating", extra={"stale": len(stale)})
        try:
            call(
                self.store.client.update_item,
                TableName=self.store.table_name,
                Key=ser(_key(admission.owner, ACTIVE_SK)),
                UpdateExpression="DELETE turns :stale",
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeValues=ser({":stale": set(stale)}),
            )
        except ClientError as err:
            if err.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
        return True

    def _refused(self, plan: Plan, admission: Admission, refused: Mapping[Part, Mapping[str, Any]]) -> LimitExceeded:
        kinds = frozenset(_KIND_OF_PART[part] for part in refused)
        limits = plan.limits
        requests = refused.get(Part.REQUESTS, {})
        tokens = refused.get(Part.TOKENS, {})
        active = refused.get(Part.TURNS, {})
        used = int(tokens.get("tokens", 0)) if tokens else None
        held = int(tokens.get("held", 0)) if tokens else None
        # Tokens the turns still running hold come back when they end (what they do not use): only a budget that is
        # spent without them waits for the day's reset.
        spent = used is not None and held is not None and used - held + admission.reserve > limits.tokens_per_day
        refusal = self._refusal(
            kinds,
            limits,
            admission.reserve,
            plan.now_ms,
            spent=spent,
            requests_used=int(requests["n"]) if requests.get("n") is not None else None,
            tokens_used=used,
            tokens_held=held,
            turns_running=len(active.get("turns") or ()) if active else None,
        )
        return LimitExceeded(f"{admission.owner}'s {', '.join(sorted(kinds))} refused the turn", refusal)

    @staticmethod
    def _refusal(
        kinds: frozenset[LimitKind], limits: Limits, reserve: int, now_ms: int, *, spent: bool, **used: int | None
    ) -> Refusal:
        waits = [TURN_WAIT_MS]
        if LimitKind.REQUESTS in kinds:
            waits.append((minute_of(now_ms) + 1) * MINUTE_MS - now_ms)
        if spent:
            waits.append(_day_end_ms(now_ms) - now_ms)
        return Refusal(kinds, limits, max(waits), spent, reserve, **used)

    def limits_of(self, owner: str, defaults: Limits) -> Limits:
        """``owner``'s limits as this execution environment knows its overrides (as its last start, or read, found
        them: a start checks them in its transaction), over ``defaults``. No read."""
        known = self._known(owner)
        return defaults if known is None else known.over(defaults)

    def _known(self, owner: str) -> Overrides | None:
        if owner in self._overrides:
            self._overrides.move_to_end(owner)
        return self._overrides.get(owner)

    def _learn(self, owner: str, item: Mapping[str, Any] | None) -> Overrides | None:
        """Remember ``owner``'s overrides as its limits item has them (None: it has none)."""
        overrides = Overrides.from_item(item) if item else None
        self._overrides[owner] = overrides
        self._overrides.move_to_end(owner)
        while len(self._overrides) > OVERRIDES_CACHED:
            self._overrides.popitem(last=False)
        return overrides

    # ----------------------------------------------------------------------- settlement

    def settle(self, session_id: str, turn: int, charge: Charge) -> bool:
        """Settle the turn's reservation with ``charge``, once per basis (see the module's docstring): whether this
        changed it. No reservation (the turn started with no limit on, or it expired): nothing to do."""
        drop_entry = True
        for attempt in range(SETTLE_ATTEMPTS):
            item = self.store.get(reservation_key(session_id, turn))
            if item is None:
                return False
            reservation = Reservation.from_item(item)
            if reservation.basis >= charge.basis:
                return False
            parts = self._settlement(session_id, turn, reservation, charge, drop_entry=drop_entry)
            try:
                call(self.store.client.transact_write_items, TransactItems=[item for _, item in parts])
                return True
            except ClientError as err:
                if err.response["Error"]["Code"] != "TransactionCanceledException":
                    raise
                reasons = err.response.get("CancellationReasons") or []
                codes = _codes([part for part, _ in parts], reasons)
                if any(code in _BUSY for code in codes.values()):
                    raise Throttled(f"DynamoDB refused a settlement for capacity: {sorted(codes.values())}") from err
                if codes.get(Part.TURNS) == _FAILED:
                    drop_entry = False  # its entry is gone already (dropped as stale)
                elif _CONFLICT in codes.values():
                    self.store.sleep(self.store.backoff.delay(attempt))
                elif codes.get(Part.RESERVATION) != _FAILED:  # not a race with another settler: not ours to handle
                    raise
        raise Throttled(f"the settlement of turn {turn} of session {session_id} kept conflicting")

    def _settlement(
        self, session_id: str, turn: int, reservation: Reservation, charge: Charge, *, drop_entry: bool
    ) -> list[tuple[Part, dict[str, Any]]]:
        table = self.store.table_name
        target = reservation.reserved if charge.tokens is None else charge.tokens
        parts: list[tuple[Part, dict[str, Any]]] = [
            (
                Part.RESERVATION,
                {
                    "Update": {
                        "TableName": table,
                        "Key": ser(reservation_key(session_id, turn)),
                        "UpdateExpression": "SET charged = :target, basis = :basis, held = :no",
                        "ConditionExpression": "charged = :old AND basis = :was",
                        "ExpressionAttributeValues": ser(
                            {
                                ":target": target,
                                ":basis": int(charge.basis),
                                ":no": False,
                                ":old": reservation.charged,
                                ":was": int(reservation.basis),
                            }
                        ),
                    }
                },
            )
        ]
        delta, release = target - reservation.charged, reservation.reserved if reservation.held else 0
        if reservation.day and (delta or release):
            parts.append(
                (
                    Part.TOKENS,
                    {
                        "Update": {
                            "TableName": table,
                            "Key": ser(_key(reservation.owner, f"TPD#{reservation.day}")),
                            "UpdateExpression": "ADD tokens :delta, held :release "
                            "SET expires_at = if_not_exists(expires_at, :exp)",
                            "ExpressionAttributeValues": ser(
                                {":delta": delta, ":release": -release, ":exp": self.store.now_ms() // 1000 + 86_400}
                            ),
                        }
                    },
                )
            )
        if reservation.entry and reservation.basis is Basis.NONE and drop_entry:
            parts.append(
                (
                    Part.TURNS,
                    {
                        "Update": {
                            "TableName": table,
                            "Key": ser(_key(reservation.owner, ACTIVE_SK)),
                            "UpdateExpression": "DELETE turns :entry",
                            "ConditionExpression": "contains(turns, :one)",
                            "ExpressionAttributeValues": ser(
                                {":entry": {reservation.entry}, ":one": reservation.entry}
                            ),
                        }
                    },
                )
            )
        return parts

    # --------------------------------------------------------------------------- reads

    def standing(self, owner: str, defaults: Limits) -> Standing:
        """``owner``'s limits and what it has used now (one BatchGetItem of its limits and counters); the overrides
        read are remembered."""
        now_ms = self.store.now_ms()
        keys = {
            LIMITS_SK: _key(owner, LIMITS_SK),
            "requests": _key(owner, f"RPM#{minute_of(now_ms)}"),
            "tokens": _key(owner, f"TPD#{day_of(now_ms)}"),
            ACTIVE_SK: _key(owner, ACTIVE_SK),
        }
        found = self.store.batch_get(keys.values())
        items = {name: found.get((key["pk"], key["sk"])) for name, key in keys.items()}
        overrides = self._learn(owner, items[LIMITS_SK])
        limits = defaults if overrides is None else overrides.over(defaults)
        return self._standing(limits, items, now_ms, turns_running=len((items[ACTIVE_SK] or {}).get("turns") or ()))

    def headline(self, owner: str, defaults: Limits) -> Standing | None:
        """What ``owner``'s ``x-ratelimit-*`` headers say once a turn of its began: the counters of its request and
        token limits only (a BatchGetItem of one or two items; no read when neither limit is on), under the limits
        this environment knows (each start's transaction checks them, so after an admitted start they are current).
        Its ``turns_running`` is not read: 0."""
        limits = self.limits_of(owner, defaults)
        now_ms = self.store.now_ms()
        keys = {}
        if limits.requests_per_minute:
            keys["requests"] = _key(owner, f"RPM#{minute_of(now_ms)}")
        if limits.tokens_per_day:
            keys["tokens"] = _key(owner, f"TPD#{day_of(now_ms)}")
        if not keys:
            return None
        found = self.store.batch_get(keys.values())
        items = {name: found.get((key["pk"], key["sk"])) for name, key in keys.items()}
        return self._standing(limits, items, now_ms, turns_running=0)

    @staticmethod
    def _standing(
        limits: Limits, items: Mapping[str, Mapping[str, Any] | None], now_ms: int, *, turns_running: int
    ) -> Standing:
        return Standing(
            limits=limits,
            requests_used=int((items.get("requests") or {}).get("n", 0)),
            tokens_used=int((items.get("tokens") or {}).get("tokens", 0)),
            turns_running=turns_running,
            minute_reset_ms=(minute_of(now_ms) + 1) * MINUTE_MS - now_ms,
            day_reset_ms=_day_end_ms(now_ms) - now_ms,
        )

    # ------------------------------------------------------------------------ operator

    def overrides(self, owner: str) -> Overrides | None:
        """``owner``'s overrides, or None."""
        item = self.store.get(_key(owner, LIMITS_SK))
        return None if item is None else Overrides.from_item(item)

    def set_overrides(self, owner: str, values: Mapping[LimitKind, int | None]) -> Overrides:
        """Set ``owner``'s overrides in ``values`` (None: back to the deployment's default), keep the others; the
        overrides now. Every change gets a new version, which each start's transaction checks, so it holds from the
        next start on in every execution environment."""
        if not owner:
            raise ValueError("an owner is needed")
        if not values:
            raise ValueError("no limit to set")
        given = {kind: check_limit(kind, value) for kind, value in values.items() if value is not None}
        lifted = [kind for kind, value in values.items() if value is None]
        names = {f"#{kind.name.lower()}": kind.value for kind in (*given, *lifted)}
        update = "SET version = :version, updated_at = :now" + "".join(
            f", #{kind.name.lower()} = :{kind.name.lower()}" for kind in given
        )
        if lifted:
            update += " REMOVE " + ", ".join(f"#{kind.name.lower()}" for kind in lifted)
        attributes = call(
            self.store.client.update_item,
            TableName=self.store.table_name,
            Key=ser(_key(owner, LIMITS_SK)),
            UpdateExpression=update,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=ser(
                {
                    ":version": secrets.token_hex(8),
                    ":now": self.store.now_ms(),
                    **{f":{kind.name.lower()}": value for kind, value in given.items()},
                }
            ),
            ReturnValues="ALL_NEW",
        )["Attributes"]
        return Overrides.from_item(deser(attributes))

    def lift(self, owner: str) -> bool:
        """Remove all of ``owner``'s overrides (the deployment's defaults apply again); whether it had any."""
        old = call(
            self.store.client.delete_item,
            TableName=self.store.table_name,
            Key=ser(_key(owner, LIMITS_SK)),
            ReturnValues="ALL_OLD",
        ).get("Attributes")
        return bool(old)


def _codes(parts: Sequence[Part], reasons: Sequence[Mapping[str, Any]]) -> dict[Part, str]:
    """Each write's cancellation reason code (``"None"``: it did not fail), from a cancelled transaction's reasons,
    which DynamoDB gives in the order of the writes."""
    return {part: str(reasons[index].get("Code") or "None") for index, part in enumerate(parts) if index < len(reasons)}


def _day_end_ms(now_ms: int) -> int:
    return (now_ms // DAY_MS + 1) * DAY_MS
