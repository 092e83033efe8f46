"""The execution environments of one function: which environment runs an invocation (Lambda's assignment).

An invocation goes to an idle environment, else to a new one while the function has fewer than its
``max_concurrency``, else it waits for one to be free; a function with a ``reserved_concurrency`` throttles it
instead once that many environments are busy (:class:`FunctionThrottled`), as Lambda does. A dead environment
leaves the pool; the next invocation that finds none idle starts a replacement (a cold start), and one handed to an
environment whose process had exited while idle runs in a new one. An environment
whose init timed out is replaced at once by one that retries the init for the invocation that was waiting (see
:mod:`~chatstream_local.lambda_.execution_environment`), in the same place under ``max_concurrency``.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chatstream_local.lambda_.exceptions import FunctionThrottled, LocalLambdaError
from chatstream_local.lambda_.execution_environment import ExecutionEnvironment
from chatstream_local.lambda_.invocation import FunctionError

if TYPE_CHECKING:
    from chatstream_local.lambda_.execution_environment import LogSink
    from chatstream_local.lambda_.function_spec import FunctionSpec
    from chatstream_local.lambda_.invocation import Invocation


@dataclass(frozen=True)
class PoolStats:
    environments_started: int
    environments_alive: int
    invocations: int
    throttles: int = 0  # invocations refused at the reserved concurrency


class EnvironmentPool:
    """The execution environments of one function."""

    def __init__(self, spec: FunctionSpec, log_sink: LogSink | None, init_timeout_s: float) -> None:
        self.spec = spec
        self._log_sink = log_sink
        self._init_timeout_s = init_timeout_s
        self._cond = threading.Condition()
        self._idle: list[ExecutionEnvironment] = []
        self._alive: set[ExecutionEnvironment] = set()
        self._started = 0
        self._invocations = 0
        self._throttles = 0
        self._closed = False
        self._ids = itertools.count(1)

    def dispatch(self, inv: Invocation) -> None:
        """Give the invocation to an idle environment, or a new one, or wait for one to be free."""
        with self._cond:
            self._invocations += 1
            while True:
                if self._closed:
                    raise LocalLambdaError("the local Lambda is stopped")
                while self._idle:
                    idle = self._idle.pop()
                    if idle.assign(inv):
                        return
                    self._alive.discard(idle)  # its process exited while idle: gone, not counted
                reserved = self.spec.reserved_concurrency
                if reserved is not None and len(self._alive) >= reserved:
                    self._throttles += 1
                    raise FunctionThrottled(self.spec.name, reserved)
                if len(self._alive) < self.spec.max_concurrency:
                    environment = self._new_environment()
                    break
                self._cond.wait()
        environment.start(inv)

    def _retry_init(self, timed_out: ExecutionEnvironment, inv: Invocation) -> None:
        """``timed_out``'s init passed the init timeout: retry it in a new environment, with ``inv`` waiting."""
        self._start_again(timed_out, inv, retried_init=True)

    def _reinit(self, exited: ExecutionEnvironment, inv: Invocation) -> None:
        """``exited``'s process exited while idle, with ``inv`` handed to it: run ``inv`` after a new init."""
        self._start_again(exited, inv, retried_init=False)

    def _start_again(self, gone: ExecutionEnvironment, inv: Invocation, *, retried_init: bool) -> None:
        with self._cond:
            self._alive.discard(gone)
            retry = None if self._closed else self._new_environment(retried_init=retried_init)
            self._cond.notify_all()
        if retry is None:
            inv.handle.finish(FunctionError.synthetic("Runtime.Stopped", "the local Lambda was stopped"))
            return
        retry.start(inv)

    def _new_environment(self, *, retried_init: bool = False) -> ExecutionEnvironment:
        environment = ExecutionEnvironment(
            self.spec,
            next(self._ids),
            init_timeout_s=self._init_timeout_s,
            on_idle=self._release,
            on_gone=self._retire,
            on_init_timeout=self._retry_init,
            on_exited_idle=self._reinit,
            retried_init=retried_init,
            log_sink=self._log_sink,
        )
        self._alive.add(environment)
        self._started += 1
        return environment

    def _release(self, environment: ExecutionEnvironment) -> None:
        with self._cond:
            if environment in self._alive and not environment.dead and environment not in self._idle:
                self._idle.append(environment)
            self._cond.notify_all()

    def _retire(self, environment: ExecutionEnvironment) -> None:
        with self._cond:
            self._alive.discard(environment)
            if environment in self._idle:
                self._idle.remove(environment)
            self._cond.notify_all()

    def kill_busy(self) -> Invocation | None:
        """SIGKILL one environment that is running an invocation; that invocation, or None when none was busy."""
        with self._cond:
            environments = list(self._alive)
        for environment in environments:
            killed = environment.kill_if_busy()
            if killed is not None:
                return killed
        return None

    def cut_busy_response(self) -> bool:
        """Cut the response connection of one environment that is running an invocation; False when none was busy."""
        with self._cond:
            environments = list(self._alive)
        return any(environment.cut_response_if_busy() for environment in environments)

    def close(self) -> list[ExecutionEnvironment]:
        """Refuse new invocations; the environments to stop."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            return list(self._alive)

    def stats(self) -> PoolStats:
        with self._cond:
            return PoolStats(self._started, len(self._alive), self._invocations, self._throttles)
