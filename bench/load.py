"""The benchmark's clients: N chats at once against one URL, each in its own thread, timed by the client.

Runs in its own process (see :func:`run_in_subprocess`), so the clients' SSE parsing does not compete for the
interpreter that hosts the local stack's front end, model and emulators. Times are the client's own
``time.monotonic()``: time to first token is request sent → first ``token`` event; gaps are between consecutive
``token`` events of one chat. A chat whose relay sent a token id twice, or whose stream the client had to resume
without being asked (it ended early, or the connection broke), is counted as such: it is not exact. Against a relay
in the JWT auth mode, each request carries the access token it is given (``Authorization: Bearer``).
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field

from chatstream_client.api import ChatClient, TurnResult, ids_in_order
from chatstream_client.auth import BearerAuth


@dataclass
class ChatSample:
    """One chat as its client saw it."""

    ok: bool
    text: str = ""
    ids_contiguous: bool = False
    repeated_ids: int = 0  # token events the relay sent again (the client skipped them)
    unplanned_resumes: int = 0  # resumes nobody asked for: the stream ended early or the connection broke
    retries: int = 0  # requests the client sent again after 429/5xx or a failed connection
    token_events: int = 0
    ttft_ms: float | None = None
    gaps_ms: list[float] = field(default_factory=list)
    started: float = 0.0
    finished: float = 0.0
    error: str | None = None


def _one_chat(
    url: str,
    message: str,
    barrier: threading.Barrier,
    out: list[ChatSample],
    index: int,
    gap_s: float = 0.0,
    pace: bool | None = None,
    token: str | None = None,
) -> None:
    auth = BearerAuth(token) if token is not None else None
    with ChatClient(url, timeout=120, pace=pace, auth=auth) as client:
        barrier.wait()
        if gap_s:
            time.sleep(index * gap_s)  # arrivals spread out: chat i is sent i gaps after the first
        started = time.monotonic()
        try:
            result = client.chat(message)
        except Exception as err:  # a failed chat is a result (exact: false), not a crash of the benchmark
            out[index] = ChatSample(ok=False, started=started, finished=time.monotonic(), error=repr(err))
            return
        finished = time.monotonic()
    times = result.token_times
    out[index] = ChatSample(
        ok=result.done is not None and result.error is None,
        text=result.text,
        ids_contiguous=ids_in_order(result.ids),
        repeated_ids=len(result.repeated_ids),
        unplanned_resumes=result.unplanned_resumes,
        retries=result.retries,
        token_events=len(result.ids),
        ttft_ms=None if result.first_token_at is None else result.first_token_at * 1000,
        gaps_ms=[(b - a) * 1000 for a, b in zip(times, times[1:], strict=False)],
        started=started,
        finished=finished,
        error=_problem(result),
    )


def _problem(result: TurnResult) -> str | None:
    """What went wrong with a chat that ended: its error event, or what the client had to work around."""
    if result.error is not None:
        return str(result.error)
    if not result.clean:
        return "; ".join([*(f"repeated id {seq}" for seq in result.repeated_ids[:3]), *result.incidents[:3]])
    return None


def run_load(
    url: str,
    message: str,
    concurrency: int,
    gap_s: float = 0.0,
    pace: bool | None = None,
    token: str | None = None,
) -> list[dict[str, object]]:
    """``concurrency`` chats of ``message`` started together (or ``gap_s`` apart), with ``?pace=`` when ``pace``
    is given and the bearer ``token`` when given; their samples as dicts (picklable)."""
    barrier = threading.Barrier(concurrency)
    out: list[ChatSample] = [ChatSample(ok=False, error="not run")] * concurrency
    threads = [
        threading.Thread(target=_one_chat, args=(url, message, barrier, out, i, gap_s, pace, token), daemon=True)
        for i in range(concurrency)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [asdict(sample) for sample in out]


class LoadRunner:
    """A long-lived client process; :meth:`run` sends it one batch of chats and returns their samples."""

    def __init__(self) -> None:
        self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))

    def run(
        self,
        url: str,
        message: str,
        concurrency: int,
        gap_s: float = 0.0,
        pace: bool | None = None,
        token: str | None = None,
    ) -> list[ChatSample]:
        samples = self._pool.submit(run_load, url, message, concurrency, gap_s, pace, token).result()
        return [ChatSample(**sample) for sample in samples]  # type: ignore[arg-type]

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
