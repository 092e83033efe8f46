// The chat page: POST /chat streamed through fetch() and a ReadableStream, resumed through the turn's
// events_url with Last-Event-ID after a dropped connection (text event ids at or before the last one seen
// are skipped, so no text is ever doubled; ids are "<seq>" or, for a paced piece of a record, "<seq>.<offset>"),
// Stop through POST …/cancel, history from GET /sessions/{id} with the session id kept in the URL (#session=…).
// Model and user text only ever reach the page as text nodes (textContent), never as HTML.
//
// A session id is a capability (docs/HTTP_API.md, "Identity"): whoever has a conversation's link can read it and
// write in it. The page remembers (localStorage) the sessions this browser started and those its user chose to go
// on with; a session the URL names that is not among them (a link someone sent) opens read only, under a notice
// saying so, until the user chooses "Continue this conversation" or "Start a new conversation". Under the JWT auth
// mode the relay answers a user's own sessions only (another's is not found), so a session that loads is the
// signed-in user's: no notice; the sessions remembered are each user's own (their own list, in localStorage under
// their issuer and subject), and a signed-out page neither loads a session nor sends.
//
// A busy or failing relay is asked again as the Python client does (retry.js; docs/HTTP_API.md,
// "Retries"): every send of a message carries the message's own Idempotency-Key, so POST /chat is sent again after
// a 429/5xx, a failed fetch or a stream that broke before its meta (the relay joins the turn an earlier send
// started, or starts it), but never after an answer that says x-should-retry: false; a refusal of the caller's
// budget (429 rate_limit_exceeded or insufficient_quota) is shown as it is, saying when to try again, with the
// message given back to the box; resumes after 429/5xx or a drop, for as long as an outage may last (follow). A stream silent for Retry.IDLE_MS (no event, not even a keep-alive comment) is a
// drop the network did not report: its request is aborted and the turn resumed (watchdog). Each turn's element
// counts what happened (data-retries, data-resumes, data-repeated).
//
// The reply's text is Markdown, drawn as it grows by markdown.js (elements built from markdown-it's tokens,
// text in text nodes); the user's message is shown as typed. A reasoning model's reasoning (`reasoning`
// events, and `reasoning` in the history) is shown as plain text in a collapsed <details> block before the
// answer, apart from it; its summary says "Thinking… (N words)" while it grows and the answer has not begun.
// A tool call the model made (`tool_call` events, `tool_calls` in the history: a turn that declared tools, started
// through the API) is a collapsed block after the answer, "Tool call: NAME", its arguments as plain text inside; the
// page has no tools of its own, so a reply that stopped to call one says so, and the next message goes on without
// its result.
"use strict";

(function () {
  const { SseParser, isAfter } = window.ChatstreamSse;
  const Retry = window.ChatstreamRetry;
  const { StreamingMarkdown } = window.ChatstreamMarkdown;
  // Under the JWT auth mode every request carries the signed-in user's token, renewed on a 401 (auth.js).
  const Auth = window.ChatAuth || null;
  const authFetch = (url, init) => (Auth ? Auth.fetch(url, init) : fetch(url, init));
  const signInMode = () => Auth !== null && Auth.mode() === "JWT";
  const signedOut = () => signInMode() && !Auth.user();
  const SIGN_IN_FIRST = "Sign in to chat.";

  const el = {
    conversation: document.getElementById("conversation"),
    transcript: document.getElementById("transcript"),
    empty: document.getElementById("empty"),
    status: document.getElementById("status"),
    error: document.getElementById("error"),
    composer: document.getElementById("composer"),
    message: document.getElementById("message"),
    send: document.getElementById("send"),
    stop: document.getElementById("stop"),
    newChat: document.getElementById("new-chat"),
    shared: document.getElementById("shared"),
    sharedText: document.getElementById("shared-text"),
    sharedNew: document.getElementById("shared-new"),
    sharedContinue: document.getElementById("shared-continue"),
  };

  let sessionId = sessionFromUrl();
  let run = null; // the turn being followed: {view, turn, eventsUrl, lastId, retryMs, controller, ...}
  let generation = 0; // bumped by "new chat" and session loads, so a stale load cannot draw
  let loading = null; // the AbortController of the history being read, while it is
  let unloaded = false; // the URL names a session whose history could not be read
  let linked = false; // the conversation shown came from a link, not from this browser: read only until the user chooses

  // ------------------------------------------------------------------------------ the session

  function sessionFromUrl() {
    const id = new URLSearchParams(location.hash.slice(1)).get("session");
    return id && /^[A-Za-z0-9_-]{1,128}$/.test(id) ? id : null;
  }

  // Name the session in the URL. Leaving a conversation for another (New chat, a full session) is a new entry
  // in the browser's history, so Back returns to it; naming the session a new chat started, or forgetting one
  // that is not stored (`replace`), changes the current entry.
  function rememberSession(id, replace = false) {
    sessionId = id;
    const hash = id ? "#session=" + encodeURIComponent(id) : "";
    if (location.hash === hash) return;
    const url = location.pathname + location.search + hash;
    if (sessionFromUrl() !== null && !replace) history.pushState(null, "", url);
    else history.replaceState(null, "", url);
  }

  // The sessions this browser started, or whose link its user chose to go on with: ids in this origin's localStorage,
  // the most recent last, at most KNOWN_MAX of them; under the JWT auth mode, the signed-in user's own list (keyed by
  // their issuer and subject), so two users of one browser never share one. Where storage is refused (a browser set
  // so), they are known for as long as the page is open.
  const KNOWN_KEY = "chatstream.sessions";
  const KNOWN_MAX = 500;
  const knownHere = new Set();

  function knownKey() {
    const owner = signInMode() ? Auth.owner() : null;
    return owner ? `${KNOWN_KEY}:${owner}` : KNOWN_KEY;
  }

  function storedSessions() {
    try {
      const ids = JSON.parse(localStorage.getItem(knownKey()) || "[]");
      return Array.isArray(ids) ? ids.filter((id) => typeof id === "string") : [];
    } catch (err) {
      return []; // no storage, or not ours to read
    }
  }

  function isKnown(id) {
    return knownHere.has(id) || storedSessions().includes(id);
  }

  function markKnown(id) {
    knownHere.add(id);
    try {
      const ids = storedSessions().filter((known) => known !== id);
      ids.push(id);
      localStorage.setItem(knownKey(), JSON.stringify(ids.slice(-KNOWN_MAX)));
    } catch (err) {
      // storage refused or full: knownHere remembers it while the page is open
    }
  }

  // ---------------------------------------------------------------------------- HTTP helpers

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  // What to do after Lambda's own answers (throttled: the relay's reserved concurrency is in use; too large).
  const LAMBDA_ADVICE = {
    413: " The message is too large to send.",
    429: " The service is busy: try again in a moment.",
  };

  // A 4xx/5xx answer as an ApiError: the API's {"error": {"code", "message"}}, Lambda's {"Message"}, or what the
  // body says.
  async function apiError(response) {
    let text = "";
    try {
      text = await response.text();
      const body = JSON.parse(text);
      if (body && body.error && typeof body.error.message === "string") {
        return new ApiError(response.status, String(body.error.code || ""), body.error.message);
      }
      if (body && typeof body.Message === "string") {
        // Lambda's own answer, given before the relay ran: its words, and what to do
        const advice = LAMBDA_ADVICE[response.status] || "";
        const message = `HTTP ${response.status}: ${body.Message.slice(0, 300)}${advice}`;
        return new ApiError(response.status, "http_" + response.status, message);
      }
    } catch (err) {
      // not JSON: fall through to the status line
    }
    const detail = text.trim().slice(0, 300);
    return new ApiError(response.status, "http_" + response.status, `HTTP ${response.status}${detail ? ": " + detail : ""}`);
  }

  // GET a JSON document, sent again after a 429/5xx or a failed connection (a body cut short included) as
  // HTTP_API.md's "Retries" says; throws what failed last. `signal` ends it, waits included.
  async function getJson(path, signal = null) {
    for (let attempt = 1; ; attempt++) {
      let failure;
      let final = false;
      let retryAfter = null;
      try {
        const response = await authFetch(path, { headers: { Accept: "application/json" }, cache: "no-store", signal });
        if (response.ok) return await response.json();
        failure = await apiError(response);
        retryAfter = Retry.retryAfterMs(response.headers.get("Retry-After"));
        final = !Retry.RETRYABLE.includes(response.status) || !Retry.honours(retryAfter);
      } catch (err) {
        failure = err;
      }
      if (final || attempt >= Retry.ATTEMPTS || (signal && signal.aborted)) throw failure;
      await pause(Retry.delayMs(attempt, retryAfter), signal);
    }
  }

  // ------------------------------------------------------------------------------- the view

  // The status line is a polite live region: written only when its words change, so a screen reader is not
  // handed "Receiving…" again with every token.
  // The status line; with nothing to say on a signed-out page (JWT auth mode), what to do first.
  function setStatus(text) {
    if (!text && signedOut()) text = SIGN_IN_FIRST;
    if (el.status.textContent !== text) el.status.textContent = text;
  }

  // Say what failed; `action` ({label, run}) adds a button that does something about it (try again).
  function showError(text, action = null) {
    el.error.textContent = text;
    if (text && action) {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "secondary";
      button.textContent = action.label;
      button.addEventListener("click", () => action.run(), { once: true });
      el.error.append(" ", button);
    }
    el.error.hidden = !text;
  }

  function nearBottom() {
    const c = el.conversation;
    return c.scrollHeight - c.scrollTop - c.clientHeight < 80;
  }

  function keepScrolled(stick) {
    if (stick) el.conversation.scrollTop = el.conversation.scrollHeight;
  }

  function bubble(role, label) {
    const box = document.createElement("div");
    box.className = "msg " + role;
    const who = document.createElement("span");
    who.className = "who";
    who.textContent = label;
    box.append(who);
    return box;
  }

  // The user's message, as typed. In a conversation opened from a link, "User": the page cannot tell who wrote it.
  function userBubble(userText) {
    const box = bubble("user", linked ? "User" : "You");
    const text = document.createElement("p");
    text.className = "text";
    text.dir = "auto"; // right to left when the text is (Arabic, Hebrew…)
    text.textContent = userText;
    box.append(text);
    return box;
  }

  // Draw a part of a reply, keeping the page at the bottom if it was there before the part grew.
  function drawAtBottom(draw) {
    const stick = nearBottom();
    draw();
    keepScrolled(stick);
  }

  // The assistant's reply: its parts in order (the answer's Markdown, then a note on how the turn ended), each
  // a block of its own in the box, so another part (a reasoning block before the answer) slots in beside them.
  function replyBubble() {
    const box = bubble("assistant", "Assistant");
    const answerElement = document.createElement("div");
    answerElement.className = "text markdown";
    const note = document.createElement("p");
    note.className = "note";
    box.append(answerElement, note);
    return { box, answerElement, answer: new StreamingMarkdown(answerElement, drawAtBottom), note };
  }

  // The reply's reasoning: a collapsed block before the answer, made when the first reasoning arrives. Plain
  // text (a text node that grows), never Markdown or HTML. Its summary counts the words as they come, so the
  // block shows the model at work while it stays closed.
  function reasoningBlock(reply) {
    const details = document.createElement("details");
    details.className = "reasoning";
    const summary = document.createElement("summary");
    const text = document.createElement("p");
    text.className = "reasoning-text";
    text.dir = "auto";
    const node = document.createTextNode("");
    text.append(node);
    details.append(summary, text);
    reply.box.insertBefore(details, reply.answerElement);
    let words = 0;
    let inWord = false; // the text so far ends inside a word
    let settled = false;
    const count = (more) => {
      for (const ch of more) {
        const space = /\s/.test(ch);
        if (!space && !inWord) words += 1;
        inWord = !space;
      }
    };
    const label = () => {
      summary.textContent = `${settled ? "Reasoning" : "Thinking…"} (${words} ${words === 1 ? "word" : "words"})`;
    };
    label();
    return {
      append(more) {
        count(more);
        drawAtBottom(() => {
          node.appendData(more);
          label();
        });
      },
      set(all) {
        words = 0;
        inWord = false;
        count(all);
        node.data = all;
        label();
      },
      // The answer began, or the turn ended: the thinking is over.
      settle() {
        settled = true;
        details.dataset.settled = "true";
        label();
      },
    };
  }

  // A tool call of the reply: a collapsed block after the answer, "Tool call: NAME", its arguments (JSON text) as
  // plain text inside, growing as they stream; "…" after the name until the call is complete.
  function toolCallBlock(reply, name) {
    const details = document.createElement("details");
    details.className = "tool-call";
    const summary = document.createElement("summary");
    const args = document.createElement("pre");
    args.className = "tool-arguments";
    const node = document.createTextNode("");
    args.append(node);
    details.append(summary, args);
    reply.box.insertBefore(details, reply.note);
    const label = (complete) => {
      summary.textContent = `Tool call: ${name}${complete ? "" : " …"}`;
    };
    label(false);
    return {
      append(more) {
        drawAtBottom(() => node.appendData(more));
      },
      complete() {
        details.dataset.complete = "true";
        label(true);
      },
    };
  }

  // One turn on the page: the user's message and the assistant's reply, whose Markdown is drawn as it grows.
  function addTurn(userText) {
    const stick = nearBottom();
    const li = document.createElement("li");
    li.className = "turn";
    const reply = replyBubble();
    const { answer, note } = reply;
    let reasoning = null; // the reasoning block, once there is reasoning
    const thinking = () => (reasoning = reasoning || reasoningBlock(reply));
    const calls = new Map(); // a tool call's index -> its block
    li.append(userBubble(userText), reply.box);
    el.transcript.append(li);
    el.empty.hidden = true;
    keepScrolled(stick);
    const view = {
      li,
      // What the page worked around for this turn, kept on its element: sent again, resumed unasked, ids seen twice.
      count(name) {
        li.dataset[name] = String(Number(li.dataset[name] || 0) + 1);
      },
      setTurn(turn) {
        li.dataset.turn = String(turn);
      },
      setText(text) {
        answer.set(text);
      },
      // Text arrives in pieces; the answer draws them at most once an animation frame.
      append(text) {
        if (reasoning) reasoning.settle();
        answer.append(text);
      },
      setReasoning(text) {
        if (text) thinking().set(text);
      },
      appendReasoning(text) {
        thinking().append(text);
      },
      // A piece of a tool call's arguments (a tool_call event's data): its block is made by the call's first piece.
      toolCall(call) {
        if (reasoning) reasoning.settle();
        let block = calls.get(call.index);
        if (!block) {
          block = toolCallBlock(reply, String(call.name));
          calls.set(call.index, block);
        }
        if (typeof call.arguments === "string" && call.arguments) block.append(call.arguments);
        if (call.end === true || call.complete === true) block.complete();
      },
      // A turn that ends shows all its text at once, before its status says so. One "interrupted" (the page
      // stopped resuming it) shows what arrived, and has not ended.
      setStatus(status, detail) {
        const over = status !== "streaming" && status !== "interrupted";
        if (over) answer.end();
        else if (status === "interrupted") answer.flush();
        if (over && reasoning) reasoning.settle();
        reply.box.dataset.status = status;
        reply.box.setAttribute("aria-busy", status === "streaming" ? "true" : "false");
        note.textContent = detail || "";
      },
    };
    view.setStatus("streaming");
    return view;
  }

  function noteFor(status, stopReason, error) {
    if (status === "cancelled" || stopReason === "cancelled") return "Stopped: cancelled.";
    if (status === "error") return "Error: " + (error && error.message ? error.message : "the reply failed.");
    if (stopReason === "max_tokens") return "Stopped at the token limit.";
    if (stopReason === "tool_use") return "Stopped to call a tool. This page has no tools: it cannot run the call.";
    return "";
  }

  // Send is off while a reply streams, and while the conversation shown is one from a link the user has not chosen
  // to go on with, or one not loaded; Stop shows while a reply streams in a conversation of the user's.
  function setBusy(busy) {
    el.send.disabled = busy || linked || unloaded || signedOut();
    el.stop.hidden = !busy || linked;
    el.stop.disabled = false;
  }

  const LINKED =
    "This conversation was opened from a link; it was not started in this browser, and its messages may not be " +
    "yours. Anyone who has the link can read it, and everything you send here. Continue it only if the link is your own.";

  // A conversation from a link (`on`): the notice above it, the message box and Send off until the user chooses.
  function setLinked(on) {
    linked = on;
    el.sharedText.textContent = on ? LINKED : "";
    el.shared.hidden = !on;
    el.message.disabled = on;
    setBusy(run !== null);
  }

  // ----------------------------------------------------------------------------- streaming

  function newRun(view) {
    return {
      view,
      turn: null,
      eventsUrl: null,
      lastId: null, // the furthest text event id shown (token, reasoning, tool_call); a resume asks for what follows it
      retryAfter: null, // ms the last failed answer asked the page to wait, if it did
      controller: new AbortController(),
      ended: false,
      stopping: false,
    };
  }

  function finish(r, status, detail) {
    r.ended = true;
    r.view.setStatus(status, detail);
    if (run === r) {
      run = null;
      setBusy(false);
      setStatus(status === "complete" ? "Reply complete." : status === "cancelled" ? "Reply stopped." : "");
    }
  }

  // Whether a text event (token, reasoning or tool_call: one sequence of ids) is new; notes its id as the furthest shown.
  function fresh(r, event) {
    const id = event.lastEventId === "" ? null : event.lastEventId;
    if (id !== null && !isAfter(id, r.lastId)) {
      r.view.count("repeated"); // already shown: the relay sent it again
      return false;
    }
    if (id !== null) r.lastId = id;
    return true;
  }

  // Apply one event; returns "ended" (done/error), "reconnect", or null to go on reading.
  function apply(r, event) {
    let data;
    try {
      data = JSON.parse(event.data);
    } catch (err) {
      return null; // not ours to understand; the API only sends JSON data
    }
    switch (event.type) {
      case "meta":
        r.turn = data.turn;
        r.eventsUrl = data.events_url;
        r.view.setTurn(data.turn);
        if (data.session_id && data.session_id !== sessionId) {
          markKnown(data.session_id); // a session this browser started
          rememberSession(data.session_id);
        }
        el.stop.disabled = false;
        return null;
      case "token":
        if (!fresh(r, event)) return null;
        if (typeof data.text === "string") r.view.append(data.text);
        setStatus("Receiving…");
        return null;
      case "reasoning":
        if (!fresh(r, event)) return null;
        if (typeof data.text === "string") r.view.appendReasoning(data.text);
        setStatus("Thinking…");
        return null;
      case "tool_call":
        if (!fresh(r, event)) return null;
        if (Number.isInteger(data.index)) r.view.toolCall(data);
        setStatus("Calling a tool…");
        return null;
      case "done":
        finish(r, data.stop_reason === "cancelled" ? "cancelled" : "complete", noteFor("", data.stop_reason));
        return "ended";
      case "error":
        finish(r, "error", noteFor("error", null, data));
        showError(`The reply failed: ${data.message || "unknown error"}${data.code ? " (" + data.code + ")" : ""}`);
        return "ended";
      case "reconnect":
        if (typeof data.events_url === "string") r.eventsUrl = data.events_url;
        return "reconnect";
      default:
        return null;
    }
  }

  // One request of a run, with its idle watchdog: `signal` (the request's) aborts when the run's does, and when the
  // watchdog, once armed, goes Retry.IDLE_MS without being armed again (no byte came: not even the relay's
  // keep-alive comment, sent every 10 s a stream has nothing else to send). Aborting the fetch's signal aborts the
  // consumption of its body too (MDN, AbortController.abort()), so a read waiting on a connection the network lost
  // without a reset (Wi-Fi gone, a laptop asleep, a NAT that forgot it) ends as a dropped one, minutes before the
  // browser's TCP would give up. `release()` clears it, once the request is over.
  function watchdog(r) {
    const controller = new AbortController();
    const abort = () => controller.abort();
    let timer = 0;
    const run = r.controller.signal;
    if (run.aborted) abort();
    else run.addEventListener("abort", abort, { once: true });
    return {
      signal: controller.signal,
      arm() {
        clearTimeout(timer);
        timer = setTimeout(abort, Retry.IDLE_MS);
      },
      release() {
        clearTimeout(timer);
        run.removeEventListener("abort", abort);
      },
    };
  }

  // Read one response's event stream to its end: "ended", "reconnect", or "dropped" (a silence the watchdog
  // ended included). Every chunk, comments included, arms the watchdog again; it is released at the end.
  async function read(r, { response, watch }) {
    const parser = new SseParser();
    const reader = response.body.getReader();
    try {
      for (;;) {
        watch.arm();
        const { value, done } = await reader.read();
        const events = done ? parser.end() : parser.push(value);
        for (const event of events) {
          const outcome = apply(r, event);
          if (outcome) return outcome;
        }
        if (done) return "dropped";
      }
    } catch (err) {
      return "dropped";
    } finally {
      watch.release();
      reader.cancel().catch(() => {});
    }
  }

  // Whatever may bring the connection back (the browser is online again, the page is shown again) ends every
  // wakeable wait at once: a resume waiting out its backoff, or one waiting for the user.
  const wakers = new Set();
  function wake() {
    for (const waker of Array.from(wakers)) waker();
  }
  window.addEventListener("online", wake);
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") wake();
  });

  // Wait `ms` (null: with no end of its own), or until `signal` aborts, or (`wakeable`) until wake().
  function pause(ms, signal = null, wakeable = false) {
    return new Promise((resolve) => {
      let timer = 0;
      const done = () => {
        clearTimeout(timer);
        wakers.delete(done);
        resolve();
      };
      if (ms !== null) timer = setTimeout(done, ms);
      if (wakeable) wakers.add(done);
      if (signal) signal.addEventListener("abort", done, { once: true });
    });
  }

  // Follow a turn to its end, resuming through events_url whenever the connection drops (a resume the
  // relay did not plan, unlike its `reconnect`). Without a first response, it starts with a resume
  // (attaching to a turn still generating after a reload, or found in the history after a failed send).
  // Returns "no_meta" when the first response ended before `meta` named the turn: the turn may have started
  // all the same, and only the caller can look (HTTP_API.md, "Retries").
  //
  // A resume is not a retry (HTTP_API.md, "Retries"): through an outage the page resumes with a backoff capped at
  // Retry.RESUME_CAP_MS, at once when the browser is back online, and gives up only after Retry.RESUME_GIVE_UP_MS
  // in which no resume brought anything; then it waits for the user (Resume) or the network, the turn unfinished.
  // A stream the watchdog ended (Retry.IDLE_MS without a byte) is resumed as one that dropped.
  //
  // `first` is POST /chat's stream ({response, watch}: postChat), or null.
  async function follow(r, first) {
    let stream = first; // {response, watch}; null: resume
    let failures = 0; // attempts in a row that failed or brought nothing new
    let progressAt = Date.now(); // when a response last brought something new (or the relay planned a resume)
    for (;;) {
      if (stream === null) stream = await resume(r);
      if (r.ended || r.controller.signal.aborted) {
        if (stream) stream.watch.release();
        return;
      }
      if (stream) {
        const shown = r.lastId;
        const outcome = await read(r, stream);
        if (outcome === "ended" || r.ended || r.controller.signal.aborted) return;
        if (outcome === "reconnect") {
          failures = 0;
          progressAt = Date.now();
        } else {
          if (r.eventsUrl) r.view.count("resumes");
          if (r.lastId !== shown) progressAt = Date.now();
          failures = r.lastId !== shown ? 1 : failures + 1;
        }
      } else {
        failures += 1;
      }
      stream = null;
      if (!r.eventsUrl) return "no_meta";
      if (failures === 0) continue;
      if (Date.now() - progressAt >= Retry.RESUME_GIVE_UP_MS) {
        await interrupted(r);
        if (r.ended || r.controller.signal.aborted) return;
        failures = 0;
        progressAt = Date.now();
        continue;
      }
      setStatus("Connection lost; reconnecting…");
      // A wait the relay asked for (Retry-After) is kept; a wait for the network ends when it is back.
      await pause(Retry.resumeDelayMs(failures, r.retryAfter), r.controller.signal, r.retryAfter === null);
      r.retryAfter = null;
    }
  }

  // The page stopped resuming: it says so, and waits for Resume, or for the network to come back. The turn is not
  // over (it goes on generating, and is saved), so it is not marked failed, and Stop still cancels it.
  async function interrupted(r) {
    r.view.setStatus("interrupted", "Connection lost.");
    setStatus("");
    const why = "The connection was lost, and the page stopped trying to resume the reply (it is still being written).";
    showError(why, { label: "Resume", run: wake });
    await pause(null, r.controller.signal, true);
    if (r.ended || r.controller.signal.aborted) return;
    showError("");
    r.view.setStatus("streaming");
    setStatus("Reconnecting…");
  }

  // One resume request: {response, watch} for a stream, null when it should be tried again (after a 429/5xx it is
  // counted as a retry). Its watchdog is armed from the start: an answer that does not come is a stall too (a
  // resume may be sent on a connection the network lost), and a resume is a read, which may always be made again.
  async function resume(r) {
    const headers = { Accept: "text/event-stream" };
    if (r.lastId !== null) headers["Last-Event-ID"] = r.lastId;
    const watch = watchdog(r);
    watch.arm();
    let response;
    try {
      response = await authFetch(r.eventsUrl, { headers, cache: "no-store", signal: watch.signal });
    } catch (err) {
      watch.release();
      return null;
    }
    if (response.ok) return { response, watch };
    const error = await apiError(response);
    watch.release();
    const retryAfter = Retry.retryAfterMs(response.headers.get("Retry-After"));
    if (Retry.RETRYABLE.includes(response.status) && Retry.honours(retryAfter)) {
      r.retryAfter = retryAfter;
      r.view.count("retries");
      return null;
    }
    finish(r, "error", "Error: " + error.message);
    showError(error.message);
    return null;
  }

  async function send(message) {
    if (run || !message.trim()) return;
    showError("");
    const view = addTurn(message);
    const r = newRun(view);
    run = r;
    setBusy(true);
    el.stop.disabled = true; // until meta names the turn
    setStatus("Sending…");
    const body = { message };
    if (sessionId) {
      body.session_id = sessionId;
      markKnown(sessionId); // the user's, and now the most recent
    }
    const key = newKey(); // every send of this message carries it: a send again joins the turn an earlier one started
    for (let attempt = 1; ; attempt++) {
      let answer = await postChat(r, body, key);
      if (r.controller.signal.aborted) {
        if (answer.watch) answer.watch.release();
        return;
      }
      if (answer.response) {
        if ((await follow(r, answer)) !== "no_meta") return;
        if (r.controller.signal.aborted) return;
        // A 200 that broke before `meta`: the turn may exist, as after a connection that broke (status 0).
        const why = "The connection dropped before the reply started";
        answer = { status: 0, error: new ApiError(0, "no_meta", why), retryAfter: null, shouldRetry: true };
      }
      const last = attempt >= Retry.ATTEMPTS;
      // The caller's budget refused it: said as it is (the message says when to try again), not waited out here.
      const refused = answer.status === 429 && Retry.REFUSALS.includes(answer.error.code);
      const again = answer.status === 0 || Retry.RETRYABLE.includes(answer.status);
      if (again && !refused && !last && answer.shouldRetry && Retry.honours(answer.retryAfter)) {
        const why = answer.status === 0 ? "The connection dropped; sending again…" : "The server is busy; trying again…";
        await retryPause(r, attempt, answer.retryAfter, why);
        continue;
      }
      // Another window (or client) is replying in this conversation: this page is behind. It shows the conversation
      // as it is, following that reply live; the message waits in the box until the reply ends.
      if (answer.error.code === "turn_in_progress" && attempt === 1 && sessionId) {
        rejected(r, message, "");
        await loadSession();
        if (!el.message.value) el.message.value = message;
        showError("Another window is replying in this conversation (shown above): send your message when it ends.");
        return;
      }
      // A session that is gone, or has taken all its turns: the next message starts a new one.
      if (answer.error.code === "turn_limit" || answer.error.code === "session_not_found") {
        dividerAfter(answer.error.code === "turn_limit" ? sessionId : null); // the next message starts a new one
        rememberSession(null, answer.error.code === "session_not_found");
      }
      rejected(r, message, refused ? "Not sent: " + answer.error.message : answer.error.message);
      return;
    }
  }

  // A message's Idempotency-Key: 128 random bits, as an sf-string (the IETF draft's header is a quoted string).
  function newKey() {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    return '"' + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("") + '"';
  }

  // POST /chat: {response, watch} for a stream, else {status, error, retryAfter, shouldRetry} (status 0: no answer
  // came). Its watchdog is armed only once the stream is read: the relay sends its first byte after it has started
  // the turn (a cold start included), and cutting the request short before then would only send it again.
  async function postChat(r, body, key) {
    const watch = watchdog(r);
    let response;
    try {
      response = await authFetch("/chat", {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "text/event-stream", "Idempotency-Key": key },
        body: JSON.stringify(body),
        signal: watch.signal,
      });
    } catch (err) {
      watch.release();
      const error = new ApiError(0, "", "Could not reach the server: " + err.message);
      return { status: 0, error, retryAfter: null, shouldRetry: true };
    }
    if (response.ok) return { response, watch };
    const retryAfter = Retry.retryAfterMs(response.headers.get("Retry-After"));
    const shouldRetry = response.headers.get("x-should-retry") !== "false";
    const error = await apiError(response);
    watch.release();
    return { status: response.status, error, retryAfter, shouldRetry };
  }

  async function retryPause(r, attempt, retryAfter, status) {
    r.view.count("retries");
    setStatus(status);
    await pause(Retry.delayMs(attempt, retryAfter), r.controller.signal);
  }

  // A line between a conversation that cannot go on and the new one the next message starts: the model does not
  // see the turns above it. A conversation that took
  // all its turns stays readable here and, after a reload, through the link; one no longer stored has none.
  function dividerAfter(fullSession) {
    const li = document.createElement("li");
    li.className = "divider";
    const why = fullSession ? "This conversation reached its turn limit" : "This conversation is no longer stored";
    li.append(`${why}; the next message starts a new one, without the turns above.`);
    if (fullSession) {
      const link = document.createElement("a");
      link.href = "#session=" + encodeURIComponent(fullSession);
      link.textContent = "Link to this conversation";
      li.append(" ", link);
    }
    el.transcript.append(li);
  }

  // The turn never started: take it off the page, give the text back, say why.
  function rejected(r, message, why) {
    r.ended = true;
    r.view.li.remove();
    el.empty.hidden = el.transcript.children.length > 0;
    if (run === r) {
      run = null;
      setBusy(false);
    }
    if (!el.message.value) el.message.value = message;
    setStatus("");
    showError(why);
    el.message.focus();
  }

  // Stop: POST …/cancel, sent again as a read is (HTTP_API.md, "Retries": a second cancel is 202 again, or 409
  // turn_finished) until the turn's stream ends.
  async function stop() {
    const r = run;
    if (!r || r.turn === null || r.stopping || linked) return;
    r.stopping = true;
    el.stop.disabled = true;
    setStatus("Stopping…");
    const url = `/sessions/${encodeURIComponent(sessionId)}/turns/${r.turn}/cancel`;
    let why = null; // why the cancel failed, once it has for good
    for (let attempt = 1; ; attempt++) {
      let retryAfter = null;
      try {
        const response = await authFetch(url, { method: "POST" });
        // 202: the stream ends with done (cancelled). 409 turn_finished: it ended anyway. Either way, a resume
        // the page stopped trying (interrupted) is made now, to read that end.
        if (response.ok || response.status === 409) {
          wake();
          break;
        }
        why = (await apiError(response)).message;
        retryAfter = Retry.retryAfterMs(response.headers.get("Retry-After"));
        if (!Retry.RETRYABLE.includes(response.status) || !Retry.honours(retryAfter)) break;
      } catch (err) {
        why = err.message;
      }
      if (r.ended || attempt >= Retry.ATTEMPTS) break;
      r.view.count("retries");
      await pause(Retry.delayMs(attempt, retryAfter), r.controller.signal);
      if (r.ended || r.controller.signal.aborted) return;
      why = null;
    }
    if (why !== null && !r.ended) {
      showError("Could not stop the reply: " + why);
      r.stopping = false;
      el.stop.disabled = false;
    }
    el.message.focus();
  }

  // --------------------------------------------------------------------------- the history

  function clearConversation() {
    if (loading) loading.abort();
    loading = null;
    unloaded = false;
    if (run) {
      run.controller.abort(); // closing is not cancelling: the reply is still saved in its session
      run = null;
    }
    setLinked(false);
    el.transcript.replaceChildren();
    el.empty.hidden = false;
    showError("");
    setStatus("");
  }

  async function loadSession() {
    const mine = ++generation;
    clearConversation();
    sessionId = sessionFromUrl();
    if (!sessionId || signedOut()) return; // signed out: loaded once signed in (the sign-in returns to this #session)
    if (!isKnown(sessionId) && !signInMode()) {
      // Someone's link, perhaps not the user's: shown, but nothing is sent in it until the user chooses.
      setLinked(true);
      el.sharedNew.focus();
    }
    setStatus("Loading the conversation…");
    loading = new AbortController();
    let history;
    try {
      history = await getJson(`/sessions/${encodeURIComponent(sessionId)}`, loading.signal);
    } catch (err) {
      if (mine !== generation) return;
      setStatus("");
      if (err instanceof ApiError && err.code === "session_not_found") {
        rememberSession(null, true);
        if (linked) {
          setLinked(false); // nothing to go on with: a new chat
          el.message.focus();
        }
        showError("That conversation was not found (it may have expired). This is a new chat.");
      } else {
        // A message now would go on with a conversation the page does not show: not until it has loaded.
        unloaded = true;
        el.send.disabled = true;
        showError("Could not load the conversation: " + err.message, TRY_AGAIN);
      }
      return;
    }
    if (mine !== generation) return;
    loading = null;
    setStatus("");
    if (signInMode()) knownHere.add(sessionId); // the relay answered it: the signed-in user's own
    const turns = Array.isArray(history.turns) ? history.turns : [];
    for (const turn of turns) {
      const results = Array.isArray(turn.tool_results) ? turn.tool_results.length : 0;
      const view = addTurn(turn.user || (results ? `[tool results for ${results} ${results === 1 ? "call" : "calls"}]` : ""));
      view.setTurn(turn.turn);
      if (turn.status === "in_progress") {
        // Follow it live from its start: the stream gives the whole text, ids included.
        const r = newRun(view);
        r.turn = turn.turn;
        r.eventsUrl = `/sessions/${encodeURIComponent(sessionId)}/turns/${turn.turn}/events`;
        if (!run) {
          run = r;
          setBusy(true);
        }
        follow(r, null);
        continue;
      }
      view.setReasoning(typeof turn.reasoning === "string" ? turn.reasoning : "");
      view.setText(turn.assistant || "");
      for (const call of Array.isArray(turn.tool_calls) ? turn.tool_calls : []) view.toolCall(call);
      view.setStatus(turn.status === "complete" ? "complete" : turn.status, noteFor(turn.status, turn.stop_reason, turn.error));
    }
    keepScrolled(true);
  }

  const TRY_AGAIN = { label: "Try again", run: () => loadSession() };

  // ------------------------------------------------------------------------------ controls

  el.composer.addEventListener("submit", (event) => {
    event.preventDefault();
    if (linked) return; // not until the user chooses to continue it
    if (signedOut()) {
      showError(SIGN_IN_FIRST);
      return;
    }
    const message = el.message.value;
    if (!message.trim()) {
      showError("Type a message first.");
      el.message.focus();
      return;
    }
    if (unloaded) {
      showError("The conversation has not loaded yet: try again, or start a new chat.", TRY_AGAIN);
      return;
    }
    if (run) return;
    el.message.value = "";
    send(message);
  });

  el.message.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      el.composer.requestSubmit();
    } else if (event.key === "Escape" && run) {
      event.preventDefault();
      stop();
    }
  });

  el.stop.addEventListener("click", () => stop());

  function newChat() {
    generation++;
    clearConversation();
    rememberSession(null);
    el.message.focus();
  }

  el.newChat.addEventListener("click", newChat);
  el.sharedNew.addEventListener("click", newChat);

  // The user goes on with the conversation from a link: it is theirs now, here and when it is opened again.
  el.sharedContinue.addEventListener("click", () => {
    if (!linked || !sessionId) return;
    markKnown(sessionId);
    setLinked(false);
    for (const who of el.transcript.querySelectorAll(".msg.user > .who")) who.textContent = "You";
    el.message.focus();
  });

  window.addEventListener("hashchange", () => {
    if (sessionFromUrl() !== sessionId) loadSession();
  });

  // Sign-in (JWT auth mode only): who is signed in, with a sign-out; signed out, a sign-in button and no composer.
  const account = {
    who: document.getElementById("who"),
    signIn: document.getElementById("sign-in"),
    signOut: document.getElementById("sign-out"),
  };
  function showAccount(user) {
    const jwt = signInMode();
    account.who.hidden = !jwt || !user;
    account.who.textContent = user ? `Signed in as ${user}` : "";
    account.signIn.hidden = !jwt || Boolean(user);
    account.signOut.hidden = !jwt || !user;
    setBusy(run !== null);
    if (jwt && !user) setStatus("");
    else if (el.status.textContent === SIGN_IN_FIRST) setStatus("");
  }
  account.signIn.addEventListener("click", () => Auth.signIn());
  account.signOut.addEventListener("click", () => {
    Auth.signOut();
    newChat();
  });

  const start = () => {
    if (Auth) {
      showAccount(Auth.user());
      Auth.onChange(showAccount);
    }
    loadSession();
    if (!linked) el.message.focus();
  };
  if (Auth) Auth.ready.then(start);
  else start();
})();
