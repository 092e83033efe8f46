"""One moto DynamoDB table per test module for the relay's core (service, follower, page).

Creating a table from template.yaml costs a few hundred milliseconds; these tests only ever use fresh
sessions (128-bit random ids), so they can share one table without seeing each other. Here
``chat_table`` and ``table_name`` are that table (they override the per-test table of tests/conftest.py,
which the relay's handler tests keep: tests/unit/test_relay_handler.py, whose samples share fixed ids).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import boto3
import pytest
from moto import mock_aws

from chatstream.table import ChatTable
from chatstream_local.resources import create_table
from chatstream_local.template import Template
from tests.support import isolate_aws

if TYPE_CHECKING:
    from collections.abc import Iterator

REGION = "us-east-1"


@dataclass(frozen=True)
class SharedTable:
    table: ChatTable
    name: str


@pytest.fixture(scope="module")
def shared_table(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedTable]:
    with pytest.MonkeyPatch.context() as patch:
        isolate_aws(patch, tmp_path_factory.mktemp("aws"))
        with mock_aws():
            client = boto3.client("dynamodb", region_name=REGION)
            name = create_table(client, Template.load(region=REGION))
            yield SharedTable(ChatTable(client, name, sleep=lambda _: None), name)


@pytest.fixture
def chat_table(shared_table: SharedTable) -> ChatTable:
    return shared_table.table


@pytest.fixture
def table_name(shared_table: SharedTable) -> str:
    return shared_table.name
