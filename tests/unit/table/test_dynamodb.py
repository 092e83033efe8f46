"""DynamoDB's wire as ChatTable speaks it: attribute values written as boto3's codec writes them, read back as it
reads them, and what the table does not store refused."""

from __future__ import annotations

from decimal import Decimal

import pytest
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from chatstream.table.dynamodb import deser, ser

ITEM_OF_EVERY_STORED_TYPE = {
    "pk": "S#abc",
    "turn": 3,
    "temperature": Decimal("0.7"),
    "cancel_requested": False,
    "stop_reason": None,
    "usage": {"input_tokens": 12, "output_tokens": 0},
    "error": {"code": "throttled", "message": "é ✓", "retryable": True},
    "parts": ["a", 1, [True]],
    "turns": {"0001#s#1", "0002#s#2"},
}


def test_items_are_written_as_boto3s_codec_writes_them_and_read_back_as_it_reads_them() -> None:
    # GIVEN an item holding every type the table stores
    # WHEN it is turned into DynamoDB attribute values and back
    written = ser(ITEM_OF_EVERY_STORED_TYPE)
    # THEN the wire form is boto3's, and reading it back gives boto3's values (numbers as Decimals)
    assert written == {key: TypeSerializer().serialize(value) for key, value in ITEM_OF_EVERY_STORED_TYPE.items()}
    assert deser(written) == {key: TypeDeserializer().deserialize(value) for key, value in written.items()}
    assert isinstance(deser(written)["turn"], Decimal)


@pytest.mark.parametrize("value", [0.5, b"bytes", {1, 2}, set(), {"a", 1}])
def test_a_value_of_a_type_the_table_does_not_store_is_refused(value: object) -> None:
    with pytest.raises(TypeError, match="ChatTable stores no"):
        ser({"x": value})


def test_an_attribute_of_a_kind_the_table_does_not_store_is_refused() -> None:
    with pytest.raises(TypeError, match="ChatTable stores no NS attributes"):
        deser({"x": {"NS": ["1"]}})


@pytest.mark.parametrize("number", [Decimal("1." + "1" * 38), Decimal("1E+999"), Decimal("Infinity"), Decimal("NaN")])
def test_a_number_dynamodb_cannot_store_is_refused_before_the_call_as_boto3_refuses_it(number: Decimal) -> None:
    with pytest.raises((ArithmeticError, TypeError)):
        TypeSerializer().serialize(number)
    with pytest.raises((ArithmeticError, TypeError)):
        ser({"x": number})
