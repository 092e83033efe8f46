"""The local Lambda service: :class:`LocalLambda`, the functions of a stack and their environment pools.

Each function has a pool of execution environments (:mod:`~chatstream_local.lambda_.assignment`); each environment
is one child process with its own Runtime API endpoint, so ``/next`` from an environment only ever gets that
environment's invocations. Environments start on demand (a cold start on the first invocation that finds none
idle). The Invoke API (:mod:`~chatstream_local.lambda_.invoke`) and the Function URL front end
(:mod:`~chatstream_local.lambda_.function_url`) call in through :meth:`LocalLambda.invoke` and
:meth:`LocalLambda.invoke_stream`.
"""

from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING

from chatstream_local.lambda_.assignment import EnvironmentPool
from chatstream_local.lambda_.exceptions import LocalLambdaError, UnknownFunction
from chatstream_local.lambda_.invocation import Invocation, KilledInvocation, StreamHandle, new_trace_id

if TYPE_CHECKING:
    from collections.abc import Sequence

    from chatstream_local.lambda_.assignment import PoolStats
    from chatstream_local.lambda_.execution_environment import LogSink
    from chatstream_local.lambda_.function_spec import FunctionSpec
    from chatstream_local.lambda_.invocation import InvokeResult

DEFAULT_INIT_TIMEOUT_S = 10.0  # Lambda's init phase limit for on-demand functions


class LocalLambda:
    """Runs functions locally behind the Lambda Runtime API, one process per execution environment.

    ``log_sink(label, line)`` receives every line the environments write to stdout/stderr (label is
    ``<function>#<environment number>``); without one their output is discarded.
    """

    def __init__(
        self,
        specs: Sequence[FunctionSpec],
        *,
        log_sink: LogSink | None = None,
        init_timeout_s: float = DEFAULT_INIT_TIMEOUT_S,
    ) -> None:
        names = [spec.name for spec in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate function names in {names}")
        self._specs = {spec.name: spec for spec in specs}
        self._log_sink = log_sink
        self._init_timeout_s = init_timeout_s
        self._pools: dict[str, EnvironmentPool] = {}
        self._lock = threading.Lock()

    @property
    def function_names(self) -> list[str]:
        return list(self._specs)

    def spec(self, name: str) -> FunctionSpec:
        try:
            return self._specs[name]
        except KeyError:
            raise UnknownFunction(name) from None

    def start(self) -> LocalLambda:
        """Ready the pools. Environments start on demand (a cold start on the first invocation)."""
        with self._lock:
            if not self._pools:
                self._pools = {
                    name: EnvironmentPool(spec, self._log_sink, self._init_timeout_s)
                    for name, spec in self._specs.items()
                }
        return self

    def stop(self) -> None:
        """Stop every environment: kill their process groups and close their Runtime API endpoints."""
        with self._lock:
            pools = list(self._pools.values())
        environments = [environment for pool in pools for environment in pool.close()]
        for environment in environments:  # kill them all first, then wait for each
            environment.kill()
        for environment in environments:
            environment.stop()

    def __enter__(self) -> LocalLambda:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _pool(self, name: str) -> EnvironmentPool | None:
        spec = self.spec(name)
        with self._lock:
            return self._pools.get(spec.name)

    def invoke_stream(
        self,
        name: str,
        payload: bytes,
        *,
        client_context: str | None = None,
        cognito_identity: str | None = None,
        tail_log: bool = False,
        streamed: bool = True,
        request_id: str | None = None,
    ) -> StreamHandle:
        """Start an invocation and return its response as it arrives (see :class:`StreamHandle`).

        ``client_context`` is the client context JSON (not base64), passed to the runtime as
        ``Lambda-Runtime-Client-Context``. ``tail_log`` keeps the execution log (``LogType: Tail``). ``streamed``:
        the caller reads the response as a stream; ``False``, a buffered invocation, held to 6 MB (:class:`Invocation`).
        ``request_id``: the function's ``aws_request_id``; a new one by default (an asynchronous event passes its own,
        which every attempt at it shares, as on Lambda).
        """
        pool = self._pool(name)
        if pool is None:
            raise LocalLambdaError("LocalLambda.start() was not called")
        handle = StreamHandle(request_id or str(uuid.uuid4()), pool.spec.name, tail_log=tail_log)
        pool.dispatch(Invocation(handle, payload, client_context, cognito_identity, new_trace_id(), streamed=streamed))
        return handle

    def invoke(
        self,
        name: str,
        payload: bytes,
        *,
        client_context: str | None = None,
        cognito_identity: str | None = None,
        tail_log: bool = False,
        request_id: str | None = None,
    ) -> InvokeResult:
        """Invoke and wait for the whole response (the Invoke API's ``RequestResponse``)."""
        return self.invoke_stream(
            name,
            payload,
            client_context=client_context,
            cognito_identity=cognito_identity,
            tail_log=tail_log,
            streamed=False,
            request_id=request_id,
        ).result()

    def kill_busy_environment(self, name: str) -> KilledInvocation | None:
        """SIGKILL one environment of ``name`` that is running an invocation (as a crash would).

        Its invocation fails with ``Runtime.ExitError``; the environment is discarded. Returns which invocation
        was killed (its request id and event), or None when no environment was busy.
        """
        pool = self._pool(name)
        killed = pool.kill_busy() if pool is not None else None
        return KilledInvocation(killed.request_id, killed.payload) if killed is not None else None

    def cut_response_connection(self, name: str) -> bool:
        """Cut the connection one busy environment of ``name`` streams its response on (a network fault).

        The Runtime API drops it when the next chunk arrives; the invocation fails with
        ``Runtime.TruncatedResponse``, and the runtime may serve the next one. False when none was busy.
        """
        pool = self._pool(name)
        return pool is not None and pool.cut_busy_response()

    def stats(self) -> dict[str, PoolStats]:
        with self._lock:
            pools = dict(self._pools)
        return {name: pool.stats() for name, pool in pools.items()}
