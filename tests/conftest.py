"""Fixtures shared by every test tier."""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from hypothesis import settings
from moto import mock_aws

from chatstream.table import ChatTable
from chatstream_local.moto.fixes import FIXES
from chatstream_local.resources import create_queue, create_stream, create_table
from chatstream_local.stack import LocalStack, StackSettings
from chatstream_local.template import Template
from tests.support import FUZZ_SEED_VARIABLE, fuzz_seed, isolate_aws

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient

    from chatstream_local.moto.patch import Patches

REGION = "us-east-1"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Every hypothesis test draws fresh examples in every run, CI's included, from the run's seed (``fuzz_seed``),
    printed when a test fails, unless ``--hypothesis-seed`` names one (set before hypothesis's plugin reads that
    option). Hypothesis's own ``ci`` profile, which it loads when ``CI`` is set, would draw the same examples in every
    run: this profile keeps its other settings and draws afresh; a failure also prints the exact failing example's
    ``@reproduce_failure``."""
    current = settings.get_profile(settings.get_current_profile_name())
    settings.register_profile("chatstream", parent=current, derandomize=False, print_blob=True)
    settings.load_profile("chatstream")
    if config.getoption("hypothesis_seed", None) is None:
        config.option.hypothesis_seed = str(fuzz_seed())


def pytest_report_header(config: pytest.Config) -> str:
    return f"random examples: seed {fuzz_seed()}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    """On failure, how to draw this run's random examples again."""
    if exitstatus != 0:
        seed = config.getoption("hypothesis_seed", None) or fuzz_seed()
        terminalreporter.write_line(
            f"random examples of this run: seed {seed}; {FUZZ_SEED_VARIABLE}={seed} draws them again "
            "(hypothesis's and schemathesis's; hypothesis also prints a failing example's @reproduce_failure)"
        )


@pytest.fixture(scope="session", autouse=True)
def moto_patches() -> Iterator[Patches]:
    """moto with the local stack's patches (chatstream_local.moto.fixes) for the whole session, undone at its end:
    in-process moto (``mock_aws``, a threaded moto server) behaves as the local stack's moto server does."""
    FIXES.apply()
    yield FIXES
    FIXES.undo()


@pytest.fixture(autouse=True)
def package_logger() -> Iterator[None]:
    """chatstream's package logger as the test found it: a function loaded in a test (``load_function``) hands it
    that function's Logger (chatstream/logs.py), which stops it propagating to the root logger, where ``caplog``
    listens."""
    package = logging.getLogger("chatstream")
    kept = (package.level, package.propagate, list(package.handlers))
    yield
    package.level, package.propagate, package.handlers = kept[0], kept[1], kept[2]


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fake credentials and a region, and none of the developer's AWS configuration (``isolate_aws``), so nothing
    can reach a real account or leave moto."""
    isolate_aws(monkeypatch, tmp_path)


@pytest.fixture
def template() -> Template:
    return Template.load(region=REGION)


@pytest.fixture
def moto(aws_env: None) -> Iterator[None]:
    """moto in-process, with the local stack's patches (``moto_patches``: atomic conditional writes among them);
    Bedrock passes through, to the local model over loopback."""
    with mock_aws(config={"core": {"passthrough": {"services": ["bedrock-runtime"]}}}):
        yield


@pytest.fixture
def dynamodb(moto: None) -> DynamoDBClient:
    return boto3.client("dynamodb", region_name=REGION)


@pytest.fixture
def kinesis(moto: None) -> KinesisClient:
    return boto3.client("kinesis", region_name=REGION)


@pytest.fixture
def table_name(dynamodb: DynamoDBClient, template: Template) -> str:
    return create_table(dynamodb, template)


@pytest.fixture
def stream_name(kinesis: KinesisClient, template: Template) -> str:
    return create_stream(kinesis, template, shard_count=1)  # one shard: tests read the stream in order


@pytest.fixture
def chat_table(dynamodb: DynamoDBClient, table_name: str) -> ChatTable:
    return ChatTable(dynamodb, table_name, sleep=lambda _: None)


@pytest.fixture
def queue_url(moto: None, template: Template) -> str:
    return create_queue(boto3.client("sqs", region_name=REGION), template, "ProxyFailureQueue")


@pytest.fixture
def start_stack(aws_env: None) -> Iterator[Callable[..., LocalStack]]:
    """Start local stacks (port 0, model delay 0 by default; ``log`` gets the stack's log lines); every one is
    stopped at teardown."""
    with _stacks() as start:
        yield start


@contextlib.contextmanager
def _stacks() -> Iterator[Callable[..., LocalStack]]:
    """What starts a local stack with the tests' defaults (port 0, model delay 0), every one stopped on the way out."""
    stacks: list[LocalStack] = []

    def start(log: Callable[[str, str], None] | None = None, **settings: Any) -> LocalStack:
        settings.setdefault("port", 0)
        settings.setdefault("model_delay_ms", 0)
        stack = LocalStack(StackSettings(**settings), log=log)
        stacks.append(stack)
        return stack.start()

    try:
        yield start
    finally:
        for stack in stacks:
            stack.stop()


@pytest.fixture(scope="module")
def start_module_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., LocalStack]]:
    """``start_stack`` for stacks a module's tests share (a stack takes seconds to start): the same defaults, under
    ``isolate_aws`` for the module's tests, every stack stopped after the last of them. The tests that share one use
    sessions of their own, so none sees another's; one that reads the whole table counts what it added."""
    with pytest.MonkeyPatch.context() as patch:
        isolate_aws(patch, tmp_path_factory.mktemp("aws"))
        with _stacks() as start:
            yield start
