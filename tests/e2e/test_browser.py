"""The chat page in a real browser: headless Debian Chromium, driven by Playwright, against the local stack.

Chromium comes from Debian (``make browser-deps`` installs the ``chromium`` package when apt-get can);
Playwright only drives it through ``executable_path`` and never downloads a browser. Where it is
missing, every test here skips, naming what is missing (under ``CI=true`` every test fails instead).

Every page the tests open collects uncaught script errors, Content-Security-Policy violations (the
``securitypolicyviolation`` events the page fires, and the console's reports) and requests to any other
origin, and each test ends by asserting there were none.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import shutil
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect, sync_playwright

from chatstream_client.api import OUTAGE_S, READ_TIMEOUT_S, ChatClient
from chatstream_client.retry import REFUSALS, RETRYABLE, RetryPolicy
from chatstream_local.stack import LocalStack, StackSettings
from tests.support import isolate_aws, require_or_skip

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, Request, Route

pytestmark = pytest.mark.e2e

CHROMIUM = Path(os.environ.get("CHATSTREAM_CHROMIUM", "/usr/bin/chromium"))
# As root, on a machine whose network is closed: no sandbox, no GPU, no background connections.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
MODEL_DELAY_MS = 30  # the local model's pace: slow enough to see a reply grow
WAIT_MS = 30_000  # how long a condition may take on a busy machine before the test fails


def long_reply(words: int) -> str:
    return " ".join(f"w{i}" for i in range(1, words + 1))


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    require_or_skip(
        CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK),
        f"Chromium is not installed at {CHROMIUM}: `make browser-deps` installs Debian's chromium package "
        "(it needs apt-get, as root or with passwordless sudo)",
    )
    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as playwright:
        # Playwright gives every launch a fresh, empty profile directory of its own.
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """One local stack for the module (a few seconds to start); every test uses sessions of its own."""
    with pytest.MonkeyPatch.context() as patch:
        isolate_aws(patch, tmp_path_factory.mktemp("aws"))
        local = LocalStack(StackSettings(port=0, model_delay_ms=MODEL_DELAY_MS))
        try:
            yield local.start()
        finally:
            local.stop()


# Runs in every page before its own scripts (Playwright adds it outside the page's policy): each violation the
# page's Content-Security-Policy reports is handed to the test.
REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (event) => {
  const where = `${event.sourceFile}:${event.lineNumber}`;
  window.reportViolation(`${event.effectiveDirective} blocked ${event.blockedURI || "inline"} (${where})`);
});
"""


@dataclass
class Problems:
    """Uncaught script errors, policy violations and requests to another origin that a page made."""

    origin: str
    seen: list[str] = field(default_factory=list)
    others: tuple[str, ...] = ()  # origins the page may reach too (under the JWT mode, its issuer's)

    def console(self, message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            self.seen.append(f"console: {message.text}")

    def violation(self, source: Any, report: str) -> None:
        self.seen.append(f"securitypolicyviolation: {report}")

    def request(self, request: Request) -> None:
        if not request.url.startswith(tuple(origin + "/" for origin in (self.origin, *self.others))):
            self.seen.append(f"request to another origin: {request.method} {request.url}")


@dataclass
class ChatPage:
    """The page under test, with the few things a user does on it."""

    page: Page
    url: str
    problems: Problems

    @classmethod
    def new(cls, context: BrowserContext, url: str, others: tuple[str, ...] = ()) -> ChatPage:
        page = context.new_page()
        problems = Problems(url, others=others)
        page.on("pageerror", lambda error: problems.seen.append(f"pageerror: {error}"))
        page.on("console", problems.console)
        page.on("request", problems.request)
        page.expose_binding("reportViolation", problems.violation)
        page.add_init_script(REPORT_VIOLATIONS)
        return cls(page, url, problems)

    def open(self, fragment: str = "") -> None:
        self.page.goto(f"{self.url}/{fragment}")
        expect(self.page.locator("#message")).to_be_focused()

    def send(self, message: str) -> None:
        """Type a message and press Enter, as a keyboard user would."""
        box = self.page.locator("#message")
        box.fill(message)
        box.press("Enter")

    def turns(self) -> Any:
        return self.page.locator("#transcript > li")

    def reply(self) -> Any:
        """The last reply on the page."""
        return self.turns().last.locator(".assistant")

    def wait_status(self, status: str) -> str:
        """Wait until the last reply has ``status``; return its text."""
        reply = self.reply()
        expect(reply).to_have_attribute("data-status", status)
        return str(reply.locator(".text").text_content())

    def session_id(self) -> str:
        fragment = self.page.evaluate("location.hash")
        assert fragment.startswith("#session="), fragment
        return str(fragment.removeprefix("#session="))

    def counts(self, *names: str) -> dict[str, int]:
        """What the page counted for the last turn: ``retries``, ``resumes`` (unplanned), ``repeated`` ids."""
        turn = self.turns().last
        return {name: int(turn.get_attribute(f"data-{name}") or 0) for name in names or ("repeated", "resumes")}

    def history(self) -> dict[str, Any]:
        response = self.page.request.get(f"{self.url}/sessions/{self.session_id()}")
        assert response.ok, response.text()
        return dict(response.json())


@pytest.fixture
def chat(browser: Browser, stack: LocalStack) -> Iterator[ChatPage]:
    context = browser.new_context(viewport={"width": 1000, "height": 720})
    page = ChatPage.new(context, stack.url)
    yield page
    context.close()
    assert page.problems.seen == []


# --------------------------------------------------------------------------------- streaming


# The first message of the screenshot's conversation: a reply in Markdown above the one streaming.
FIRST = (
    "**Markdown**, as it streams:\n\n- *emphasis* and `code`\n- a [link](https://example.com)\n\n```sh\nmake local\n```"
)


def test_a_reply_streams_in_and_the_text_grows(chat: ChatPage, tmp_path: Path) -> None:
    # GIVEN the page, and a first exchange in a new session, its reply in Markdown
    chat.open()
    chat.send(FIRST)
    assert chat.wait_status("complete").startswith("You said: Markdown, as it streams:")
    expect(chat.reply().locator(".text pre")).to_have_text("make local\n")
    # WHEN the user asks for a long reply (Enter sends; the model writes a word every 30 ms)
    chat.send("/long 200")
    expect(chat.reply().locator(".text")).to_contain_text("w12")
    shot = tmp_path / "mid-stream.png"
    chat.page.screenshot(path=str(shot))
    partial = str(chat.reply().locator(".text").text_content())
    # THEN the reply ends complete, and what was on screen mid-stream was a strict prefix of it
    final = chat.wait_status("complete")
    assert final == long_reply(200)
    assert partial.startswith("w1 w2 w3") and final.startswith(partial) and len(partial) < len(final)
    assert shot.stat().st_size > 0
    if target := os.environ.get("CHATSTREAM_SCREENSHOT"):  # `make screenshot` refreshes the README's image
        shutil.copyfile(shot, target)
    # AND both turns belong to one session, kept in the URL and in the history
    history = chat.history()
    assert [(t["user"], t["status"], t["assistant"]) for t in history["turns"]] == [
        (FIRST, "complete", f"You said: {FIRST}"),
        ("/long 200", "complete", long_reply(200)),
    ]
    expect(chat.page.locator("#send")).to_be_enabled()
    expect(chat.page.locator("#stop")).to_be_hidden()


# Every write to the status line (a polite live region: each one may be read out), as the words it left.
WATCH_STATUS = """
() => {
  window.statusWrites = [];
  const status = document.getElementById("status");
  new MutationObserver((records) => {
    for (const record of records) {
      const added = record.type === "childList" ? Array.from(record.addedNodes, (node) => node.textContent) : [];
      window.statusWrites.push(record.type === "childList" ? added.join("") : record.target.data);
    }
  }).observe(status, { childList: true, characterData: true, subtree: true });
}
"""


def test_the_status_line_is_written_only_when_its_words_change(chat: ChatPage) -> None:
    # GIVEN the page, its status line watched
    chat.open()
    chat.page.evaluate(WATCH_STATUS)
    # WHEN a reply of 40 words streams in, then one that reasons first
    chat.send("/long 40")
    assert chat.wait_status("complete") == long_reply(40)
    chat.send("/think 20 hi")
    assert chat.wait_status("complete") == "You said: hi"
    # THEN the status line was written once for each thing it said, never again for each token
    assert chat.page.evaluate("window.statusWrites") == [
        "Sending…",
        "Receiving…",
        "Reply complete.",
        "Sending…",
        "Thinking…",
        "Receiving…",
        "Reply complete.",
    ]


def test_stop_ends_the_turn_as_cancelled(chat: ChatPage) -> None:
    # GIVEN a reply that would take minutes, streaming
    chat.open()
    chat.send("/long 5000")
    expect(chat.reply().locator(".text")).to_contain_text("w5")
    # WHEN the user presses Stop
    chat.page.get_by_role("button", name="Stop").click()
    # THEN the turn ends as cancelled on the page, keeping the text generated so far
    text = chat.wait_status("cancelled")
    expect(chat.reply().locator(".note")).to_contain_text("cancelled")
    assert text.startswith("w1 w2 w3 w4 w5") and long_reply(5000).startswith(text) and text != long_reply(5000)
    expect(chat.page.locator("#stop")).to_be_hidden()
    # AND the history says cancelled, with the same text
    turn = chat.history()["turns"][-1]
    assert (turn["status"], turn["stop_reason"], turn["assistant"]) == ("cancelled", "cancelled", text)


def test_a_reload_shows_the_history_and_new_chat_starts_over(chat: ChatPage) -> None:
    # GIVEN a conversation of two turns
    chat.open()
    chat.send("first message")
    chat.wait_status("complete")
    chat.send("/long 5")
    chat.wait_status("complete")
    first_session = chat.session_id()
    # WHEN the page is reloaded
    chat.page.reload()
    # THEN both turns are back, from the history, in order and exact
    expect(chat.turns()).to_have_count(2)
    assert chat.turns().locator(".user .text").all_text_contents() == ["first message", "/long 5"]
    assert chat.turns().locator(".assistant .text").all_text_contents() == ["You said: first message", long_reply(5)]
    # AND the conversation goes on in the same session
    chat.send("third")
    assert chat.wait_status("complete") == "You said: third"
    assert chat.session_id() == first_session and len(chat.history()["turns"]) == 3
    # WHEN the user starts a new chat
    chat.page.get_by_role("button", name="New chat").click()
    # THEN the page is empty, and the next message starts another session
    expect(chat.turns()).to_have_count(0)
    assert chat.page.evaluate("location.hash") == ""
    chat.send("hello again")
    assert chat.wait_status("complete") == "You said: hello again"
    assert chat.session_id() != first_session and len(chat.history()["turns"]) == 1


def test_back_returns_from_a_new_chat_to_the_conversation_before_it(chat: ChatPage) -> None:
    # GIVEN a conversation, then a new chat with a conversation of its own
    chat.open()
    chat.send("conversation A")
    chat.wait_status("complete")
    first = chat.session_id()
    chat.page.get_by_role("button", name="New chat").click()
    expect(chat.turns()).to_have_count(0)
    chat.send("conversation B")
    chat.wait_status("complete")
    second = chat.session_id()
    # WHEN the user goes Back
    chat.page.go_back()
    # THEN the first conversation is shown again, and the URL names it
    expect(chat.turns().locator(".user .text")).to_have_text(["conversation A"])
    assert chat.session_id() == first
    # AND Forward returns to the second
    chat.page.go_forward()
    expect(chat.turns().locator(".user .text")).to_have_text(["conversation B"])
    assert chat.session_id() == second != first


def test_a_turn_still_generating_is_followed_after_a_reload(chat: ChatPage) -> None:
    # GIVEN a long reply streaming
    chat.open()
    chat.send("/long 150")
    expect(chat.reply().locator(".text")).to_contain_text("w3")
    # WHEN the page is reloaded mid-stream (closing the connection is not a cancel)
    chat.page.reload()
    # THEN the page attaches to the turn and shows the whole reply once, complete
    assert chat.wait_status("complete") == long_reply(150)
    assert chat.history()["turns"][-1]["status"] == "complete"


def test_a_message_sent_while_another_window_replies_shows_that_reply_and_keeps_the_message(chat: ChatPage) -> None:
    # GIVEN a conversation on the page
    chat.open()
    chat.send("hello")
    chat.wait_status("complete")
    session_id = chat.session_id()
    # AND another client (another window, the CLI) starts a long reply in it that this page does not know of
    started = chat.page.request.post(
        f"{chat.url}/v1/responses",
        data=json.dumps(
            {
                "model": "chatstream",
                "input": "/long 150",
                "background": True,
                "previous_response_id": f"resp_{session_id}_1",
            }
        ),
        headers={"Content-Type": "application/json"},
    )
    assert started.ok, started.text()
    # WHEN the user sends a message here
    chat.send("mine")
    # THEN the page shows the conversation as it is, following the other reply live, says why, and keeps the message
    expect(chat.page.get_by_role("alert")).to_contain_text("Another window is replying")
    expect(chat.turns()).to_have_count(2)
    assert chat.page.locator("#message").input_value() == "mine"
    assert chat.wait_status("complete") == long_reply(150)
    # AND once it ended, the message goes out as the conversation's next turn
    chat.page.locator("#message").press("Enter")
    expect(chat.turns()).to_have_count(3)
    chat.wait_status("complete")
    assert [turn["user"] for turn in chat.history()["turns"]] == ["hello", "/long 150", "mine"]


def test_reasoning_streams_into_a_collapsed_block_apart_from_the_answer(chat: ChatPage) -> None:
    # GIVEN the page WHEN the user asks the model to reason in 200 words first (6 s at 30 ms a word)
    chat.open()
    chat.send("/think 200 hello")
    block = chat.reply().locator("details.reasoning")
    # THEN the reasoning shows as it streams, in a collapsed block that says the model is thinking, and the
    # answer has not begun
    expect(block.locator(".reasoning-text")).to_contain_text("r5", use_inner_text=False)
    expect(block).not_to_have_attribute("open", "")
    expect(block.locator("summary")).to_contain_text("Thinking… (")
    assert chat.reply().locator(".text").text_content() == ""
    # THEN the answer is exactly the reply to "hello", the reasoning is all there and still collapsed, and looks
    # unlike the answer
    assert chat.wait_status("complete") == "You said: hello"
    reasoning = " ".join(f"r{i}" for i in range(1, 201))
    expect(block.locator(".reasoning-text")).to_have_text(reasoning, use_inner_text=False)
    expect(block.locator("summary")).to_have_text("Reasoning (200 words)")
    expect(block).not_to_have_attribute("open", "")
    styles = "(el) => getComputedStyle(el).fontStyle + ' ' + getComputedStyle(el).color"
    assert block.locator(".reasoning-text").evaluate(styles) != chat.reply().locator(".text p").evaluate(styles)
    # WHEN the user opens it THEN the reasoning is visible
    block.locator("summary").click()
    expect(block.locator(".reasoning-text")).to_be_visible()
    # AND the history keeps it apart from the answer, and a reload shows it the same way, collapsed
    turn = chat.history()["turns"][-1]
    assert (turn["assistant"], turn["reasoning"]) == ("You said: hello", reasoning)
    chat.page.reload()
    expect(chat.reply().locator(".text")).to_have_text("You said: hello")
    expect(block.locator(".reasoning-text")).to_have_text(reasoning, use_inner_text=False)
    expect(block).not_to_have_attribute("open", "")


def test_a_tool_call_shows_as_a_collapsed_block_and_the_reply_says_it_stopped_for_it(chat: ChatPage) -> None:
    # GIVEN a turn that declared a tool, started through the API (the page has no tools), whose model calls it with
    # arguments that stream for a few seconds
    arguments = json.dumps({"city": "Paris", "notes": " ".join(f"n{i}" for i in range(120))})
    started: queue.Queue[str] = queue.Queue()
    tools = [{"name": "get_weather", "parameters": {"type": "object"}}]

    def ask() -> None:
        with ChatClient(chat.url) as api:
            api.chat(f"/call get_weather {arguments}", tools=tools, on_meta=lambda turn: started.put(turn.session_id))

    asking = threading.Thread(target=ask, daemon=True)
    asking.start()
    session_id = started.get(timeout=WAIT_MS / 1000)
    # WHEN the page opens the conversation while the call streams
    chat.page.goto(f"{chat.url}/#session={session_id}")
    block = chat.reply().locator("details.tool-call")
    # THEN the call shows as it streams, collapsed, named, its arguments as plain text
    expect(block.locator("summary")).to_have_text("Tool call: get_weather …")
    expect(block).not_to_have_attribute("open", "")
    # AND once the turn ends the block holds the whole arguments, and the reply says it stopped to call a tool
    expect(chat.reply()).to_have_attribute("data-status", "complete", timeout=WAIT_MS)
    expect(block.locator("summary")).to_have_text("Tool call: get_weather")
    expect(block.locator(".tool-arguments")).to_have_text(arguments, use_inner_text=False)
    expect(chat.reply().locator(".note")).to_have_text(
        "Stopped to call a tool. This page has no tools: it cannot run the call."
    )
    asking.join(timeout=WAIT_MS / 1000)
    # AND a reload shows it the same way, from the history
    chat.page.reload()
    expect(block.locator(".tool-arguments")).to_have_text(arguments, use_inner_text=False)
    expect(block).not_to_have_attribute("open", "")
    block.locator("summary").click()
    expect(block.locator(".tool-arguments")).to_be_visible()


# ---------------------------------------------------------------------------------- safety


INJECTION = (
    '<img src=x onerror="window.__pwned = 1"><script>window.__pwned = 2</script><b>bold</b>'
    " [click](javascript:window.__pwned=3) [data](data:text/html,hi) <javascript:window.__pwned=4>"
    " [vb](VBScript:x) [file](file:///etc/passwd) [ftp](ftp://example.com/x)"
)


def test_markup_in_a_message_is_shown_as_text_and_runs_nothing(browser: Browser, stack: LocalStack) -> None:
    # GIVEN a page whose Content-Security-Policy is bypassed, so only the rendering stands between markup and the DOM
    context = browser.new_context(bypass_csp=True)
    chat = ChatPage.new(context, stack.url)
    page = chat.page
    message = INJECTION
    try:
        chat.open()
        # WHEN the message is sent, echoed back by the model and drawn as Markdown, and the history is drawn after a
        # reload
        chat.send(message)
        for _ in range(2):
            assert chat.wait_status("complete") == f"You said: {message}"
            # THEN the HTML and the links to other schemes are literal text: no element was made from them (the reply
            # is one paragraph of text), and no script ran
            assert chat.turns().locator(".user .text").all_text_contents() == [message]
            assert chat.reply().locator(".text > p").count() == 1
            assert page.locator("#transcript .text *:not(p)").count() == 0
            assert page.locator("#transcript img, #transcript script, #transcript b, #transcript a").count() == 0
            assert page.evaluate("window.__pwned") is None
            page.reload()
    finally:
        context.close()
    assert chat.problems.seen == []


# A page elsewhere posts a chat as a "simple" request (text/plain: its browser sends it without asking first), and
# tries to read the reply.
DRIVE_BY = """
async (url) => {
  try {
    const response = await fetch(`${url}/chat`, {
      method: "POST", headers: {"Content-Type": "text/plain"}, body: JSON.stringify({message: "drive-by"}),
    });
    return `read ${response.status}: ${await response.text()}`;
  } catch (error) {
    return `refused: ${error}`;
  }
}
"""


class _BlankPage(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", "9")
        self.end_headers()
        self.wfile.write(b"<p>hi</p>")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        return


@pytest.fixture
def elsewhere() -> Iterator[str]:
    """A page of another origin: another site the user has open, on another port of loopback (a public site's page
    is also held back by Chromium's Local Network Access, which a local one is not)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _BlankPage)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_a_page_of_another_origin_can_neither_drive_nor_read_the_stack(
    browser: Browser, stack: LocalStack, elsewhere: str
) -> None:
    # GIVEN a page on another origin, open in the same browser as the local stack's
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(elsewhere)
        # WHEN its script posts a chat to the stack and reads the answer
        outcome = page.evaluate(DRIVE_BY, stack.url)
    finally:
        context.close()
    # THEN the browser keeps the answer from the page (no CORS header allows its origin)
    assert outcome.startswith("refused: TypeError"), outcome
    # AND the stack refused the request itself: the message is nowhere in the table (the relay never ran)
    items = stack.client("dynamodb").scan(TableName=stack.name("ChatTable"))["Items"]
    assert not [item for item in items if "drive-by" in json.dumps(item)]


# --------------------------------------------------------------------------------- Markdown

MARKDOWN = """**bold** and *emphasis*, with `inline code` and a [link](https://example.com/docs?a=1&b=2)

## A heading

- one
- two

1. first
2. second

| name | value |
|:-----|------:|
| a    | 1     |

```python
print("<b>hi</b>")
```

Last line, and ![a chart](https://example.com/chart.png), [![a badge](https://example.com/badge.svg)](https://example.com/project)."""

# What the page built from the reply: tags, text, and the attributes that matter, read in one go.
READ_REPLY = """
(reply) => {
  const all = (selector) => Array.from(reply.querySelectorAll(selector));
  const texts = (selector) => all(selector).map((node) => node.textContent);
  return {
    blocks: Array.from(reply.children, (node) => node.tagName.toLowerCase()),
    strong: texts("p strong"), em: texts("p em"), inlineCode: texts(":not(pre) > code"), heading: texts("h2"),
    bullets: texts("ul > li"), numbered: texts("ol > li"), starts: all("ol").map((ol) => ol.start),
    last: reply.lastElementChild.textContent,
    header: texts("th"), cells: texts("td"), aligned: all("td").map((td) => td.className),
    code: all("pre code").map((code) => [code.textContent, code.dataset.language, code.parentElement.className]),
    links: all("a").map((a) => [a.textContent, a.getAttribute("href"), a.target, a.rel]),
    attributes: all("*").flatMap((node) => node.getAttributeNames().filter((name) => /^(style|on)/.test(name))),
  };
}
"""


def read_reply(chat: ChatPage) -> dict[str, Any]:
    return dict(chat.reply().locator(".text").evaluate(READ_REPLY))


def test_a_reply_in_markdown_is_shown_formatted(chat: ChatPage) -> None:
    # GIVEN the page WHEN the model replies in Markdown (the local model echoes the message after "You said: ")
    chat.open()
    chat.send(MARKDOWN)
    chat.wait_status("complete")
    # THEN the reply is shown formatted: paragraphs, emphasis, inline code, a heading, lists, a table (aligned by
    # class, never an inline style the policy forbids) and a code block whose markup stays text
    for shown in ("as it streamed", "from the history"):
        reply = read_reply(chat)
        assert reply["blocks"] == ["p", "h2", "ul", "ol", "table", "pre", "p"], shown
        assert (reply["strong"], reply["em"], reply["inlineCode"]) == (["bold"], ["emphasis"], ["inline code"])
        assert (reply["heading"], reply["bullets"], reply["numbered"]) == (
            ["A heading"],
            ["one", "two"],
            ["first", "second"],
        )
        assert (reply["header"], reply["cells"], reply["aligned"]) == (
            ["name", "value"],
            ["a", "1"],
            ["align-left", "align-right"],
        )
        assert reply["code"] == [['print("<b>hi</b>")\n', "python", ""]], shown
        assert reply["starts"] == [1] and reply["last"] == "Last line, and a chart, a badge.", shown
        # AND a link opens in a new tab, without an opener or a referrer; an image inside a link is that link's
        # text, never a link of its own inside it (HTML has no link in a link: the inner one would take the click)
        assert reply["links"] == [
            ["link", "https://example.com/docs?a=1&b=2", "_blank", "noopener noreferrer"],
            ["a chart", "https://example.com/chart.png", "_blank", "noopener noreferrer"],
            ["a badge", "https://example.com/project", "_blank", "noopener noreferrer"],
        ]
        # (an image is its alt text, a link to it, never loaded: the page requests nothing from another origin)
        assert chat.page.locator("#transcript img").count() == 0
        assert reply["attributes"] == []
        # (WHEN the page is reloaded THEN the history's text is drawn the same way)
        chat.page.reload()
        expect(chat.turns()).to_have_count(1)
    # AND the history keeps the text as the model wrote it
    assert chat.history()["turns"][-1]["assistant"] == f"You said: {MARKDOWN}"


WIDE_TABLE = (
    "| "
    + " | ".join(f"Column{i}" for i in range(8))
    + " |\n"
    + "|---" * 8
    + "|\n| "
    + " | ".join(
        ["DynamoDB", "Lambda", "Kinesis", "Bedrock", "CloudWatch", "EventBridge", "StepFunctions", "CloudFormation"]
    )
    + " |"
)

# Per table cell, the lines its text takes; whether the table scrolls sideways; each paragraph's direction.
READ_LAYOUT = """
(reply) => {
  const lines = (cell) => {
    const range = document.createRange();
    range.selectNodeContents(cell);
    return range.getClientRects().length;
  };
  const table = reply.querySelector("table");
  return {
    cellLines: Array.from(reply.querySelectorAll("th, td"), lines),
    scrolls: table !== null && table.scrollWidth > table.clientWidth,
    directions: Array.from(reply.querySelectorAll("p"), (p) => getComputedStyle(p).direction),
    links: Array.from(reply.querySelectorAll("a"), (a) => [a.textContent, a.getAttribute("href")]),
  };
}
"""


def test_a_wide_table_scrolls_with_its_words_whole_and_right_to_left_text_reads_so(chat: ChatPage) -> None:
    # GIVEN a phone-sized page WHEN the reply holds a table wider than the screen, then a line of Hebrew
    chat.page.set_viewport_size({"width": 360, "height": 740})
    chat.open()
    image = "![](https://example.com/x.png)"  # an image without alt text: a link still shows, named by its URL
    chat.send(f"A table {image}:\n\n{WIDE_TABLE}\n\nשלום עולם")  # the reply is "You said: " and the message
    chat.wait_status("complete")
    layout = chat.reply().locator(".text").evaluate(READ_LAYOUT)
    # THEN no cell breaks a word across lines: the table scrolls sideways instead
    assert layout["cellLines"] == [1] * 16 and layout["scrolls"]
    # AND the Hebrew paragraph runs right to left, the English one left to right
    assert layout["directions"] == ["ltr", "rtl"]
    assert layout["links"] == [["https://example.com/x.png", "https://example.com/x.png"]]


CODE_LINES = 200


def test_a_code_block_shows_as_code_while_its_fence_is_open(chat: ChatPage) -> None:
    # GIVEN a reply that is a long code block (a line every 30 ms), then a line of text
    lines = [f"line{i}" for i in range(1, CODE_LINES + 1)]
    chat.open()
    chat.send("code:\n```sh\n" + "\n".join(lines) + "\n```\nafter")
    # WHEN a few of its lines have arrived, its closing fence not yet
    seen = chat.page.wait_for_function(
        """() => {
          const reply = document.querySelector("#transcript > li:last-child .assistant");
          const code = reply && reply.querySelector(".text pre.open code");
          if (!code || !code.textContent.includes("line5")) return null;
          return {
            status: reply.dataset.status,
            blocks: Array.from(reply.querySelector(".text").children, (node) => node.tagName.toLowerCase()),
            code: code.textContent,
            language: code.dataset.language,
          };
        }""",
        timeout=WAIT_MS,
    ).json_value()
    # THEN the page shows a code block in progress: the lines so far as code, none of them as a paragraph
    assert seen["status"] == "streaming"
    assert seen["blocks"] == ["p", "pre"] and seen["language"] == "sh"
    received = seen["code"].rstrip("\n").split("\n")
    assert received == lines[: len(received)] and len(received) < CODE_LINES
    # AND when the fence closes the block is complete and the text after it is a paragraph
    chat.wait_status("complete")
    reply = read_reply(chat)
    assert reply["blocks"] == ["p", "pre", "p"]
    assert reply["code"] == [["\n".join(lines) + "\n", "sh", ""]]


# Each code block of a reply: its class, and the style of its bottom border (dashed: in progress).
CODE_BLOCKS_LOOK = """
(text) => Array.from(text.querySelectorAll("pre"), (pre) => [pre.className, getComputedStyle(pre).borderBottomStyle])
"""


def test_a_reply_that_ends_inside_a_code_block_no_longer_shows_it_in_progress(chat: ChatPage) -> None:
    # GIVEN a reply that is a long code block, streaming, its fence open
    lines = [f"line{i}" for i in range(1, CODE_LINES + 1)]
    chat.open()
    chat.send("code:\n```sh\n" + "\n".join(lines) + "\n```")
    expect(chat.reply().locator(".text pre.open code")).to_contain_text("line5")
    assert chat.reply().locator(".text").evaluate(CODE_BLOCKS_LOOK) == [["open", "dashed"]]
    # WHEN the user stops it before the fence closes
    chat.page.get_by_role("button", name="Stop").click()
    text = chat.wait_status("cancelled")
    # THEN the code so far is a plain code block: nothing marks it in progress any more, as it streamed or after a
    # reload (from the history)
    assert text.startswith("You said: code:line1\nline2")
    for shown in ("as it streamed", "from the history"):
        assert chat.reply().locator(".text").evaluate(CODE_BLOCKS_LOOK) == [["", "solid"]], shown
        chat.page.reload()
        chat.wait_status("cancelled")


# The page's renderer fed a reply as it streams, one character more each time: what each prefix draws.
FENCE_PREFIXES = r"""
(source) => {
  const { renderFragment } = window.ChatstreamMarkdown;
  const draw = (text) => {
    const box = document.createElement("div");
    box.append(renderFragment(text));
    const pres = Array.from(box.querySelectorAll("pre"));
    return {
      blocks: Array.from(box.children, (node) => node.tagName.toLowerCase() + (node.matches(".open") ? ".open" : "")),
      code: pres.map((pre) => pre.textContent),
      open: pres.map((pre) => pre.classList.contains("open")),
    };
  };
  const drawn = [];
  for (let end = 1; end <= source.length; end++) drawn.push(draw(source.slice(0, end)));
  return drawn;
}
"""


def test_every_prefix_of_a_fenced_reply_draws_its_code_as_code(chat: ChatPage) -> None:
    # GIVEN a reply with a fenced block, a fence inside a list and a fence of tildes that holds ``` lines
    first = "Intro\n```js\nlet a = 1;\n\nlet b = 2;\n```"
    in_list = first + "\nMiddle\n\n- item\n  ```\n  x"
    tildes = in_list + "\n  ```\n\n~~~~\n```\ny\n"
    source = tildes + "~~~~\nEnd"
    chat.open()
    # WHEN the page's renderer draws every prefix of it, as a stream would deliver it
    drawn = chat.page.evaluate(FENCE_PREFIXES, source)

    def at(prefix: str) -> dict[str, Any]:
        assert source.startswith(prefix)
        return dict(drawn[len(prefix) - 1])

    # THEN from the moment an opening fence line is complete until its closing line is, the block is a code block
    # marked open holding the lines received so far, never paragraphs; once closed it is a plain code block
    assert at("Intro\n```js\nlet a") == {"blocks": ["p", "pre.open"], "code": ["let a"], "open": [True]}
    assert at("Intro\n```js\nlet a = 1;\n\n")["blocks"] == ["p", "pre.open"]
    assert at(first[:-1])["code"] == ["let a = 1;\n\nlet b = 2;\n``"]
    assert at(first) == {"blocks": ["p", "pre"], "code": ["let a = 1;\n\nlet b = 2;\n"], "open": [False]}
    assert at(in_list)["blocks"] == ["p", "pre", "p", "ul"]
    assert (at(in_list)["code"], at(in_list)["open"]) == (["let a = 1;\n\nlet b = 2;\n", "x"], [False, True])
    assert (at(tildes)["code"][-1], at(tildes)["open"]) == ("```\ny\n", [False, False, True])
    # AND only ever the last code block is open
    for i, state in enumerate(drawn):
        assert True not in state["open"][:-1], (source[: i + 1], state)
    assert drawn[-1] == {
        "blocks": ["p", "pre", "p", "ul", "pre", "p"],
        "code": ["let a = 1;\n\nlet b = 2;\n", "x\n", "```\ny\n"],
        "open": [False, False, False],
    }


# ------------------------------------------------------------------------------ resumption


def event_id(event: str) -> str:
    return event.split("id: ", 1)[1].split("\n", 1)[0]


@pytest.mark.parametrize("ending", ["dropped mid-event", "reconnect event"])
def test_a_cut_stream_resumes_without_repeating_text(chat: ChatPage, ending: str) -> None:
    # GIVEN the first stream cut off inside a record, after a paced piece whose id is <seq>.<offset>: by the
    # network in the middle of the next event, or by the relay's own `reconnect` (what it sends before its time
    # limit, naming where to resume) (the route lets the real response arrive, then hands the page its beginning)
    cut: dict[str, str] = {}

    def cut_inside_a_record(route: Route) -> None:
        response = route.fetch()
        events = response.text().split("\n\n")
        tokens = [i for i, event in enumerate(events) if "event: token" in event]
        at = next(i for i in tokens if "." in event_id(events[i]))
        kept = events[: at + 1]
        cut["last_id"], cut["shown"] = event_id(events[at]), str(tokens.index(at) + 1)
        meta = json.loads(next(e for e in events if "event: meta" in e).split("data: ", 1)[1])
        if ending == "reconnect event":
            reconnect = {"events_url": meta["events_url"], "last_event_id": cut["last_id"]}
            tail = f"event: reconnect\ndata: {json.dumps(reconnect)}\n\n"
        else:
            tail = events[at + 1][: max(1, len(events[at + 1]) // 2)]
        route.fulfill(response=response, body="\n\n".join(kept) + "\n\n" + tail)

    resumes: list[str | None] = []

    def replay_from_the_start(route: Route) -> None:
        # AND a resume answered with the whole turn again, ids already shown included
        resumes.append(route.request.headers.get("last-event-id"))
        headers = {k: v for k, v in route.request.headers.items() if k.lower() != "last-event-id"}
        response = route.fetch(headers=headers)
        route.fulfill(response=response, body=response.text())

    chat.page.route("**/chat", cut_inside_a_record)
    chat.page.route("**/sessions/*/turns/*/events*", replay_from_the_start)
    chat.open()
    # WHEN a reply is streamed through that connection
    chat.send("/long 40")
    # THEN the page resumes once, asking for what comes after the last piece it saw, and shows every word once
    assert chat.wait_status("complete") == long_reply(40)
    assert resumes == [cut["last_id"]]
    assert chat.history()["turns"][-1]["assistant"] == long_reply(40)
    # AND it counts what it worked around: the ids sent again, and a resume only where the relay did not plan one
    assert chat.counts() == {"repeated": int(cut["shown"]), "resumes": 1 if ending == "dropped mid-event" else 0}


# ---------------------------------------------------------------------------------- retries

BUSY = {"error": {"code": "unavailable", "message": "the service is busy; try again in a second"}}
BAD_GATEWAY = {"Message": "Internal Server Error"}  # what a Function URL answers when the function failed


def json_answer(route: Route, status: int, body: dict[str, Any], retry_after: str | None = None) -> None:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    route.fulfill(status=status, headers=headers, content_type="application/json", body=json.dumps(body))


def busy_first(seen: list[str], retry_after: str) -> Callable[[Route], None]:
    """A route that answers its first request 503 unavailable (a throttled table, with ``Retry-After``), then lets
    every later one through; ``seen`` gets each request's method."""

    def route_it(route: Route) -> None:
        seen.append(route.request.method)
        if len(seen) == 1:
            json_answer(route, 503, BUSY, retry_after=retry_after)
        else:
            route.continue_()

    return route_it


def test_a_busy_relay_is_asked_again(chat: ChatPage) -> None:
    # GIVEN a relay that answers the first send 503 unavailable, as when the table throttled the turn's write
    posts: list[str] = []
    chat.page.route("**/chat", busy_first(posts, retry_after="0"))
    chat.open()
    # WHEN a message is sent
    chat.send("hello busy")
    # THEN the page sends it again after a short wait, the reply streams in, and one turn exists
    assert chat.wait_status("complete") == "You said: hello busy"
    assert len(posts) == 2 and chat.counts("retries") == {"retries": 1}
    assert [t["user"] for t in chat.history()["turns"]] == ["hello busy"]
    expect(chat.page.get_by_role("alert")).to_be_hidden()


def test_a_relay_throttled_at_every_try_says_so_and_gives_the_text_back(chat: ChatPage) -> None:
    # GIVEN a Function URL that throttles every send, in Lambda's own words (the relay's reserved concurrency in use)
    posts: list[str] = []

    def throttled(route: Route) -> None:
        posts.append(route.request.method)
        json_answer(route, 429, {"Message": "Rate Exceeded."}, retry_after="0")

    chat.page.route("**/chat", throttled)
    chat.open()
    # WHEN a message is sent THEN the page tries it five times, then says what happened and what to do
    chat.send("hello throttled")
    expect(chat.page.get_by_role("alert")).to_have_text(
        "HTTP 429: Rate Exceeded. The service is busy: try again in a moment."
    )
    assert len(posts) == 5 and chat.page.locator("#message").input_value() == "hello throttled"


@pytest.mark.parametrize(
    ("answer", "turn_started"),
    [("502", True), ("502", False), ("a stream cut before meta", True)],
    ids=["502 after the turn started", "502 before it started", "a stream cut before meta"],
)
def test_a_lost_answer_never_starts_a_second_turn(chat: ChatPage, answer: str, turn_started: bool) -> None:
    # GIVEN a session the page shows, and a relay whose answer to the next send is lost: a 502 (the Function URL's
    # answer to a relay that failed before its first byte), after allocating the turn or before, or a 200 whose
    # stream breaks before its meta event
    chat.open()
    chat.send("first")
    chat.wait_status("complete")
    posts: list[str] = []
    keys: list[str | None] = []

    def fail_once(route: Route) -> None:
        posts.append(route.request.method)
        keys.append(route.request.headers.get("idempotency-key"))
        if len(posts) > 1:
            route.continue_()
            return
        if turn_started:
            route.fetch()  # the relay starts the turn; its answer never reaches the page
        if answer == "502":
            json_answer(route, 502, BAD_GATEWAY)
        else:  # only the stream's first line reaches the page
            route.fulfill(status=200, headers={"Content-Type": "text/event-stream"}, body="retry: 1000\n\n")

    chat.page.route("**/chat", fail_once)
    # WHEN the next message is sent
    chat.send("second")
    # THEN the reply arrives once: the page sent the message again with the same Idempotency-Key, and the relay
    # joined the turn the first send started, or started it
    assert chat.wait_status("complete") == "You said: second"
    assert len(posts) == 2 and keys[0] == keys[1] and keys[0] is not None and keys[0].startswith('"')
    assert [t["user"] for t in chat.history()["turns"]] == ["first", "second"]
    assert chat.counts("retries") == {"retries": 1}
    expect(chat.page.get_by_role("alert")).to_be_hidden()


def test_a_502_on_a_new_session_is_sent_again_and_joins_the_turn_it_started(chat: ChatPage) -> None:
    # GIVEN a relay that starts the turn of a message that starts a session, then fails before its first byte
    posts: list[str] = []

    def bad_gateway_once(route: Route) -> None:
        posts.append(route.request.method)
        if len(posts) > 1:
            route.continue_()
            return
        route.fetch()
        json_answer(route, 502, BAD_GATEWAY)

    chat.page.route("**/chat", bad_gateway_once)
    chat.open()
    # WHEN it is sent THEN the page sends it again with its key, and follows the one turn the first send started, in
    # the session it started
    chat.send("lost?")
    assert chat.wait_status("complete") == "You said: lost?"
    assert posts == ["POST", "POST"] and [t["user"] for t in chat.history()["turns"]] == ["lost?"]
    expect(chat.page.get_by_role("alert")).to_be_hidden()


def test_a_message_the_callers_budget_refuses_is_shown_plainly_and_kept(chat: ChatPage) -> None:
    # GIVEN a relay whose caller has started as many turns as it may this minute
    posts: list[str] = []
    why = "too many messages this minute (the limit is 60 a minute): try again in 12 s"

    def refused(route: Route) -> None:
        posts.append(route.request.method)
        json_answer(route, 429, {"error": {"code": "rate_limit_exceeded", "message": why}}, retry_after="12")

    chat.page.route("**/chat", refused)
    chat.open()
    # WHEN a message is sent THEN it is not sent again: the page says why and when to try again, and keeps the text
    chat.send("hello later")
    expect(chat.page.get_by_role("alert")).to_have_text(f"Not sent: {why}")
    assert posts == ["POST"] and chat.page.locator("#message").input_value() == "hello later"
    expect(chat.turns()).to_have_count(0)


def cut_after_first_token(cut: dict[str, str], then: Callable[[], None] = lambda: None) -> Callable[[Route], None]:
    """A route for POST /chat that lets the whole stream arrive, then hands the page its beginning up to the first
    token (the connection broke there), after doing ``then``; ``cut`` gets that token's id."""

    def handle(route: Route) -> None:
        response = route.fetch()
        events = response.text().split("\n\n")
        first_token = next(i for i, event in enumerate(events) if "event: token" in event)
        cut["last_id"] = event_id(events[first_token])
        then()
        route.fulfill(response=response, body="\n\n".join(events[: first_token + 1]) + "\n\n")

    return handle


OLD_RESUME_BUDGET = 5  # the resumes in a row after which the page once gave a reply up (about 4 s of waiting)


def hold_the_pages_clock(chat: ChatPage) -> None:
    """The page's clock stands still but when the test moves it (a backoff then ends only when the test says)."""
    start = datetime(2030, 1, 1, tzinfo=UTC)
    chat.page.clock.install(time=start)
    chat.page.clock.pause_at(start + timedelta(seconds=1))


def step_past_backoffs(chat: ChatPage, done: Callable[[], bool]) -> None:
    """Move the page's clock 16 s at a time, past every wait the backoff allows, until ``done()`` (100 steps at
    most)."""
    for _ in range(100):
        if done():
            return
        chat.page.clock.run_for(16_000)
        chat.page.wait_for_timeout(50)


@dataclass
class FailingResumes:
    """The page's resumes (GETs of a turn's events): each one's ``Last-Event-ID``; refused while ``failing``."""

    seen: list[str | None] = field(default_factory=list)
    failing: bool = True

    def route(self, route: Route) -> None:
        self.seen.append(route.request.headers.get("last-event-id"))
        if self.failing:
            route.abort("connectionrefused")
        else:
            route.continue_()


def send_through_a_broken_stream(chat: ChatPage, resumes: FailingResumes) -> dict[str, str]:
    """Open the page and send ``/long 30`` on a stream that breaks after its first token, the page's resumes going
    to ``resumes``; returns the cut (``last_id``: the first token's id)."""
    cut: dict[str, str] = {}
    chat.page.route("**/chat", cut_after_first_token(cut))
    chat.page.route("**/sessions/*/turns/*/events*", resumes.route)
    chat.open()
    chat.send("/long 30")
    return cut


def test_a_reply_resumes_through_an_outage_and_at_once_when_the_browser_is_back_online(chat: ChatPage) -> None:
    # GIVEN a page whose clock stands still but when the test moves it, and a stream that breaks after its first
    # token as the browser goes offline, every resume failing meanwhile
    context = chat.page.context
    hold_the_pages_clock(chat)
    cut: dict[str, str] = {}
    resumes: list[str | None] = []

    def count(route: Route) -> None:
        resumes.append(route.request.headers.get("last-event-id"))
        route.continue_()

    chat.page.route("**/chat", cut_after_first_token(cut, then=lambda: context.set_offline(True)))
    chat.page.route("**/sessions/*/turns/*/events*", count)
    chat.open()
    # WHEN a reply is streamed through it, and the outage outlasts more resumes than the page once tried (each step
    # past every wait the backoff allows)
    chat.send("/long 30")
    step_past_backoffs(chat, lambda: len(resumes) > OLD_RESUME_BUDGET)
    # THEN the page keeps trying, calmly: the reply is not marked failed, Stop stays, no error is shown
    assert len(resumes) > OLD_RESUME_BUDGET
    expect(chat.page.locator("#status")).to_have_text("Connection lost; reconnecting…")
    expect(chat.reply()).to_have_attribute("data-status", "streaming")
    expect(chat.page.locator("#stop")).to_be_visible()
    expect(chat.page.get_by_role("alert")).to_be_hidden()
    # WHEN the browser is back online, the page waiting out a backoff its clock will not end
    tried = len(resumes)
    context.set_offline(False)
    # THEN the page resumes at once (the `online` event ends the wait) from the last id it saw, and shows every
    # word once
    assert chat.wait_status("complete") == long_reply(30)
    assert len(resumes) == tried + 1 and set(resumes) == {cut["last_id"]}
    assert chat.counts("resumes", "repeated") == {"resumes": 1, "repeated": 0}
    expect(chat.page.get_by_role("alert")).to_be_hidden()


def test_a_reply_waiting_out_a_backoff_resumes_at_once_when_the_page_is_shown_again(chat: ChatPage) -> None:
    # GIVEN a page whose clock stands still but when the test moves it, and a stream that breaks after its first
    # token, every resume failing meanwhile (a laptop closed, a phone's tab in the background)
    hold_the_pages_clock(chat)
    resumes = FailingResumes()
    cut = send_through_a_broken_stream(chat, resumes)
    step_past_backoffs(chat, lambda: len(resumes.seen) >= 3)
    assert len(resumes.seen) >= 3
    # WHEN the connection is back and the page is shown again, while it waits out a backoff its clock will not end
    resumes.failing = False
    tried = len(resumes.seen)
    # (shown again until a resume goes out: the last failed resume may still be on its way back to the page, which
    # then starts its wait; the page's clock stands still throughout, so only being shown can end that wait)
    for _ in range(100):  # 10 s at most
        if len(resumes.seen) > tried:
            break
        chat.page.evaluate(
            """() => {
                Object.defineProperty(document, "visibilityState", { configurable: true, get: () => "visible" });
                document.dispatchEvent(new Event("visibilitychange"));
            }"""
        )
        chat.page.wait_for_timeout(100)
    # THEN it resumes at once (visibilitychange ends the wait) from the last id it saw, and shows every word once
    assert chat.wait_status("complete") == long_reply(30)
    assert len(resumes.seen) == tried + 1 and set(resumes.seen) == {cut["last_id"]}
    assert chat.counts("repeated") == {"repeated": 0}
    expect(chat.page.get_by_role("alert")).to_be_hidden()


def test_a_reply_given_up_after_minutes_offers_to_resume_and_is_not_marked_failed(chat: ChatPage) -> None:
    # GIVEN a page whose clock the test moves, and a stream that breaks after its first token, every resume failing
    chat.page.clock.install()
    resumes = FailingResumes()
    send_through_a_broken_stream(chat, resumes)
    expect(chat.page.locator("#status")).to_have_text("Connection lost; reconnecting…")
    # WHEN no resume gets through for more than five minutes (each step past every wait the backoff allows)
    resume = chat.page.get_by_role("alert").get_by_role("button", name="Resume")
    for _ in range(60):
        if resume.is_visible():
            break
        chat.page.clock.run_for(16_000)
    # THEN the page stops trying and offers to resume: the reply keeps its text and is not marked failed, and Stop
    # stays (the turn goes on, and a new message would be refused while it does)
    expect(resume).to_be_visible()
    expect(chat.reply()).to_have_attribute("data-status", "interrupted")
    assert chat.reply().locator(".text").text_content() == "w1"
    expect(chat.page.locator("#stop")).to_be_visible()
    expect(chat.page.locator("#send")).to_be_disabled()
    assert len(resumes.seen) > OLD_RESUME_BUDGET
    # WHEN the connection is back and the user presses Resume
    resumes.failing = False
    resume.click()
    # THEN the reply completes, every word once
    assert chat.wait_status("complete") == long_reply(30)
    assert chat.counts("repeated") == {"repeated": 0}
    expect(chat.page.get_by_role("alert")).to_be_hidden()


def test_a_resume_answered_503_and_502_is_tried_again(chat: ChatPage) -> None:
    # GIVEN a stream cut after its first token, and a relay that answers the first two resumes 503 and 502
    cut: dict[str, str] = {}
    resumes: list[str | None] = []

    def fail_twice(route: Route) -> None:
        resumes.append(route.request.headers.get("last-event-id"))
        if len(resumes) == 1:
            json_answer(route, 503, BUSY, retry_after="0")
        elif len(resumes) == 2:
            json_answer(route, 502, BAD_GATEWAY)
        else:
            route.continue_()

    chat.page.route("**/chat", cut_after_first_token(cut))
    chat.page.route("**/sessions/*/turns/*/events*", fail_twice)
    chat.open()
    # WHEN a reply is streamed through them
    chat.send("/long 30")
    # THEN the page asks three times for what follows the last id it saw, and shows every word once
    assert chat.wait_status("complete") == long_reply(30)
    assert resumes == [cut["last_id"]] * 3
    assert chat.counts("retries", "resumes", "repeated") == {"retries": 2, "resumes": 1, "repeated": 0}


# The page's idle limit (Retry.IDLE_MS), the client's read timeout: three of the relay's 10 s keep-alive periods
IDLE_MS = round(READ_TIMEOUT_S * 1000)
KEEP_ALIVE = b": keep-alive\n\n"  # what the relay sends after 10 s without events (HTTP_API.md, POST /chat)
# The request headers the stalling relay passes on to the stack (Host is the stack's own, as http.client names it).
FORWARDED = ("content-type", "accept", "origin", "last-event-id")


class _StallingHandler(BaseHTTPRequestHandler):
    """Sends the request on to the local stack, reads its whole event stream, and hands the page the stream up to
    its first token; then only what the test feeds it, the connection left open (a network that lost it without a
    reset, or a relay that has nothing to send but keep-alives)."""

    def do_POST(self) -> None:
        self._forward()

    def do_GET(self) -> None:
        self._forward()

    def _forward(self) -> None:
        relay: StallingRelay = self.server.relay  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {name: value for name, value in self.headers.items() if name.lower() in FORWARDED}
        upstream = http.client.HTTPConnection("127.0.0.1", relay.stack_port, timeout=WAIT_MS / 1000)
        try:
            upstream.request(self.command, self.path, body=body, headers=headers)
            answer = upstream.getresponse()
            events = answer.read().decode().split("\n\n")
        finally:
            upstream.close()
        first = next(i for i, event in enumerate(events) if "event: token" in event)
        relay.cut.append(event_id(events[first]))
        self.send_response(answer.status)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self._write(("\n\n".join(events[: first + 1]) + "\n\n").encode())
        fed: queue.Queue[bytes | None] = queue.Queue()
        relay.streams.append(fed)
        while (more := fed.get()) is not None:
            if more == StallingRelay.REST:
                self._write("\n\n".join(events[first + 1 :]).encode())
                return
            self._write(more)

    def _write(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        return


@dataclass
class StallingRelay:
    """A relay in front of the stack whose streams stall after their first token (``_StallingHandler``); a route
    sends a request to it (``send_here``). ``cut`` gets the id of each stream's last token, in order."""

    REST: ClassVar[bytes] = b"the rest of the stream"

    server: ThreadingHTTPServer
    stack_port: int
    cut: list[str] = field(default_factory=list)
    streams: list[queue.Queue[bytes | None]] = field(default_factory=list)

    def send_here(self, route: Route) -> None:
        path = urlsplit(route.request.url)
        route.continue_(url=f"http://127.0.0.1:{self.server.server_address[1]}{path.path}?{path.query}".rstrip("?"))

    def feed(self, data: bytes) -> None:
        """Send ``data`` on the stream that stalled last (REST: the rest of it, and close it)."""
        self.streams[-1].put(data)


@pytest.fixture
def stalling(stack: LocalStack) -> Iterator[StallingRelay]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StallingHandler)
    relay = StallingRelay(server, int(urlsplit(stack.url).port or 80))
    server.relay = relay  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield relay
    for stream in relay.streams:
        stream.put(None)  # the page is closed: the stalled streams end without another byte
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("stalled", [1, 2], ids=["the reply stalls", "the reply and its first resume stall"])
def test_a_stream_silent_past_the_idle_limit_is_resumed_from_its_last_id(
    chat: ChatPage, stalling: StallingRelay, stalled: int
) -> None:
    # GIVEN a page whose clock moves only when the test moves it, and a reply whose stream brings its first token
    # and then nothing, its connection still open: the network lost it without a reset (and, in the second case,
    # the first resume's stream the same)
    start = datetime(2030, 1, 1, tzinfo=UTC)
    chat.page.clock.install(time=start)
    chat.page.clock.pause_at(start + timedelta(seconds=1))
    resumes: list[str | None] = []

    def resume(route: Route) -> None:
        resumes.append(route.request.headers.get("last-event-id"))
        if len(resumes) < stalled:
            stalling.send_here(route)
        else:
            route.continue_()

    chat.page.route("**/chat", stalling.send_here)
    chat.page.route("**/sessions/*/turns/*/events*", resume)
    chat.open()
    chat.send("/long 30")
    status = chat.page.locator("#status")
    for _ in range(stalled):
        expect(status).to_have_text("Receiving…")
        # WHEN no byte comes for longer than the page's idle limit
        chat.page.clock.run_for(IDLE_MS + 1_000)
        # THEN the page takes the stream for a dropped one, and resumes after the first resume's short wait
        expect(status).to_have_text("Connection lost; reconnecting…")
        chat.page.clock.run_for(1_000)
    # AND it resumed once per stalled stream, from the last id each brought, and shows every word once
    assert chat.wait_status("complete") == long_reply(30)
    assert resumes == stalling.cut and len(resumes) == stalled
    assert chat.counts("resumes", "repeated") == {"resumes": stalled, "repeated": 0}
    expect(chat.page.get_by_role("alert")).to_be_hidden()


def test_keep_alive_comments_keep_a_slow_stream_from_being_resumed(chat: ChatPage, stalling: StallingRelay) -> None:
    # GIVEN a page whose clock moves only when the test moves it, and a reply whose stream brings its first token,
    # then only the relay's keep-alive comments, one every 10 s (a long reasoning phase, a slow model), then the rest
    start = datetime(2030, 1, 1, tzinfo=UTC)
    chat.page.clock.install(time=start)
    chat.page.clock.pause_at(start + timedelta(seconds=1))
    resumes: list[str | None] = []
    chat.page.route("**/chat", stalling.send_here)
    chat.page.route("**/sessions/*/turns/*/events*", lambda route: (resumes.append("resume"), route.continue_()))
    chat.open()
    chat.send("/long 30")
    status = chat.page.locator("#status")
    expect(status).to_have_text("Receiving…")
    # WHEN keep-alives alone come for twice the idle limit (each given a moment to arrive before the clock moves on:
    # one late by a whole step still leaves 20 s between two, under the limit)
    for _ in range(2 * IDLE_MS // 10_000):
        stalling.feed(KEEP_ALIVE)
        chat.page.wait_for_timeout(100)
        chat.page.clock.run_for(10_000)
    # THEN the page keeps reading the stream: nothing resumed
    expect(status).to_have_text("Receiving…")
    assert resumes == []
    # WHEN the rest of the stream comes THEN the reply completes on that one stream, every word once
    stalling.feed(StallingRelay.REST)
    assert chat.wait_status("complete") == long_reply(30)
    assert resumes == [] and chat.counts("resumes", "repeated") == {"resumes": 0, "repeated": 0}


def test_a_cancel_answered_503_is_sent_again(chat: ChatPage) -> None:
    # GIVEN a relay that answers the first cancel 503 unavailable, Retry-After: 1 (the table throttled it)
    cancels: list[str] = []
    chat.page.route("**/sessions/*/turns/*/cancel", busy_first(cancels, retry_after="1"))
    chat.open()
    chat.send("/long 5000")
    expect(chat.reply().locator(".text")).to_contain_text("w5")
    # WHEN the user presses Stop
    chat.page.get_by_role("button", name="Stop").click()
    # THEN the page sends the cancel again, and the turn ends as cancelled, with no error shown
    text = chat.wait_status("cancelled")
    assert cancels == ["POST", "POST"] and chat.counts("retries") == {"retries": 1}
    assert chat.history()["turns"][-1]["status"] == "cancelled" and long_reply(5000).startswith(text)
    expect(chat.page.get_by_role("alert")).to_be_hidden()


def open_a_conversation(chat: ChatPage) -> None:
    """The page with a conversation of one finished turn ("remember me"), the session in its URL."""
    chat.open()
    chat.send("remember me")
    chat.wait_status("complete")


def test_a_history_answered_503_is_read_again(chat: ChatPage) -> None:
    # GIVEN a conversation, and a relay that answers the first read of its history 503 (the table throttled it)
    open_a_conversation(chat)
    reads: list[str] = []
    chat.page.route("**/sessions/*", busy_first(reads, retry_after="0"))
    # WHEN the page is reloaded
    chat.page.reload()
    # THEN it reads the history again, and shows the conversation
    expect(chat.turns().locator(".assistant .text")).to_have_text(["You said: remember me"])
    assert reads == ["GET", "GET"]
    expect(chat.page.get_by_role("alert")).to_be_hidden()


def test_a_history_that_cannot_be_read_offers_to_try_again_and_takes_no_message(chat: ChatPage) -> None:
    # GIVEN a conversation, and a relay that answers every read of its history 503
    open_a_conversation(chat)
    reads: list[str] = []
    posts: list[str] = []

    def busy(route: Route) -> None:
        reads.append(route.request.method)
        json_answer(route, 503, BUSY, retry_after="0")

    chat.page.route("**/sessions/*", busy)
    chat.page.route("**/chat", lambda route: (posts.append(route.request.method), route.continue_()))
    # WHEN the page is reloaded
    chat.page.reload()
    # THEN after five reads it says the conversation did not load, and offers to try again
    alert = chat.page.get_by_role("alert")
    expect(alert).to_contain_text("Could not load the conversation")
    assert len(reads) == 5
    expect(chat.turns()).to_have_count(0)
    # AND a message is not sent meanwhile (it would go on with a conversation the page does not show): it stays typed
    expect(chat.page.locator("#send")).to_be_disabled()
    chat.send("go on")
    expect(alert).to_contain_text("has not loaded")
    assert posts == [] and chat.page.locator("#message").input_value() == "go on"
    # WHEN the relay recovers and the user presses Try again
    chat.page.unroute("**/sessions/*")
    alert.get_by_role("button", name="Try again").click()
    # THEN the conversation is shown, and the message can be sent in it
    expect(chat.turns().locator(".assistant .text")).to_have_text(["You said: remember me"])
    expect(alert).to_be_hidden()
    chat.send("go on")
    assert chat.wait_status("complete") == "You said: go on"
    assert [t["user"] for t in chat.history()["turns"]] == ["remember me", "go on"]


RETRY_CASES = r"""
(maxRetryAfterMs) => {
  const R = window.ChatstreamRetry;
  const top = () => 0.999999;
  return {
    caps: [1, 2, 3, 4, 5, 6].map((n) => Math.round(R.delayMs(n, null, top))),
    resumeCaps: [1, 5, 6, 7, 8, 100].map((n) => Math.round(R.resumeDelayMs(n, null, top))),
    resumeFloor: R.resumeDelayMs(1, 3000, () => 0),
    resumeGiveUp: R.RESUME_GIVE_UP_MS,
    idle: R.IDLE_MS,
    floor: R.delayMs(1, 3000, () => 0),
    seconds: R.retryAfterMs("2"),
    date: R.retryAfterMs("Wed, 21 Oct 2015 07:28:30 GMT", Date.parse("2015-10-21T07:28:00Z")),
    past: R.retryAfterMs("Wed, 21 Oct 2015 07:27:00 GMT", Date.parse("2015-10-21T07:28:00Z")),
    unreadable: [R.retryAfterMs(null), R.retryAfterMs(""), R.retryAfterMs("soon"), R.retryAfterMs("-1")],
    honours: [R.honours(null), R.honours(maxRetryAfterMs), R.honours(maxRetryAfterMs + 1)],
    attempts: R.ATTEMPTS,
    retryable: R.RETRYABLE,
    refusals: R.REFUSALS,
  };
}
"""
RESUME_CAP_MS = 15_000  # the page's own cap on a resume's wait (the client resumes under its retry policy's cap)


def test_the_pages_retry_rules_match_the_python_clients(chat: ChatPage) -> None:
    # GIVEN the Python client's retry policy and limits (chatstream_client/retry.py and api.py: the numbers' source)
    client = RetryPolicy()
    max_retry_after_ms = round(client.max_retry_after_s * 1000)

    def caps(retries: list[int], cap_s: float) -> list[int]:
        return [round(min(cap_s, client.base_s * 2 ** (n - 1)) * 1000) for n in retries]

    # AND the page's retry rules, in the browser
    chat.open()
    rules = chat.page.evaluate(RETRY_CASES, max_retry_after_ms)
    # THEN the wait is the client's: full jitter under a cap doubling from its base (250 ms) to its cap (4 s), a
    # Retry-After is its floor (seconds or an HTTP-date, unreadable ones ignored, more than the client's 30 s not
    # honoured), as many attempts (five), after the same answers, and a refusal of the caller's budget reported, not
    # waited out
    assert rules["caps"] == caps([1, 2, 3, 4, 5, 6], client.cap_s)
    assert (rules["floor"], rules["seconds"], rules["date"], rules["past"]) == (3000, 2000, 30000, 0)
    assert rules["unreadable"] == [None, None, None, None]
    assert rules["honours"] == [True, True, False]
    assert rules["attempts"] == client.attempts
    assert (sorted(rules["retryable"]), sorted(rules["refusals"])) == (sorted(RETRYABLE), sorted(REFUSALS))
    # AND a resume after a drop (not a retry) waits the same way under the page's cap of 15 s, and is given up only
    # after as long as the client gives an outage (five minutes) that brought nothing
    assert rules["resumeCaps"] == caps([1, 5, 6, 7, 8, 100], RESUME_CAP_MS / 1000)
    assert (rules["resumeFloor"], rules["resumeGiveUp"]) == (3000, round(OUTAGE_S * 1000))
    # AND a stream that brings no byte for the client's read timeout (three of the relay's keep-alive periods) is
    # taken for a dropped one
    assert rules["idle"] == IDLE_MS


# ---------------------------------------------------------------------------------- errors


def test_a_model_error_mid_stream_is_shown_and_the_text_so_far_kept(chat: ChatPage) -> None:
    # GIVEN the page WHEN the model fails after three words
    chat.open()
    chat.send("/error-after 3")
    # THEN the reply is marked failed, keeps its words, and the error is announced in plain words
    assert chat.wait_status("error") == "w1 w2 w3"
    expect(chat.page.get_by_role("alert")).to_contain_text("The reply failed")
    # AND the next message can be sent
    chat.send("again")
    assert chat.wait_status("complete") == "You said: again"


def test_a_rejected_message_shows_the_apis_reason_and_keeps_the_text(chat: ChatPage) -> None:
    # GIVEN the page WHEN a message over the API's limit is sent (the page leaves the limit to the API)
    chat.open()
    too_long = "x" * 32_001
    chat.send(too_long)
    # THEN the API's 400 message is shown, no turn is left on the page, and the text is given back
    expect(chat.page.get_by_role("alert")).to_contain_text("message")
    expect(chat.turns()).to_have_count(0)
    assert chat.page.locator("#message").input_value() == too_long


SESSION_REFUSALS = {
    "turn_limit": (409, "session reached its limit of 1 turns; start a new session to go on", "turn limit"),
    "session_not_found": (404, "session not found", "no longer stored"),
}


@pytest.mark.parametrize("code", list(SESSION_REFUSALS))
def test_a_session_that_cannot_go_on_is_reported_and_the_next_message_starts_a_new_one(
    chat: ChatPage, code: str
) -> None:
    # GIVEN a session the page shows, and a relay that refuses its next turn: the session took all its turns, or it
    # is no longer stored (it expired)
    chat.open()
    for message in ("first", "first again"):
        chat.send(message)
        chat.wait_status("complete")
    full = chat.page.evaluate("location.hash")
    status, message, why = SESSION_REFUSALS[code]
    chat.page.route(
        "**/chat", lambda route: json_answer(route, status, {"error": {"code": code, "message": message}}), times=1
    )
    # WHEN the next message is sent THEN the reason is shown and the URL no longer names the session
    chat.send("second")
    expect(chat.page.get_by_role("alert")).to_contain_text(message)
    assert full and chat.page.evaluate("location.hash") == ""
    # AND a line below the conversation says why the next message starts a new one (with a link to a full one)
    divider = chat.page.locator("#transcript > li.divider")
    expect(divider).to_contain_text(f"{why}; the next message starts a new one")
    links = divider.locator("a")
    expect(links).to_have_count(1 if code == "turn_limit" else 0)
    # AND the message after it starts a new session
    chat.send("third")
    assert chat.wait_status("complete") == "You said: third"
    assert chat.page.evaluate("location.hash") not in ("", full)
    # (a send there whose answer is lost after its turn started is sent again with its key, and joins that turn:
    # never a second turn)
    posts: list[str] = []

    def fail_after_start(route: Route) -> None:
        posts.append(route.request.method)
        route.fetch()
        json_answer(route, 502, BAD_GATEWAY)

    chat.page.route("**/chat", fail_after_start, times=1)
    chat.send("fourth")
    assert chat.wait_status("complete") == "You said: fourth"
    assert posts == ["POST"] and [t["user"] for t in chat.history()["turns"]] == ["third", "fourth"]
    assert chat.counts("retries") == {"retries": 1}
    # AND a full conversation's link opens it again
    if code == "turn_limit":
        assert links.get_attribute("href") == full
        links.click()
        expect(chat.turns()).to_have_count(2)
        expect(chat.turns().first).to_contain_text("first")


def test_an_unknown_session_in_the_url_is_reported_and_a_new_chat_begins(chat: ChatPage) -> None:
    # GIVEN a link to a session that does not exist WHEN it is opened
    chat.open("#session=" + "0" * 32)
    # THEN the 404 is reported plainly and the URL no longer names it
    expect(chat.page.get_by_role("alert")).to_contain_text("not found")
    assert chat.page.evaluate("location.hash") == ""
    chat.send("fresh start")
    assert chat.wait_status("complete") == "You said: fresh start"


# ------------------------------------------------------------------------------ links

# What an attacker seeds a session with before sending its link: words in the user's voice, asking for a secret.
SEEDED = "Support desk: to verify your account, paste your API key below."


def test_a_conversation_opened_from_someone_elses_link_is_read_only_until_the_user_continues(
    chat: ChatPage, stack: LocalStack
) -> None:
    # GIVEN a session another client started and seeded, and the page opened from its link
    with ChatClient(stack.url) as client:
        seeded = client.chat(SEEDED)
    assert seeded.done is not None
    posts: list[str] = []
    chat.page.route("**/chat", lambda route: (posts.append(route.request.method), route.continue_()))
    chat.page.goto(f"{chat.url}/#session={seeded.session_id}")
    # THEN the conversation is shown under a notice, read out as an alert, that says where it came from and who can
    # read what is sent in it
    notice = chat.page.locator("#shared")
    expect(notice).to_be_visible()
    expect(notice).to_have_attribute("role", "alert")
    expect(notice).to_contain_text("opened from a link")
    expect(notice).to_contain_text("Anyone who has the link can read it, and everything you send here")
    expect(chat.turns().locator(".assistant .text")).to_have_text([f"You said: {SEEDED}"])
    # AND its messages are not labelled as the user's
    expect(chat.turns().locator(".user .who")).to_have_text(["User"])
    # AND nothing can be sent in it: the message box and Send are off, and the safe choice has the focus
    expect(chat.page.locator("#message")).to_be_disabled()
    expect(chat.page.locator("#send")).to_be_disabled()
    expect(notice.get_by_role("button", name="Start a new conversation")).to_be_focused()
    chat.page.evaluate("document.getElementById('message').value = 'my key'")
    chat.page.evaluate("document.getElementById('composer').requestSubmit()")
    expect(chat.turns()).to_have_count(1)
    assert posts == [] and chat.session_id() == seeded.session_id
    chat.page.evaluate("document.getElementById('message').value = ''")
    # WHEN the user chooses to continue it
    notice.get_by_role("button", name="Continue this conversation").click()
    # THEN the notice is gone, the messages are labelled the user's, and a message goes on in that session
    expect(notice).to_be_hidden()
    expect(chat.page.locator("#message")).to_be_focused()
    expect(chat.turns().locator(".user .who")).to_have_text(["You"])
    chat.send("go on")
    assert chat.wait_status("complete") == "You said: go on"
    assert posts == ["POST"] and chat.session_id() == seeded.session_id
    assert [t["user"] for t in chat.history()["turns"]] == [SEEDED, "go on"]
    # AND the choice is remembered: after a reload it opens as the user's own
    chat.page.reload()
    expect(chat.turns()).to_have_count(2)
    expect(chat.page.locator("#message")).to_be_focused()
    expect(notice).to_be_hidden()


def test_a_conversation_started_in_this_browser_opens_without_the_notice(
    chat: ChatPage, browser: Browser, stack: LocalStack
) -> None:
    # GIVEN a conversation the page started
    chat.open()
    chat.send("mine")
    chat.wait_status("complete")
    mine = chat.session_id()
    # WHEN the page is reloaded, and the link is opened in another tab of the same browser
    chat.page.reload()
    other_tab = ChatPage.new(chat.page.context, stack.url)
    other_tab.open(f"#session={mine}")
    # THEN both show it as the user's, with no notice, ready for the next message
    for page in (chat, other_tab):
        expect(page.turns().locator(".user .who")).to_have_text(["You"])
        expect(page.page.locator("#shared")).to_be_hidden()
        expect(page.page.locator("#message")).to_be_enabled()
    assert other_tab.problems.seen == []
    # WHEN the same link is opened in another browser (its own storage)
    context = browser.new_context()
    elsewhere = ChatPage.new(context, stack.url)
    try:
        elsewhere.page.goto(f"{stack.url}/#session={mine}")
        # THEN there it is a link like any other: the notice, and no message until the user chooses
        notice = elsewhere.page.locator("#shared")
        expect(notice).to_be_visible()
        expect(elsewhere.turns().locator(".user .text")).to_have_text(["mine"])
        expect(elsewhere.page.locator("#message")).to_be_disabled()
        # WHEN that user starts a new conversation instead
        notice.get_by_role("button", name="Start a new conversation").click()
        # THEN the page is empty and ready, and the next message starts a session of its own
        expect(notice).to_be_hidden()
        expect(elsewhere.turns()).to_have_count(0)
        expect(elsewhere.page.locator("#message")).to_be_focused()
        elsewhere.send("not yours")
        assert elsewhere.wait_status("complete") == "You said: not yours"
        assert elsewhere.session_id() != mine
        # AND Back returns to the link, under the notice again
        elsewhere.page.go_back()
        expect(elsewhere.turns().locator(".user .text")).to_have_text(["mine"])
        expect(notice).to_be_visible()
        assert elsewhere.session_id() == mine
    finally:
        context.close()
    assert elsewhere.problems.seen == []
    assert [t["user"] for t in chat.history()["turns"]] == ["mine"]


# ------------------------------------------------------------------------- phone and keyboard


def test_usable_on_a_phone_sized_screen_and_by_keyboard(browser: Browser, stack: LocalStack) -> None:
    # GIVEN a phone-sized touch screen
    context = browser.new_context(viewport={"width": 360, "height": 640}, has_touch=True, is_mobile=True)
    chat = ChatPage.new(context, stack.url)
    page = chat.page
    try:
        chat.open()
        # WHEN a reply with a very long word arrives, and a message of two lines (Shift+Enter) is sent
        chat.send("y" * 400)
        chat.wait_status("complete")
        page.locator("#message").press_sequentially("line one")
        page.locator("#message").press("Shift+Enter")
        page.locator("#message").press_sequentially("line two")
        page.locator("#message").press("Enter")
        chat.wait_status("complete")
        # THEN nothing scrolls sideways, and the message box and its buttons are on screen
        assert page.evaluate("document.documentElement.scrollWidth") <= 360
        for selector in ("#message", "#send", "#new-chat"):
            box = page.locator(selector).bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 360, selector
            assert box["y"] >= 0 and box["y"] + box["height"] <= 640, selector
        assert chat.turns().locator(".user .text").all_text_contents()[-1] == "line one\nline two"
        # AND the keyboard reaches the buttons, with a visible focus ring
        page.locator("#message").focus()
        page.keyboard.press("Tab")
        expect(page.locator("#send")).to_be_focused()
        assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") != "none"
        # AND every control is labelled
        expect(page.get_by_label("Message")).to_be_visible()
    finally:
        context.close()
    assert chat.problems.seen == []


# ---------------------------------------------------------------------------- the SSE parser

SSE_CASES = r"""
(() => {
  const { SseParser } = window.ChatstreamSse;
  const stream =
    "\ufeffretry: 2500\r\n: a comment\r\n\r\n" +
    "event: meta\ndata: {\"a\":1}\n\n" +
    "id: 7\revent: token\rdata: first line\rdata:  second  \rdata\r\r" +
    "data: h\u00e9llo \u{1F30D}\r\n\r\n" +
    "id: bad\u0000id\ndata: x\n\n" +
    "event: no-data\nid: 9\n\n" +
    "data\n\n" +
    "retry: 12x\nevent: cut\ndata: an event the connection cut";
  const bytes = new TextEncoder().encode(stream);
  const run = (chunks) => {
    const parser = new SseParser();
    const events = [];
    for (const chunk of chunks) events.push(...parser.push(chunk));
    events.push(...parser.end());
    return JSON.stringify({ events, retry: parser.retry, comments: parser.comments });
  };
  const whole = run([bytes]);
  const splits = [];
  for (let i = 1; i < bytes.length; i++) {
    const got = run([bytes.slice(0, i), bytes.slice(i)]);
    if (got !== whole) splits.push(i);
  }
  const byteByByte = run(Array.from(bytes, (b) => Uint8Array.of(b)));
  return { whole: JSON.parse(whole), splits, byteByByte: byteByByte === whole };
})()
"""


ID_CASES = r"""
(() => {
  const { eventPosition, isAfter } = window.ChatstreamSse;
  return {
    positions: ["7", "7.12", "007.05", "7.", ".1", "x", "1e3"].map((id) => {
      const p = eventPosition(id);
      return p === null ? null : [p[0], p[1] === Infinity ? "whole" : p[1]];
    }),
    after: [
      ["7.12", null], ["7.12", "7.5"], ["7", "7.12"], ["8.1", "7"], ["7.5", "7.12"], ["7", "7"], ["7.3", "7"],
    ].map(([a, b]) => isAfter(a, b)),
  };
})()
"""


def test_the_page_orders_event_ids_as_the_relay_names_them(chat: ChatPage) -> None:
    # GIVEN the page WHEN it reads the relay's event ids (a record's seq, or a piece's <seq>.<offset>)
    chat.open()
    result = chat.page.evaluate(ID_CASES)
    # THEN a piece is ordered by its offset inside its record, and a whole record after every piece of it
    assert result["positions"] == [[7, "whole"], [7, 12], [7, 5], None, None, None, None]
    assert result["after"] == [True, True, True, True, False, False, False]


def test_the_pages_sse_parser_follows_the_event_stream_rules(chat: ChatPage) -> None:
    # GIVEN the page's parser, in the browser WHEN a stream exercising every rule is fed whole,
    # split in two at every byte, and byte by byte
    chat.open()
    result = chat.page.evaluate(SSE_CASES)
    # THEN it reads the same events however it is split (a CRLF or a UTF-8 character across chunks included)
    assert result["splits"] == [] and result["byteByByte"] is True
    # AND they are the rule's events: BOM dropped, comments skipped, data lines joined with "\n", one space
    # stripped after the colon, id kept until changed (and ignored with NUL), no event without data,
    # a bad retry ignored, and an event the stream cut off never delivered
    assert result["whole"] == {
        "events": [
            {"type": "meta", "data": '{"a":1}', "lastEventId": ""},
            {"type": "token", "data": "first line\n second  \n", "lastEventId": "7"},
            {"type": "message", "data": "h\u00e9llo \U0001f30d", "lastEventId": "7"},
            {"type": "message", "data": "x", "lastEventId": "7"},
            {"type": "message", "data": "", "lastEventId": "9"},
        ],
        "retry": 2500,
        "comments": 1,
    }
