"""DynamoDB's wire, as ChatTable speaks it: attribute values in and out, and DynamoDB's errors out as ours.

Attribute values cover the types the table stores (``boto3.dynamodb.types`` has the general codec; importing it
imports boto3 and s3transfer, ~14 ms of every cold start, for these seven types: a string set is a Python set of
strings, never empty, as DynamoDB's). As boto3's: numbers are ints or
Decimals (a float is refused; :func:`number` makes one of a float) and read back as Decimals.

Errors: :func:`call` turns throttling and transient service errors into :class:`~chatstream.errors.Throttled`
(the caller retries later); :func:`condition_failed` and :func:`too_large` name the two refusals the table's
writes act on.
"""

from __future__ import annotations

from decimal import Clamped, Context, Decimal, Inexact, Overflow, Rounded, Underflow
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from chatstream.errors import Throttled

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

THROTTLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "TransactionConflictException",
    }
)

# DynamoDB's numbers: 38 digits, exponents from -130 to 125 (boto3's DYNAMODB_CONTEXT).
_NUMBERS = Context(Emin=-128, Emax=126, prec=38, traps=[Clamped, Overflow, Inexact, Rounded, Underflow])


def call(method: Callable[..., Any], **kwargs: Any) -> Any:
    """Call DynamoDB, translating throttling and transient errors into :class:`Throttled`."""
    try:
        return method(**kwargs)
    except ClientError as err:
        if err.response["Error"]["Code"] in THROTTLE_CODES:
            raise Throttled(f"DynamoDB {err.response['Error']['Code']}") from err
        raise


def condition_failed(err: ClientError) -> bool:
    """A conditional write whose condition did not hold."""
    return err.response["Error"]["Code"] == "ConditionalCheckFailedException"


def too_large(err: ClientError) -> bool:
    """DynamoDB refused a write for the item's size ("Item size to update has exceeded the maximum allowed size")."""
    error = err.response.get("Error", {})
    return error.get("Code") == "ValidationException" and "maximum allowed size" in str(error.get("Message", ""))


def number(value: float) -> Decimal:
    """``value`` as a DynamoDB number. DynamoDB's smallest non-zero magnitude is 1E-130: anything closer to zero (a
    temperature of 1e-176, which a model reads as 0 anyway) is stored as 0, where boto3 would refuse the item."""
    result = Decimal(str(value))
    return result if abs(result) >= Decimal("1E-130") else Decimal(0)


def ser(item: Mapping[str, Any]) -> dict[str, Any]:
    """An item (or a key, or expression values) as DynamoDB attribute values."""
    return {key: _attr(value) for key, value in item.items()}


def deser(raw: Mapping[str, Any]) -> dict[str, Any]:
    """An item as Python values (numbers as Decimals)."""
    return {key: _value(value) for key, value in raw.items()}


def _attr(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, int | Decimal):
        text = str(_NUMBERS.create_decimal(value))  # refuses what DynamoDB cannot store, as boto3's codec does
        if text in ("Infinity", "-Infinity", "NaN", "sNaN", "-NaN", "-sNaN"):
            raise TypeError("DynamoDB stores no infinities or NaNs")
        return {"N": text}
    if value is None:
        return {"NULL": True}
    if isinstance(value, dict):
        return {"M": {key: _attr(inner) for key, inner in value.items()}}
    if isinstance(value, list | tuple):
        return {"L": [_attr(inner) for inner in value]}
    if isinstance(value, set | frozenset) and value and all(isinstance(inner, str) for inner in value):
        return {"SS": list(value)}
    raise TypeError(f"ChatTable stores no {type(value).__name__} values")


def _value(attr: Mapping[str, Any]) -> Any:
    (kind, raw), *_ = attr.items()
    if kind == "S":
        return raw
    if kind == "N":
        return Decimal(raw)
    if kind == "BOOL":
        return bool(raw)
    if kind == "NULL":
        return None
    if kind == "M":
        return {key: _value(inner) for key, inner in raw.items()}
    if kind == "L":
        return [_value(inner) for inner in raw]
    if kind == "SS":
        return set(raw)
    raise TypeError(f"ChatTable stores no {kind} attributes")
