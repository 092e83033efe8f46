// When the chat page sends a request again, and how long it waits first: the numbers and the rule of the
// Python client (client/chatstream_client/retry.py and api.py; docs/HTTP_API.md, "Retries"). The wait before
// retry n is uniform in [0, min(4 s, 0.25 s * 2^(n-1))] ("full jitter"), never shorter than a Retry-After the
// answer carried; five attempts in all; an answer asking for more than 30 s, or saying x-should-retry: false, ends
// the retries instead, and so does a refusal of the caller's budget (REFUSALS), which the page shows as it is.
//
// A copy: the page runs in the browser and cannot import the Python. The numbers' source is the client's
// retry.py (RetryPolicy, RETRYABLE, REFUSALS) and api.py (OUTAGE_S, READ_TIMEOUT_S); the
// functions' layer has the same formula in chatstream/backoff.py, with the AWS calls' own numbers.
// tests/unit/test_backoff_copies.py runs this file in node and fails when a number here differs from the
// client's, or the formula from either copy's; RESUME_CAP_MS alone is the page's own.
//
// A resume after a dropped stream is not a retry (HTTP_API.md, "Retries"): the page resumes for as long as a
// network outage may last, waiting uniform in [0, min(15 s, 0.25 s * 2^(n-1))] before resume n, and gives up
// (offering to resume by hand) only after five minutes in which no resume brought anything.
//
// A stream that brings no byte at all for IDLE_MS is taken for a dropped one, and resumed: the relay sends a
// `: keep-alive` comment after 10 s without events (HTTP_API.md, `POST /chat`), so three keep-alive periods
// of silence mean the network died without resetting the connection (Wi-Fi gone, a laptop asleep, a NAT that
// forgot it), which the browser's TCP would otherwise take minutes to notice.
"use strict";

(function (global) {
  const ATTEMPTS = 5;
  const BASE_MS = 250;
  const CAP_MS = 4000;
  const MAX_RETRY_AFTER_MS = 30000;
  const RESUME_CAP_MS = 15000;
  const RESUME_GIVE_UP_MS = 5 * 60 * 1000;
  const IDLE_MS = 3 * 10 * 1000; // three of the relay's keep-alive periods without a byte
  // The request did not take effect, or may have: a read (GET), a cancel, or POST /chat with its Idempotency-Key
  // (sent again, it joins the turn the first send started) may be sent again.
  const RETRYABLE = Object.freeze([429, 500, 502, 503, 504]);
  // A 429 of these codes is the caller's budget (requests per minute, turns at once, tokens per day): shown, with
  // when to try again, not waited out.
  const REFUSALS = Object.freeze(["insufficient_quota", "rate_limit_exceeded"]);

  // A Retry-After header in milliseconds (delay-seconds, or an HTTP-date: "Wed, 21 Oct 2015 07:28:00 GMT");
  // null when absent or unreadable.
  function retryAfterMs(value, now = Date.now()) {
    if (typeof value !== "string" || value.trim() === "") return null;
    const text = value.trim();
    if (/^[0-9]+$/.test(text)) return Number(text) * 1000;
    if (!/^[A-Za-z]{3}, \d{2} [A-Za-z]{3} \d{4} \d{2}:\d{2}:\d{2} GMT$/.test(text)) return null;
    const when = Date.parse(text);
    return Number.isNaN(when) ? null : Math.max(0, when - now);
  }

  // Milliseconds to wait before retry number `retry` (1 for the first), at least `retryAfter` when given.
  function delayMs(retry, retryAfter = null, random = Math.random, cap = CAP_MS) {
    const jittered = random() * Math.min(cap, BASE_MS * 2 ** (Math.max(retry, 1) - 1));
    return retryAfter === null ? jittered : Math.max(jittered, retryAfter);
  }

  // Milliseconds to wait before resume number `resume` after a drop: as delayMs, under a higher cap.
  function resumeDelayMs(resume, retryAfter = null, random = Math.random) {
    return delayMs(resume, retryAfter, random, RESUME_CAP_MS);
  }

  // Whether a retry may wait what the answer asked for (null: it asked for nothing).
  function honours(retryAfter) {
    return retryAfter === null || retryAfter <= MAX_RETRY_AFTER_MS;
  }

  global.ChatstreamRetry = Object.freeze({
    ATTEMPTS,
    BASE_MS,
    CAP_MS,
    MAX_RETRY_AFTER_MS,
    RESUME_CAP_MS,
    RESUME_GIVE_UP_MS,
    IDLE_MS,
    RETRYABLE,
    REFUSALS,
    retryAfterMs,
    delayMs,
    resumeDelayMs,
    honours,
  });
})(window);
