"""The chaos run's plan: the same seed sends the same chats, every kind of chat is in even a short run, and the
poison records are not token records."""

from __future__ import annotations

import pytest

from chaos.plan import ChaosSettings, ChatPlan, plan_chats, poison_payload
from chatstream.errors import InvalidRecord
from chatstream.records import TokenRecord
from chatstream_local.bedrock.model import plan_reply


def test_the_same_seed_plans_the_same_chats_and_another_seed_does_not() -> None:
    # GIVEN two runs with seed 7 and one with seed 8
    first, again = plan_chats(ChaosSettings(chats=50, seed=7)), plan_chats(ChaosSettings(chats=50, seed=7))
    other = plan_chats(ChaosSettings(chats=50, seed=8))

    # THEN the seed decides every chat
    assert first == again
    assert first != other
    assert [plan.index for plan in first] == list(range(50))


def test_seed_0_plans_what_make_chaos_sends() -> None:
    # The first chats of `make chaos` (seed 0): a changed plan changes what the committed chaos line measured.
    plans = plan_chats(ChaosSettings(chats=5, seed=0))

    assert [(plan.message.split(":")[0], plan.drop_after, bool(plan.tools)) for plan in plans] == [
        ("chaos chat 0", None, False),
        ("/error-after 56", None, False),
        ("/long 40", 3, False),
        ("chaos tools 3", 3, True),
        ("/long 5", None, False),
    ]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_even_four_chats_hold_one_of_each_kind_and_dropped_connections(seed: int) -> None:
    plans = plan_chats(ChaosSettings(chats=4, seed=seed))

    assert plans[0].message.startswith("chaos chat 0") and plans[0].cut_post
    assert plans[1].model_fails
    assert plans[2].message.startswith("/long ") and plans[2].drop_after is not None
    # a tool chat whose call's arguments span many records, dropped inside them
    assert plans[3].tools and plans[3].drop_after is not None
    (call,) = plans[3].expected_calls
    assert len(call.arguments) > 4000 and plans[3].expected_text.startswith("You said: chaos tools 3")


def test_tool_chats_make_parallel_calls_with_arguments_from_none_to_long() -> None:
    plans = [plan for plan in plan_chats(ChaosSettings(chats=300, seed=5)) if plan.tools]
    # THEN about the tool rate of the plain text chats declare tools, and their calls vary in number and length
    assert 0.1 < len(plans) / 300 < 0.3
    assert {len(plan.expected_calls) for plan in plans} == {1, 2, 3}
    lengths = {len(call.arguments) for plan in plans for call in plan.expected_calls}
    assert min(lengths) == len("{}") and max(lengths) > 4000
    # AND the other chats are what the seed made them without tools
    untouched = plan_chats(ChaosSettings(chats=300, seed=5, tool_rate=0.0))
    assert [(p.index, p.drop_after) for p in plan_chats(ChaosSettings(chats=300, seed=5))] == [
        (p.index, p.drop_after) for p in untouched
    ]


def test_the_rates_shape_a_long_run() -> None:
    # GIVEN a long run with a tenth of model errors and a quarter of drops
    plans = plan_chats(ChaosSettings(chats=2000, seed=3, model_error_rate=0.1, drop_rate=0.25))

    # THEN about that many chats fail in the model and drop their connection
    failing = sum(plan.model_fails for plan in plans) / len(plans)
    dropping = sum(plan.drop_after is not None for plan in plans) / len(plans)
    cut = sum(plan.cut_post for plan in plans) / len(plans)
    assert 0.07 < failing < 0.13
    assert 0.21 < dropping < 0.29
    assert 0.12 < cut < 0.18  # the default cut_rate, 0.15
    # AND each chat's key is its own
    assert len({plan.idempotency_key for plan in plans}) == len(plans)
    # AND with no model errors and no drops planned, none happen (but the first four's)
    calm = plan_chats(ChaosSettings(chats=200, seed=3, model_error_rate=0.0, drop_rate=0.0))
    assert sum(plan.model_fails for plan in calm[4:]) == 0
    assert sum(plan.drop_after is not None for plan in calm[4:]) == 0


def test_a_plan_expects_the_local_models_reply() -> None:
    plan = ChatPlan(index=0, message="/error-after 3", drop_after=None)

    assert plan.expected_text == plan_reply("/error-after 3").text == "w1 w2 w3"
    assert plan.model_fails


@pytest.mark.parametrize("n", range(10))
def test_every_poison_payload_is_rejected_as_a_token_record_and_unique(n: int) -> None:
    payload = poison_payload("s-1", n)

    with pytest.raises(InvalidRecord):
        TokenRecord.decode(payload)
    assert payload not in {poison_payload("s-1", other) for other in range(10) if other != n}
