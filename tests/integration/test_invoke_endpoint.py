"""The local Lambda Invoke API, driven by boto3's own lambda client."""

from __future__ import annotations

import json
import random
import threading
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.config import Config

from chatstream_local.lambda_.function_spec import function_arn
from chatstream_local.lambda_.invoke import InvokeEndpoint, function_name_from
from chatstream_local.lambda_.service import LocalLambda
from tests.fixtures.local_handlers.specs import buffered, wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from chatstream_local.lambda_.destinations import FailedEvent
    from chatstream_local.lambda_.invocation import FunctionError

pytestmark = pytest.mark.integration

SPECS = [
    buffered("echo", "echo"),
    buffered("fail", "fail"),
    buffered("hold", "hold"),
    buffered("hold-wide", "hold", max_concurrency=20),
    buffered("count", "count"),
    buffered("count-retried", "count", max_retry_attempts=2),
    buffered("count-reserved-0", "count", reserved_concurrency=0, max_event_age_s=1.0),
    buffered("hold-reserved-1", "hold", reserved_concurrency=1),
]


class FailureRecorder:
    def __init__(self) -> None:
        self.failed: list[FailedEvent] = []
        self._lock = threading.Lock()

    def __call__(self, failed: FailedEvent) -> None:
        with self._lock:
            self.failed.append(failed)

    @property
    def calls(self) -> list[tuple[str, bytes, FunctionError | None]]:
        return [(failed.name, failed.payload, failed.error) for failed in self.failed]


@pytest.fixture
def failures() -> FailureRecorder:
    return FailureRecorder()


@pytest.fixture
def endpoint(failures: FailureRecorder) -> Iterator[InvokeEndpoint]:
    with LocalLambda(SPECS) as local, InvokeEndpoint(local, on_failure=failures, retry_delay_s=0.0) as running:
        yield running


@pytest.fixture
def client(endpoint: InvokeEndpoint, aws_env: None) -> Any:
    config = Config(retries={"max_attempts": 1}, read_timeout=30)
    return boto3.client("lambda", endpoint_url=endpoint.url, region_name="us-east-1", config=config)


def test_request_response_returns_the_functions_payload(client: Any) -> None:
    # WHEN boto3 invokes a function synchronously
    response = client.invoke(FunctionName="echo", InvocationType="RequestResponse", Payload=b'{"n": 1}')

    # THEN it gets the handler's result, as from Lambda
    assert response["StatusCode"] == 200
    assert response["ExecutedVersion"] == "$LATEST"
    assert "FunctionError" not in response
    assert json.loads(response["Payload"].read())["event"] == {"n": 1}


def test_a_function_error_comes_back_as_unhandled_with_the_error_document(client: Any) -> None:
    # WHEN the handler raises
    response = client.invoke(FunctionName="fail", Payload=b"{}")

    # THEN boto3 sees FunctionError Unhandled and the error document as the payload
    assert response["StatusCode"] == 200
    assert response["FunctionError"] == "Unhandled"
    document = json.loads(response["Payload"].read())
    assert document["errorType"] == "ValueError"
    assert document["errorMessage"] == "the handler failed on purpose"


def test_an_event_invocation_is_accepted_before_the_function_runs(
    client: Any, endpoint: InvokeEndpoint, tmp_path: Path
) -> None:
    # WHEN boto3 invokes asynchronously a function that holds until released
    response = client.invoke(
        FunctionName="hold", InvocationType="Event", Payload=json.dumps({"dir": str(tmp_path)}).encode()
    )

    # THEN the invoke returns 202 while the function has not finished (it cannot: it is not released yet)
    assert response["StatusCode"] == 202
    assert response["Payload"].read() == b""

    # AND the function runs in the background
    wait_until(lambda: any(tmp_path.glob("started-*")), what="the Event invocation to start")
    (tmp_path / "release").touch()
    assert endpoint.wait_idle(timeout=20)


def test_event_invocations_run_at_once_up_to_the_functions_concurrency(
    client: Any, endpoint: InvokeEndpoint, tmp_path: Path
) -> None:
    # WHEN 17 events (more than a fixed pool of 16 workers would run at once) go to a function that may run 20 at a time
    for _ in range(17):
        client.invoke(
            FunctionName="hold-wide", InvocationType="Event", Payload=json.dumps({"dir": str(tmp_path)}).encode()
        )
    # THEN all 17 are running together (each holds until released), as Lambda runs them
    wait_until(lambda: len(list(tmp_path.glob("started-*"))) == 17, timeout_s=60, what="17 concurrent invocations")
    (tmp_path / "release").touch()
    assert endpoint.wait_idle(timeout=30)


def test_a_failed_event_invocation_is_not_retried_and_goes_to_on_failure(
    client: Any, endpoint: InvokeEndpoint, failures: FailureRecorder, tmp_path: Path
) -> None:
    # GIVEN a function with the template's MaximumRetryAttempts 0
    out = tmp_path / "runs.jsonl"
    payload = json.dumps({"out": str(out), "fail": True}).encode()

    # WHEN an Event invocation of it fails
    client.invoke(FunctionName="count", InvocationType="Event", Payload=payload)
    assert endpoint.wait_idle(timeout=20)

    # THEN it ran once, and the on-failure destination got the event, the error, and the invocation's request id
    assert len(out.read_text().splitlines()) == 1
    assert len(failures.calls) == 1
    name, failed_payload, error = failures.calls[0]
    assert (name, failed_payload) == ("count", payload)
    assert error.error_type == "RuntimeError"
    failed = failures.failed[0]
    assert (failed.condition, failed.attempts) == ("RetriesExhausted", 1) and failed.request_id


def test_an_event_invocation_is_retried_up_to_max_retry_attempts(
    client: Any, endpoint: InvokeEndpoint, failures: FailureRecorder, tmp_path: Path
) -> None:
    # GIVEN a function configured with two retries
    out = tmp_path / "runs.jsonl"

    # WHEN an Event invocation keeps failing
    client.invoke(
        FunctionName="count-retried", InvocationType="Event", Payload=json.dumps({"out": str(out), "fail": True})
    )
    assert endpoint.wait_idle(timeout=20)

    # THEN it ran three times, then went to on_failure once, saying so
    assert len(out.read_text().splitlines()) == 3
    assert [call[0] for call in failures.calls] == ["count-retried"]
    assert (failures.failed[0].condition, failures.failed[0].attempts) == ("RetriesExhausted", 3)


def test_an_event_has_one_request_id_for_its_202_every_attempt_and_its_destination_record(
    client: Any, endpoint: InvokeEndpoint, failures: FailureRecorder, tmp_path: Path
) -> None:
    # GIVEN a function configured with two retries, that records each attempt's aws_request_id
    ids = tmp_path / "ids.txt"
    payload = json.dumps({"out": str(tmp_path / "runs.jsonl"), "ids": str(ids), "fail": True})

    # WHEN an Event invocation of it keeps failing
    response = client.invoke(FunctionName="count-retried", InvocationType="Event", Payload=payload)
    assert endpoint.wait_idle(timeout=20)

    # THEN the 202's request id is every attempt's aws_request_id and the on-failure record's (Lambda's retries of an
    # event share its request id: AWS Knowledge Center, lambda-function-duplicate-invocations)
    request_id = response["ResponseMetadata"]["RequestId"]
    assert ids.read_text().splitlines() == [request_id] * 3
    assert [failed.request_id for failed in failures.failed] == [request_id]


def test_a_successful_event_invocation_does_not_reach_on_failure(
    client: Any, endpoint: InvokeEndpoint, failures: FailureRecorder, tmp_path: Path
) -> None:
    out = tmp_path / "runs.jsonl"
    client.invoke(FunctionName="count", InvocationType="Event", Payload=json.dumps({"out": str(out)}))
    assert endpoint.wait_idle(timeout=20)
    assert json.loads(out.read_text()) == {"out": str(out)}
    assert failures.calls == []


def test_an_unknown_function_raises_resource_not_found(client: Any) -> None:
    # WHEN boto3 invokes a function that does not exist
    # THEN it raises the modelled ResourceNotFoundException
    with pytest.raises(client.exceptions.ResourceNotFoundException):
        client.invoke(FunctionName="missing", Payload=b"{}")


def test_a_function_arn_is_accepted_as_the_name(client: Any) -> None:
    response = client.invoke(FunctionName=function_arn("echo"), Payload=b'{"by": "arn"}')
    assert json.loads(response["Payload"].read())["event"] == {"by": "arn"}


def test_dry_run_checks_the_function_without_running_it(client: Any) -> None:
    assert client.invoke(FunctionName="echo", InvocationType="DryRun")["StatusCode"] == 204
    with pytest.raises(client.exceptions.ResourceNotFoundException):
        client.invoke(FunctionName="missing", InvocationType="DryRun")


def test_a_payload_over_the_quota_is_refused(client: Any) -> None:
    with pytest.raises(client.exceptions.RequestTooLargeException):
        client.invoke(FunctionName="echo", Payload=json.dumps("x" * 6_300_000))


def test_the_standard_endpoint_variable_points_boto3_here(
    endpoint: InvokeEndpoint, aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN only the standard botocore variable, as the relay's code will see it
    monkeypatch.setenv("AWS_ENDPOINT_URL_LAMBDA", endpoint.url)

    # WHEN a plain client invokes
    client = boto3.client("lambda", region_name="us-east-1")
    response = client.invoke(FunctionName="echo", Payload=b'{"via": "env"}')

    # THEN it reached the local endpoint
    assert json.loads(response["Payload"].read())["event"] == {"via": "env"}


@pytest.mark.parametrize(
    ("identifier", "name"),
    [
        ("proxy", "proxy"),
        ("proxy:$LATEST", "proxy"),
        ("123456789012:function:proxy", "proxy"),
        ("arn:aws:lambda:us-east-1:123456789012:function:proxy:live", "proxy"),
    ],
)
def test_function_name_forms(identifier: str, name: str) -> None:
    assert function_name_from(identifier) == name


class LateDraws(random.Random):
    """Draws that always deliver twice, and as late as the delay allows."""

    def random(self) -> float:
        return 0.999


def test_with_duplicate_events_at_1_each_event_is_delivered_twice_and_wait_idle_waits_for_both(
    aws_env: None, tmp_path: Path
) -> None:
    # GIVEN an endpoint that delivers every event a second time, well after the first has run (cold start included)
    with (
        LocalLambda(SPECS) as local,
        InvokeEndpoint(local, duplicate_events=1.0, duplicate_delay_s=1.5, rng=LateDraws()) as endpoint,
    ):
        client = boto3.client("lambda", endpoint_url=endpoint.url, region_name="us-east-1")
        out = tmp_path / "runs.jsonl"
        payload = json.dumps({"out": str(out)}).encode()

        # WHEN one event is accepted, and the caller waits for the endpoint to be idle
        assert client.invoke(FunctionName="count", InvocationType="Event", Payload=payload)["StatusCode"] == 202
        assert endpoint.wait_idle(timeout=20)

        # THEN the function already ran twice, on the same event, and the endpoint counts one duplicate, which did
        # not fail
        assert [json.loads(line) for line in out.read_text().splitlines()] == [{"out": str(out)}] * 2
        assert endpoint.duplicates == {"count": 1}
        assert endpoint.failed_duplicates == {}


def test_a_duplicate_that_fails_goes_to_on_failure_as_any_event(
    failures: FailureRecorder, aws_env: None, tmp_path: Path
) -> None:
    # GIVEN an endpoint that delivers every event twice
    with (
        LocalLambda(SPECS) as local,
        InvokeEndpoint(local, on_failure=failures, duplicate_events=1.0, duplicate_delay_s=0.1) as endpoint,
    ):
        out = tmp_path / "runs.jsonl"
        payload = json.dumps({"out": str(out), "fail": True}).encode()

        # WHEN an event of a function with no retries fails on both deliveries
        endpoint.submit_event("count", payload)
        assert endpoint.wait_idle(timeout=20)

    # THEN each delivery ran once and went to the on-failure destination, and the event counts once as a failed
    # duplicate (one event, however many of its deliveries failed)
    assert len(out.read_text().splitlines()) == 2
    assert [(name, sent) for name, sent, _ in failures.calls] == [("count", payload)] * 2
    assert (endpoint.duplicates, endpoint.failed_duplicates) == ({"count": 1}, {"count": 1})


def test_a_duplicate_whose_first_delivery_failed_counts_as_failed(
    failures: FailureRecorder, aws_env: None, tmp_path: Path
) -> None:
    # GIVEN an endpoint that delivers every event twice, the second well after the first
    with (
        LocalLambda(SPECS) as local,
        InvokeEndpoint(
            local, on_failure=failures, duplicate_events=1.0, duplicate_delay_s=1.0, rng=LateDraws()
        ) as endpoint,
    ):
        out = tmp_path / "runs.jsonl"
        payload = json.dumps({"out": str(out), "fail_first": True}).encode()

        # WHEN the first delivery fails and the second succeeds
        endpoint.submit_event("count", payload)
        assert endpoint.wait_idle(timeout=20)

    # THEN the event counts as a failed duplicate: its second delivery did the work the first could not (chaos's
    # check then allows it not to have been dropped)
    assert len(out.read_text().splitlines()) == 2
    assert [(name, sent) for name, sent, _ in failures.calls] == [("count", payload)]
    assert (endpoint.duplicates, endpoint.failed_duplicates) == ({"count": 1}, {"count": 1})


def test_by_default_each_event_is_delivered_once(client: Any, endpoint: InvokeEndpoint, tmp_path: Path) -> None:
    # GIVEN the endpoint as every test and the local stack make it, without duplicate_events
    out = tmp_path / "runs.jsonl"

    # WHEN five events are accepted and the endpoint is idle again
    for n in range(5):
        client.invoke(FunctionName="count", InvocationType="Event", Payload=json.dumps({"out": str(out), "n": n}))
    assert endpoint.wait_idle(timeout=20)

    # THEN each ran exactly once
    assert sorted(json.loads(line)["n"] for line in out.read_text().splitlines()) == list(range(5))
    assert endpoint.duplicates == {}


def test_duplicate_events_is_a_probability(endpoint: InvokeEndpoint) -> None:
    with pytest.raises(ValueError, match="probability"):
        InvokeEndpoint(endpoint.local, duplicate_events=1.5)


# ------------------------------------------------------------------------------ reserved concurrency


def test_a_request_response_past_the_reserved_concurrency_is_throttled_429(
    client: Any, tmp_path: Path, endpoint: InvokeEndpoint
) -> None:
    # GIVEN a function with a reserved concurrency of 1, its one environment busy
    payload = json.dumps({"dir": str(tmp_path)}).encode()
    busy = threading.Thread(target=lambda: client.invoke(FunctionName="hold-reserved-1", Payload=payload))
    busy.start()
    wait_until(lambda: any(tmp_path.glob("started-*")), what="the first invocation to start")

    # WHEN another invocation comes
    # THEN Lambda's throttle: TooManyRequestsException, with its reason, and the function did not run
    with pytest.raises(client.exceptions.TooManyRequestsException) as raised:
        client.invoke(FunctionName="hold-reserved-1", Payload=payload)
    assert raised.value.response["Reason"] == "ReservedFunctionConcurrentInvocationLimitExceeded"
    assert len(list(tmp_path.glob("started-*"))) == 1
    # AND once the environment is free, the next one runs
    (tmp_path / "release").touch()
    busy.join(timeout=20)
    assert client.invoke(FunctionName="hold-reserved-1", Payload=payload)["StatusCode"] == 200
    assert endpoint.local.stats()["hold-reserved-1"].throttles >= 1  # botocore may have retried the 429


def test_a_throttled_event_waits_and_runs_once_the_function_is_free_using_no_retry(
    client: Any, tmp_path: Path, endpoint: InvokeEndpoint, failures: FailureRecorder
) -> None:
    # GIVEN a function with a reserved concurrency of 1 (no retries), its one environment busy
    payload = json.dumps({"dir": str(tmp_path)}).encode()
    busy = threading.Thread(target=lambda: client.invoke(FunctionName="hold-reserved-1", Payload=payload))
    busy.start()
    wait_until(lambda: any(tmp_path.glob("started-*")), what="the first invocation to start")

    # WHEN an event for it comes, and the environment is freed a little later
    assert client.invoke(FunctionName="hold-reserved-1", InvocationType="Event", Payload=payload)["StatusCode"] == 202
    wait_until(lambda: endpoint.local.stats()["hold-reserved-1"].throttles >= 2, what="the event to be throttled")
    (tmp_path / "release").touch()
    busy.join(timeout=20)
    assert endpoint.wait_idle(timeout=20)

    # THEN the event ran (a throttle is no failed attempt), and nothing went to the on-failure destination
    assert len(list(tmp_path.glob("started-*"))) == 2
    assert failures.failed == []


def test_an_event_throttled_past_its_maximum_age_goes_to_on_failure_as_event_age_exceeded(
    client: Any, tmp_path: Path, endpoint: InvokeEndpoint, failures: FailureRecorder
) -> None:
    # GIVEN a function with a reserved concurrency of 0 (Lambda throttles every invocation) and events kept 1 s
    out = tmp_path / "runs.jsonl"
    payload = json.dumps({"out": str(out)}).encode()

    # WHEN an event for it comes
    response = client.invoke(FunctionName="count-reserved-0", InvocationType="Event", Payload=payload)
    assert response["StatusCode"] == 202
    assert endpoint.wait_idle(timeout=20)

    # THEN it never ran, and went to the on-failure destination as too old, with no error and no invocation, naming
    # the event's request id (the one its Invoke answered with)
    assert not out.exists()
    assert [(f.name, f.payload, f.condition, f.error, f.request_id, f.attempts) for f in failures.failed] == [
        ("count-reserved-0", payload, "EventAgeExceeded", None, response["ResponseMetadata"]["RequestId"], 0)
    ]
