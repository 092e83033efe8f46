"""A short `make chaos` run in `make test`: 20 chats, 5 at a time, faults on, kills, drops, POSTs cut before their
first byte and sent again with their key, poison, proxy events delivered twice."""

from __future__ import annotations

import pytest

from chaos.faults import FaultRates
from chaos.plan import ChaosSettings
from chaos.run import run

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


@pytest.mark.timeout(240)
def test_no_token_is_lost_or_duplicated_and_every_turn_ends_under_faults(aws_env: None) -> None:
    # GIVEN the local stack with AWS faults between the functions and the emulator, environments killed
    # mid-invocation, connections dropped and resumed, model errors, poison records on the stream, and proxy events
    # delivered twice (the default share; seed 7 draws 3 of the 20)
    settings = ChaosSettings(
        chats=20,
        concurrency=5,
        seed=7,
        rates=FaultRates.chaos(seed=7),
        poison_records=2,
        proxy_kills=1,
        consumer_kills=2,
        stale_turn_s=20,
        retry_budget_s=20,
        settle_timeout_s=40,
        run_timeout_s=120,
    )

    # WHEN the chats run to their end
    result = run(settings)

    # THEN every stream is exact (or its generation was lost with a proxy the run killed, and says so),
    # nothing is lost, duplicated or unfinished, and the DLQ holds exactly the poison records
    line = result.line()
    totals = result.totals
    assert result.problems == (), line
    assert (totals.lost_tokens, totals.duplicated_tokens, totals.unfinished_turns) == (0, 0, 0), line
    assert totals.failed_chats == 0, line
    assert totals.other_lost_generations == 0, line
    assert totals.killed_generations <= result.proxy_kills, line
    assert totals.exact_streams == result.chats - totals.killed_generations, line
    assert (result.dlq.poison_in_dlq, result.dlq.unexpected_dlq) == (2, 0), line
    # AND the proxy dropped each event delivered twice (a second delivery the run killed may not have got that far),
    # and nothing else but the second events the relay sent for turns a retried POST joined unclaimed
    duplicates = result.duplicates
    assert duplicates.delivered - duplicates.failed <= duplicates.dropped, line
    assert duplicates.dropped <= duplicates.delivered + duplicates.reinvoked, line
    assert result.ok, line
    # AND the faults really happened: AWS faults in the functions' path, environments killed, connections dropped
    services = {kind.split("_", 1)[0] for kind in result.faults}
    assert {"kinesis", "dynamodb"} <= services, line
    assert result.proxy_kills >= 1 and result.consumer_kills >= 1, line
    assert totals.drops > 0 and totals.resumes >= totals.drops and totals.model_errors > 0, line
    assert result.duplicates.delivered > 0, line
    # AND a dropped stream resumed from a paced piece inside a record, exactly (the counts above)
    assert totals.mid_record_resumes > 0, line
    # AND chats called tools, and every call streamed and stored exactly (ids, names, arguments)
    assert totals.tool_chats > 0 and totals.wrong_tool_calls == 0, line
    # AND POSTs cut before their first byte were sent again with their key, and none started a second turn
    assert totals.cut_posts > 0 and result.duplicated_generations == 0, line
