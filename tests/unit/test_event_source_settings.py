"""The local mappings say which of the template's mapping settings they do not emulate, instead of ignoring them."""

from __future__ import annotations

import logging

import pytest

from chatstream_local.event_sources import kinesis, sqs
from chatstream_local.event_sources.kinesis import MappingSettings
from chatstream_local.event_sources.unemulated import unemulated, warn_unemulated
from chatstream_local.template import Template


@pytest.mark.parametrize(
    ("function", "kind", "emulated"),
    [("ConsumerFunction", "Kinesis", kinesis.EMULATED), ("TurnReaperFunction", "SQS", sqs.EMULATED)],
)
@pytest.mark.parametrize("fan_out", ["true", "false"])
def test_the_template_asks_for_nothing_the_local_mappings_leave_out(
    function: str, kind: str, emulated: frozenset[str], fan_out: str
) -> None:
    # GIVEN the template as it deploys (both ways the consumer may read the stream)
    template = Template.load(parameter_overrides={"EnhancedFanOut": fan_out})
    events = [e["Properties"] for e in template.properties(function)["Events"].values() if e["Type"] == kind]
    # THEN each mapping's settings are all emulated, or at values that change nothing
    assert len(events) == 1
    assert unemulated(events[0], emulated) == []


def test_a_setting_the_local_mapping_does_not_do_is_named_once(caplog: pytest.LogCaptureFixture) -> None:
    # GIVEN a Kinesis event a user edited: a filter, a batching window, a tumbling window, disabled
    properties = {
        "Stream": "arn:aws:kinesis:us-east-1:123456789012:stream/s",
        "BatchSize": 100,
        "ParallelizationFactor": 1,
        "MaximumBatchingWindowInSeconds": 5,
        "TumblingWindowInSeconds": "0",
        "Enabled": False,
        "FilterCriteria": {"Filters": [{"Pattern": '{"data": {"kind": ["token"]}}'}]},
    }
    # WHEN the local stack reads it
    with caplog.at_level(logging.WARNING):
        named = warn_unemulated("ConsumerFunction's Kinesis event Tokens", properties, kinesis.EMULATED)
    # THEN one warning names what the local mapping leaves out, not what it does or what changes nothing
    assert named == ["MaximumBatchingWindowInSeconds=5", "Enabled=False", "FilterCriteria"]
    assert len(caplog.records) == 1
    assert "MaximumBatchingWindowInSeconds=5, Enabled=False, FilterCriteria" in caplog.records[0].getMessage()


def test_a_starting_position_the_local_mapping_cannot_read_from_is_refused() -> None:
    with pytest.raises(ValueError, match="AT_TIMESTAMP"):
        MappingSettings.from_event({"Stream": "s", "StartingPosition": "AT_TIMESTAMP"})
