"""The chat page signing in, in a real browser (Debian's Chromium, driven by Playwright), against the local stack in the
JWT mode: its local issuer's form, two users in two browser contexts, a signed-out page, and an expired token while a
reply streams.

The relay's streams here end with ``event: reconnect`` every few seconds (``RECONNECT_MARGIN_S`` near the function's
timeout), as a deployed relay's do before its time runs out: the page then resumes the reply with a new request, whose
token is checked again. Each page still asserts that it made no request beyond the relay's origin and its issuer's,
broke no Content-Security-Policy rule, and threw no error.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import expect

from chatstream_local.stack import LocalStack, StackSettings
from tests.e2e.test_browser import MODEL_DELAY_MS, ChatPage, long_reply
from tests.e2e.test_browser import browser as browser  # the module's Chromium (a fixture)
from tests.support import isolate_aws

if TYPE_CHECKING:
    from collections.abc import Iterator

    from playwright.sync_api import Browser, BrowserContext

pytestmark = pytest.mark.e2e

# The relay's function runs 900 s; a stream ends with `reconnect` this long before: ~7 s after it began.
RECONNECT_MARGIN_S = "893"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with pytest.MonkeyPatch.context() as patch:
        isolate_aws(patch, tmp_path_factory.mktemp("aws"))
        settings = StackSettings(
            port=0,
            model_delay_ms=MODEL_DELAY_MS,
            parameter_overrides={"FunctionUrlAuthType": "JWT"},
            function_overrides={"RelayFunction": {"RECONNECT_MARGIN_S": RECONNECT_MARGIN_S}},
        )
        local = LocalStack(settings)
        try:
            yield local.start()
        finally:
            local.stop()


@pytest.fixture
def contexts(browser: Browser) -> Iterator[list[BrowserContext]]:
    """Browser contexts a test opens (each with its own storage: two people), closed after it."""
    opened: list[BrowserContext] = []
    yield opened
    for context in opened:
        context.close()


def open_page(browser: Browser, contexts: list[BrowserContext], stack: LocalStack) -> ChatPage:
    assert stack.issuer_url is not None
    context = browser.new_context(viewport={"width": 1000, "height": 720})
    contexts.append(context)
    return ChatPage.new(context, stack.url, others=(stack.issuer_url,))


def sign_in(chat: ChatPage, user: str) -> None:
    """Press Sign in, name the user on the issuer's form, and come back signed in."""
    chat.page.get_by_role("button", name="Sign in").click()
    chat.page.get_by_label("User name").fill(user)
    chat.page.get_by_role("button", name="Sign in").click()
    expect(chat.page.locator("#who")).to_have_text(f"Signed in as {user}")


def stored_tokens(chat: ChatPage) -> dict[str, object]:
    return dict(json.loads(chat.page.evaluate("sessionStorage.getItem('chatstream.auth')")))


def history(chat: ChatPage) -> dict[str, object]:
    """The conversation's history, asked with the page's own token."""
    token = stored_tokens(chat)["access_token"]
    response = chat.page.request.get(
        f"{chat.url}/sessions/{chat.session_id()}", headers={"Authorization": f"Bearer {token}"}
    )
    assert response.ok, response.text()
    return dict(response.json())


def test_a_signed_out_page_cannot_chat(browser: Browser, contexts: list[BrowserContext], stack: LocalStack) -> None:
    # GIVEN the page, not signed in
    chat = open_page(browser, contexts, stack)
    posts: list[str] = []
    chat.page.route("**/chat", lambda route: (posts.append(route.request.method), route.continue_()))
    chat.open()
    # THEN it offers to sign in, says why, and Send is off
    expect(chat.page.get_by_role("button", name="Sign in")).to_be_visible()
    expect(chat.page.locator("#status")).to_have_text("Sign in to chat.")
    expect(chat.page.locator("#send")).to_be_disabled()
    # WHEN a message is submitted all the same (Enter in the box) THEN nothing is sent, and the page says to sign in
    chat.send("hello?")
    expect(chat.page.get_by_role("alert")).to_have_text("Sign in to chat.")
    expect(chat.turns()).to_have_count(0)
    assert posts == []
    assert chat.problems.seen == []


def test_two_users_each_see_only_their_own_history(
    browser: Browser,
    contexts: list[BrowserContext],
    stack: LocalStack,
) -> None:
    # GIVEN alice and bob, each signed in through the issuer's form in a browser of their own, each with a reply
    alice, bob = open_page(browser, contexts, stack), open_page(browser, contexts, stack)
    for chat, user in ((alice, "alice"), (bob, "bob")):
        chat.open()
        sign_in(chat, user)
        chat.send(f"hello from {user}")
        assert chat.wait_status("complete") == f"You said: hello from {user}"
    sessions = {"alice": alice.session_id(), "bob": bob.session_id()}
    assert sessions["alice"] != sessions["bob"]
    # WHEN each reloads THEN each sees their own history, as their own (no notice)
    for chat, user in ((alice, "alice"), (bob, "bob")):
        chat.page.reload()
        expect(chat.turns().locator(".assistant .text")).to_have_text([f"You said: hello from {user}"])
        expect(chat.page.locator("#shared")).to_be_hidden()
    # WHEN bob opens alice's conversation by its link THEN it is not found for him, and nothing of hers is shown
    bob.page.goto(f"{stack.url}/#session={sessions['alice']}")
    expect(bob.page.get_by_role("alert")).to_contain_text("That conversation was not found")
    expect(bob.turns()).to_have_count(0)
    assert "hello from alice" not in (bob.page.locator("body").text_content() or "")
    # AND the sessions the page remembers are each user's own list
    remembered = alice.page.evaluate("Object.keys(localStorage).filter((key) => key.startsWith('chatstream.sessions'))")
    assert remembered == [f"chatstream.sessions:{stack.issuer_url}#alice"]
    # AND signing out ends the conversation on screen and turns Send off
    alice.page.get_by_role("button", name="Sign out").click()
    expect(alice.page.get_by_role("button", name="Sign in")).to_be_visible()
    expect(alice.turns()).to_have_count(0)
    expect(alice.page.locator("#send")).to_be_disabled()
    assert alice.page.evaluate("sessionStorage.getItem('chatstream.auth')") is None
    for chat in (alice, bob):
        assert chat.problems.seen == []


def expire_the_token(chat: ChatPage, stack: LocalStack, *, keep_refresh_token: bool) -> None:
    """The page's access token replaced by one of the same user that expired two minutes ago (as if the reply had
    outlived it); without its refresh token, the page cannot renew it."""
    assert stack.issuer is not None
    tokens = stored_tokens(chat)
    tokens["access_token"] = stack.issuer.issuer.mint("alice", lifetime_s=-120)
    tokens["expires_at"] = None  # the page does not know: it learns from the relay's 401
    if not keep_refresh_token:
        tokens["refresh_token"] = None
    chat.page.evaluate("tokens => sessionStorage.setItem('chatstream.auth', JSON.stringify(tokens))", tokens)


@pytest.mark.parametrize("renewable", [True, False], ids=["renewed", "signed in again"])
def test_an_expired_token_while_a_reply_streams_loses_nothing(
    browser: Browser,
    contexts: list[BrowserContext],
    stack: LocalStack,
    renewable: bool,
) -> None:
    # GIVEN alice signed in, a long reply streaming (its stream ends with `reconnect` after a few seconds)
    chat = open_page(browser, contexts, stack)
    chat.open()
    sign_in(chat, "alice")
    resumes: list[int] = []
    chat.page.on("response", lambda response: resumes.append(response.status) if "/events" in response.url else None)
    words = 400  # 30 ms a word: ~12 s, past the stream's first reconnect
    chat.send(f"/long {words}")
    expect(chat.reply().locator(".text")).to_contain_text("w1 ")
    session_id = chat.session_id()
    # WHEN its token expires before the page resumes the reply
    expire_the_token(chat, stack, keep_refresh_token=renewable)
    if renewable:
        # THEN the resume is refused 401, the page renews the token with its refresh token and resumes at once
        assert chat.wait_status("complete") == long_reply(words)
        assert 401 in resumes and resumes[-1] == 200
    else:
        # THEN, unable to renew it, the page signs in again: the issuer's form, then back to the same conversation
        expect(chat.page.get_by_label("User name")).to_be_visible()
        chat.page.get_by_label("User name").fill("alice")
        chat.page.get_by_role("button", name="Sign in").click()
        expect(chat.page.locator("#who")).to_have_text("Signed in as alice")
        assert chat.session_id() == session_id
        # AND the reply under way is followed to its end, whole, in the same conversation
        assert chat.wait_status("complete") == long_reply(words)
        expect(chat.turns()).to_have_count(1)
    turns = history(chat)["turns"]
    assert isinstance(turns, list) and turns[-1]["assistant"] == long_reply(words)
    assert chat.session_id() == session_id
    assert chat.problems.seen == []
