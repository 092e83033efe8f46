"""One execution environment: a runtime process, its Runtime API endpoint, and the timers Lambda keeps on it.

As on Lambda, an environment runs one invocation at a time:

- it is given an invocation (:meth:`ExecutionEnvironment.assign`) and hands it to its runtime on ``/next``;
  the runtime's response or error completes it, and the environment is free again (``on_idle``);
- an invocation past its deadline kills the environment (``Sandbox.Timedout``, "Task timed out after N
  seconds"); a process that exits mid-invocation fails it with ``Runtime.ExitError``; an init error fails the
  waiting invocation with the runtime's own error and the environment is discarded;
- an init phase longer than the init timeout (10 s) does not fail the waiting invocation: the environment is
  killed and the pool retries the init in a fresh one (``on_init_timeout``), whose init and first invocation
  together have the function's timeout. Lambda's documentation (the execution environment lifecycle, "Init
  phase"): "If all three tasks do not complete within 10 seconds, Lambda retries the Init phase at the time of
  the first function invocation with the configured function timeout." Only when that retried init also runs
  past the function's timeout does the invocation fail (``Sandbox.Timedout``, "Task timed out after N
  seconds");
- a dead environment tells its pool once (``on_gone``); the next invocation gets a new one. A runtime process that
  exits between invocations leaves nothing to fail: Lambda resets such an environment and inits a new one for the
  next invocation. Here an invocation that was handed to it after the exit, before its runtime asked for it with
  ``/next``, goes back to the pool for a new environment (``on_exited_idle``) instead of failing with
  ``Runtime.ExitError``.

Its log is what the process writes to stdout and stderr, line by line, and the records it writes to its telemetry
log pipe (``_LAMBDA_TELEMETRY_LOG_FD``), each whole however many lines it holds, as CloudWatch keeps them.
An invocation that asked for its log (``LogType: Tail``) also gets the lines written while it runs, between
Lambda's ``START`` and ``END``/``REPORT`` lines.
"""

from __future__ import annotations

import math
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from chatstream_local.lambda_.executor_endpoint import RuntimeApiEndpoint
from chatstream_local.lambda_.invocation import FunctionError
from chatstream_local.lambda_.log_pump import OutputPump
from chatstream_local.lambda_.runtime_executor import (
    exit_detail,
    gets_telemetry_log,
    has_exited,
    kill_process_group,
    start_runtime,
)
from chatstream_local.lambda_.telemetry_log import MalformedFrame, cut_short, split_records

if TYPE_CHECKING:
    from collections.abc import Callable

    from chatstream_local.lambda_.function_spec import FunctionSpec
    from chatstream_local.lambda_.invocation import Invocation, StreamHandle

    LogSink = Callable[[str, str], None]
    EnvironmentCallback = Callable[["ExecutionEnvironment"], None]
    InitTimeoutCallback = Callable[["ExecutionEnvironment", "Invocation"], None]


class ExecutionEnvironment:
    """One execution environment of a function: a child process and the Runtime API endpoint only it talks to.

    ``on_idle(environment)`` is called when it finished an invocation and can take another; ``on_gone(environment)``
    once, when it is dead (killed, exited, failed to start); ``on_init_timeout(environment, invocation)`` when its
    init ran past ``init_timeout_s``: the environment is killed, and the invocation waiting for it is the
    callback's to run (in an environment made with ``retried_init=True``); ``on_exited_idle(environment,
    invocation)`` when its process exited between invocations with one handed to it that the runtime never asked
    for: the callback runs it in a new environment. ``log_sink(label, line)`` gets its
    output lines, and Lambda's own report of an init that timed out.

    With ``retried_init`` the environment is a retry of an init that timed out: its init and its first
    invocation share one budget, the function's timeout, counted from its start.
    """

    def __init__(
        self,
        spec: FunctionSpec,
        env_id: int,
        *,
        init_timeout_s: float,
        on_idle: EnvironmentCallback,
        on_gone: EnvironmentCallback,
        on_init_timeout: InitTimeoutCallback,
        on_exited_idle: InitTimeoutCallback,
        retried_init: bool = False,
        log_sink: LogSink | None = None,
    ) -> None:
        self.spec = spec
        self.env_id = env_id
        self.init_timeout_s = init_timeout_s
        self.retried_init = retried_init
        self._on_idle = on_idle
        self._on_gone = on_gone
        self._on_init_timeout_callback = on_init_timeout
        self._on_exited_idle = on_exited_idle
        self._log_sink = log_sink
        self._started_at = 0.0  # time.monotonic() at start()
        self._cond = threading.Condition()
        self._pending: Invocation | None = None  # assigned, not yet fetched with /next
        self._current: Invocation | None = None  # fetched, no response yet
        self._dead = False
        self._initialized = False
        self._init_error: FunctionError | None = None
        self._timer: threading.Timer | None = None
        self._threads: list[threading.Thread] = []
        self._endpoint = RuntimeApiEndpoint(self, self.label)
        self._process: subprocess.Popen[bytes] | None = None
        self._pumps: list[OutputPump] = []  # stdout and stderr (with a log sink), the telemetry log pipe
        self._telemetry_broken = False  # the telemetry log pipe carried something that is not a frame
        self._log_target: StreamHandle | None = None  # the invocation the process's output belongs to
        self._init_ms: float | None = None  # the init phase, in the first invocation's REPORT (a cold start)
        self._first_request_id = ""
        self._invoked_at = 0.0

    @property
    def label(self) -> str:
        return f"{self.spec.name}#{self.env_id}"

    @property
    def dead(self) -> bool:
        return self._dead

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self, first: Invocation) -> None:
        """Start the endpoint and the runtime process, with ``first`` waiting for its ``/next``.

        If the process cannot be started, ``first`` fails with ``Runtime.ExitError`` and the environment is gone.
        """
        with self._cond:
            self._pending = first
            self._log_target = first.handle
        self._started_at = time.monotonic()
        self._endpoint.start()
        telemetry_read, telemetry_write = os.pipe() if gets_telemetry_log(self.spec) else (None, None)
        try:
            self._process = start_runtime(
                self.spec,
                self._endpoint.address,
                capture_output=self._log_sink is not None,
                telemetry_fd=telemetry_write,
            )
        except OSError as err:
            if telemetry_read is not None:
                os.close(telemetry_read)
            message = f"RequestId: {first.request_id} Error: could not start the runtime: {err}"
            first.handle.finish(FunctionError.synthetic("Runtime.ExitError", message))
            self.kill()
            self.discard()
            return
        finally:
            if telemetry_write is not None:
                os.close(telemetry_write)  # the process has its copy; the pipe ends when it (and its children) exit
        process = self._process
        if self._log_sink is not None:
            for what, stream in (("stdout", process.stdout), ("stderr", process.stderr)):
                if stream is not None:
                    pump = OutputPump(stream, self._log_line)
                    self._pumps.append(pump)
                    self._spawn(pump.run, what)
        if telemetry_read is not None:  # read without a sink too: a full pipe would block the writer
            telemetry = OutputPump(
                os.fdopen(telemetry_read, "rb"), self._log_line, split=self._telemetry_split, at_end=self._telemetry_end
            )
            self._pumps.append(telemetry)
            self._spawn(telemetry.run, "telemetry")
        self._spawn(self._watch_exit, "exit-watch")
        if self.retried_init:
            self._arm_timer(self.spec.timeout_s, self._on_retried_init_timeout)
        else:
            self._arm_timer(self.init_timeout_s, self._on_init_timeout)

    def _spawn(self, target: Callable[[], None], what: str) -> None:
        thread = threading.Thread(target=target, name=f"{self.label}-{what}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _log_line(self, line: str) -> None:
        if self._log_sink is not None:
            self._log_sink(self.label, line)
        target = self._log_target
        if target is not None:
            target.log(line)

    def _telemetry_split(self, data: bytes) -> tuple[list[str], bytes]:
        """The whole telemetry log records in ``data``, one log entry each; after bytes that are not a frame, one error
        line and nothing more of the pipe."""
        if self._telemetry_broken:
            return [], b""
        records, rest, error = split_records(data)
        lines = [record.message.rstrip("\n") for record in records]
        if error is not None:
            self._telemetry_failed(error)
            return lines, b""
        return lines, rest

    def _telemetry_end(self, rest: bytes) -> list[str]:
        if not self._telemetry_broken:
            self._telemetry_failed(cut_short(rest))
        return []

    def _telemetry_failed(self, error: MalformedFrame) -> None:
        self._telemetry_broken = True
        if self._log_sink is not None:
            self._log_sink(self.label, f"ERROR: the telemetry log pipe carried something else: {error}")

    def _watch_exit(self) -> None:
        assert self._process is not None
        detail = exit_detail(self._process.wait())
        with self._cond:
            self._dead = True  # no invocation is handed to it any more (``assign``)
            init_error = self._init_error
            initialized = self._initialized
            pending, current = self._pending, self._current
            self._pending = self._current = None
        if pending is not None and initialized and current is None:
            self._on_exited_idle(self, pending)  # never started here: it runs after a new init, as on Lambda
            pending = None
        for inv in (pending, current):
            if inv is None:
                continue
            if init_error is not None:
                inv.handle.finish(init_error)
            else:
                message = f"RequestId: {inv.request_id} Error: Runtime exited with error: {detail}"
                inv.handle.finish(FunctionError.synthetic("Runtime.ExitError", message))
        self.discard()

    def kill(self) -> None:
        """Kill the whole process group (SIGKILL, as Lambda does at a timeout)."""
        with self._cond:
            self._dead = True
            self._cond.notify_all()
        self._cancel_timer()
        if self._process is not None:
            kill_process_group(self._process)

    def cut_response_if_busy(self) -> bool:
        """Cut the connection its runtime sends a response on, if busy (see ``Invocation.cut``); whether it was."""
        with self._cond:
            current = None if self._dead else self._current
        if current is not None:
            current.cut.set()
        return current is not None

    def kill_if_busy(self) -> Invocation | None:
        """Kill the environment if it is running an invocation (as a crash would); that invocation, or None."""
        with self._cond:
            busy = self._current if not self._dead else None
        if busy is not None:
            self.kill()
        return busy

    def stop(self) -> None:
        """Fail what it holds with ``Runtime.Stopped``, kill the process, close the endpoint, join the threads."""
        with self._cond:
            victims = [inv for inv in (self._pending, self._current) if inv is not None]
            self._pending = self._current = None
        for inv in victims:
            inv.handle.finish(FunctionError.synthetic("Runtime.Stopped", "the local Lambda was stopped"))
        self.kill()
        if self._process is not None:
            self.process_exited(timeout=5)
        self._endpoint.stop()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=2)

    def discard(self) -> None:
        """The environment is dead: tell the pool, close the endpoint (from another thread: this may be one of its)."""
        with self._cond:
            self._dead = True
            self._cond.notify_all()
        self._cancel_timer()
        self._on_gone(self)
        self._endpoint.stop_in_background()

    # -- timers ---------------------------------------------------------------------------------------
    def _arm_timer(self, seconds: float, action: Callable[[], None]) -> None:
        self._cancel_timer()
        timer = threading.Timer(max(seconds, 0.0), action)
        timer.daemon = True
        self._timer = timer
        timer.start()

    def _cancel_timer(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _report(self, line: str) -> None:
        """A line Lambda itself writes to the function's log (``INIT_REPORT``...)."""
        if self._log_sink is not None:
            self._log_sink(self.label, line)

    def _on_init_timeout(self) -> None:
        """The init passed the init timeout: kill this environment and hand its invocation back for a retried init."""
        with self._cond:
            if self._initialized or self._dead:
                return
            inv, self._pending = self._pending, None
        self._report(f"INIT_REPORT Init Duration: {self.init_timeout_s * 1000:.2f} ms Phase: init Status: timeout")
        self.kill()
        if inv is not None:
            self._on_init_timeout_callback(self, inv)

    def _on_retried_init_timeout(self) -> None:
        """A retried init passed the function's timeout: its invocation times out, as the invocation would."""
        with self._cond:
            if self._initialized or self._dead:
                return
            inv, self._pending = self._pending, None
        self._report(f"INIT_REPORT Init Duration: {self.spec.timeout_s * 1000:.2f} ms Phase: invoke Status: timeout")
        if inv is not None:
            message = f"RequestId: {inv.request_id} Error: Task timed out after {self.spec.timeout_s:.2f} seconds"
            inv.handle.finish(FunctionError.synthetic("Sandbox.Timedout", message))
        self.kill()

    def _on_deadline(self, inv: Invocation) -> None:
        with self._cond:
            if self._current is not inv:
                return
        message = f"RequestId: {inv.request_id} Error: Task timed out after {self.spec.timeout_s:.2f} seconds"
        self._end_log(inv, timed_out=message)
        inv.handle.finish(FunctionError.synthetic("Sandbox.Timedout", message))
        self.kill()

    # -- the Runtime API's side (RuntimeApiBackend) ---------------------------------------------------
    def assign(self, inv: Invocation) -> bool:
        """Give the (idle) environment its next invocation; False when it is dead: its process exited while idle
        (Lambda knows at once, here a thread waits for it), and the caller gives the invocation a new environment."""
        with self._cond:
            if self._dead or (self._process is not None and has_exited(self._process)):
                self._dead = True
                return False
            self._pending = inv
            self._cond.notify_all()
            return True

    def next_invocation(self) -> Invocation | None:
        # What the runtime wrote before asking for its next event (its init's output, the last invocation's lines) is
        # read now, for the invocation it belongs to: a pump's thread could read it after the next START.
        for pump in self._pumps:
            pump.catch_up()
        with self._cond:
            first = not self._initialized
            self._initialized = True
            if self._current is not None:  # /next without a response: that invocation got nothing
                stale, self._current = self._current, None
                message = "the runtime asked for the next event without responding"
                stale.handle.finish(FunctionError.synthetic("Runtime.NoResponse", message))
            while self._pending is None and not self._dead:
                self._cond.wait()
            if self._dead:
                return None
            inv, self._pending = self._pending, None
            assert inv is not None
            budget_s = self.spec.timeout_s
            if first and self.retried_init:  # the retried init spent part of the function's timeout
                budget_s -= time.monotonic() - self._started_at
            inv.deadline_ms = int((time.time() + budget_s) * 1000)
            self._current = inv
            self._log_target = inv.handle
            self._arm_timer(budget_s, lambda: self._on_deadline(inv))
        self._invoked_at = time.monotonic()
        if self._init_ms is None:
            self._init_ms = (self._invoked_at - self._started_at) * 1000
            self._first_request_id = inv.request_id
        inv.handle.log(f"START RequestId: {inv.request_id} Version: $LATEST")
        return inv

    def invocation(self, request_id: str) -> Invocation | None:
        with self._cond:
            if self._current is not None and self._current.request_id == request_id:
                return self._current
        return None

    def complete(self, inv: Invocation, error: FunctionError | None) -> None:
        """The runtime finished its response (or reported an error): the environment is free again."""
        with self._cond:
            if self._current is not inv:
                return
            self._current = None
        self._cancel_timer()
        self._end_log(inv)
        inv.handle.finish(error)
        self._on_idle(self)

    def _end_log(self, inv: Invocation, timed_out: str | None = None) -> None:
        """Lambda's ``END`` and ``REPORT`` lines, once the runtime's own lines are in (``LogType: Tail`` only)."""
        if not inv.handle.tail_log:
            return
        for pump in self._pumps:
            pump.catch_up()
        duration_ms = (time.monotonic() - self._invoked_at) * 1000
        if timed_out is not None:
            inv.handle.log(timed_out)
        inv.handle.log(f"END RequestId: {inv.request_id}")
        report = (
            f"REPORT RequestId: {inv.request_id}\tDuration: {duration_ms:.2f} ms\t"
            f"Billed Duration: {math.ceil(duration_ms)} ms\tMemory Size: {self.spec.memory_mb} MB"
        )
        peak_mb = self._peak_memory_mb()
        if peak_mb is not None:
            report += f"\tMax Memory Used: {peak_mb} MB"
        if self._init_ms is not None and inv.request_id == self._first_request_id:
            report += f"\tInit Duration: {self._init_ms:.2f} ms"
        inv.handle.log(report)

    def _peak_memory_mb(self) -> int | None:
        """The runtime process's peak resident memory (``VmHWM``), where /proc has it."""
        if self._process is None:
            return None
        try:
            status = Path(f"/proc/{self._process.pid}/status").read_text()
        except OSError:
            return None
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                return math.ceil(int(line.split()[1]) / 1024)
        return None

    def report_init_error(self, error: FunctionError) -> None:
        with self._cond:
            self._init_error = error
            inv, self._pending = self._pending, None
        if inv is not None:
            inv.handle.finish(error)
        self.kill()  # Lambda discards an environment whose init failed

    def process_exited(self, timeout: float) -> bool:
        if self._process is None:
            return True
        try:
            self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
