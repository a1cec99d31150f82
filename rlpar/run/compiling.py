"""Compiling without holding the main thread: each compile the runner waits for runs in a thread of its own, and the
main thread waits for it in short timed waits.

XLA compiles in C++ without Python's lock, for minutes on a large program, so a compile in a thread costs the run
nothing. Python runs signal handlers only on the main thread, between bytecodes: a main thread inside XLA's compile
took Ctrl-C (``KeyboardInterrupt``) or a scheduler's SIGTERM (``rlpar.run.preemption.Watch``) only once the compile
ended. Waiting in slices of ``POLL_S`` it takes them at once: Ctrl-C raises where it waits, and a signalled ``Watch``
stops the run there (``stop``: nothing is there to save yet). A compile abandoned that way finishes in its thread
(``CompileThread``): the command line ends its process without waiting for it, a Python caller's interpreter waits
for it at exit.

While it waits it tells the runner's ``on_status`` hook (``rlpar.run.chunks.Hooks``) what compiles and since when:
``("still compiling", {"programs": "the chunk program", "seconds": 12.0})``, once a second from ``QUIET_S`` on.

It imports ``compile_cache``, ``preemption`` and ``rlpar.core.jax_internals`` only.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Generic, TypeVar

from rlpar.core import jax_internals
from rlpar.run import compile_cache, preemption

POLL_S = 0.2  # the longest the main thread waits between looks at the signals
QUIET_S = 3.0  # a compile shorter than this is reported only by the "compiling" and "compiled" statuses
STILL_COMPILING = "still compiling"  # the status while a compile is waited for, from QUIET_S on
T = TypeVar("T")


def import_before_threads(platform: str) -> None:
    """Import what tracing a program imports on first use, before a second thread traces one: two threads importing
    one module can deadlock on Python's import locks, as they did on ``scipy.linalg.cython_blas`` (imported when the
    CPU LAPACK kernels are first set up, for the orthogonal initialiser's QR). Only on the CPU: another backend's
    programs call no LAPACK, and the set-up (SciPy's linalg import) is slow."""
    if platform == "cpu":
        jax_internals.initialize_lapack()


class CompileThread(threading.Thread):
    """The thread of a ``Pending`` compile. Not a daemon: an interpreter exiting while it compiles waits for it, since
    a daemon thread that comes back from XLA (or from tracing) while the interpreter finalizes aborts the process
    (``terminate called``, exit code 134). The command line ends its process with ``os._exit`` and does not join
    these (``rlpar.tools.train.end_process``): nothing of theirs is left to write."""


class Pending(Generic[T]):
    """``work()`` running in a ``CompileThread`` named ``rlpar-<program>``; ``done`` is set once it returned or
    raised."""

    def __init__(self, program: str, work: Callable[[], T], finished: Callable[[], None] = lambda: None):
        self.program = program
        self.done = threading.Event()
        self.hits = 0  # the persistent-cache hits of its thread (rlpar.run.compile_cache counts them per thread)
        self._value: T | None = None
        self._error: BaseException | None = None
        self._finished = finished
        CompileThread(target=self._run, args=(work,), name=f"rlpar-{program}").start()

    def _run(self, work: Callable[[], T]) -> None:
        before = compile_cache.hits()
        try:
            self._value = work()
        except BaseException as err:  # noqa: BLE001  (re-raised on the waiting thread)
            self._error = err
        finally:
            self.hits = compile_cache.hits() - before
            self._finished()
            self.done.set()

    def value(self) -> T:
        """What ``work()`` returned, or its exception raised here; call once ``done`` is set."""
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


def describe(programs: list[str]) -> str:
    """``["chunk"]`` -> ``"the chunk program"``; ``["chunk", "evaluation", "init"]`` -> ``"the chunk, evaluation and
    init programs"``; ``[]`` -> ``"the run's programs"``."""
    if not programs:
        return "the run's programs"
    if len(programs) == 1:
        return f"the {programs[0]} program"
    return f"the {', '.join(programs[:-1])} and {programs[-1]} programs"


class Compiles:
    """The run's compiles and the main thread's waits for them; ``with Compiles(...)`` while the run compiles.

    ``watch``: the run's ``preemption.Watch``; inside the ``with``, its message on a signal names what compiles, and
    the next wait raises ``stop(signal_name)`` (``stop=None``, as in a multi-process run, where the processes stop
    together after their first chunk: the wait goes on). ``on_status``: the runner's hook, told
    ``STILL_COMPILING``. ``clock``: seconds, for the elapsed time reported.
    """

    def __init__(self, watch: preemption.Watch | None = None, stop: Callable[[str], BaseException] | None = None,
                 on_status: Callable[[str, dict], None] | None = None, clock: Callable[[], float] = time.monotonic,
                 poll_s: float = POLL_S, quiet_s: float = QUIET_S):
        self.watch, self.stop, self.on_status = watch, stop, on_status
        self.clock, self.poll_s, self.quiet_s = clock, poll_s, quiet_s
        self.started = clock()
        self._active: dict[str, int] = {}  # programs compiling now (on any thread), in the order they started
        self._reported = -1  # the whole seconds of the last status

    def __enter__(self) -> "Compiles":
        if self.watch is not None and self.stop is not None:
            self.watch.compiling = self.describe
        return self

    def __exit__(self, *exc) -> None:
        if self.watch is not None and self.watch.compiling == self.describe:
            self.watch.compiling = None

    def describe(self) -> str:
        """The programs compiling now, for a person (``describe``). Called by a signal handler too: it only reads."""
        return describe(list(self._active))

    @contextlib.contextmanager
    def compiling(self, program: str):
        """``program`` counts as compiling while inside (on the calling thread: tracing, lowering)."""
        self._enter(program)
        try:
            yield
        finally:
            self._leave(program)

    def start(self, program: str, work: Callable[[], T]) -> Pending[T]:
        """``work()`` (which compiles ``program``) started in a thread of its own; ``wait`` for it."""
        self._enter(program)
        return Pending(program, work, lambda: self._leave(program))

    def wait(self, pending: Pending[T]) -> T:
        """What ``pending`` returns (or raises), waited for in slices of ``poll_s``: between them, signal handlers
        run, a signalled watch stops the run, and a long compile is reported."""
        while True:
            self._check()
            if pending.done.wait(self.poll_s):
                return pending.value()

    def call(self, program: str, work: Callable[[], T]) -> T:
        """``work()`` as if called here, but run in a thread while this one waits: its persistent-cache hits count
        as this thread's (the runner compares them around a compile to say whether a program came from the cache)."""
        pending = self.start(program, work)
        try:
            return self.wait(pending)
        finally:
            if pending.done.is_set():
                compile_cache.count_hits(pending.hits)

    def _enter(self, program: str) -> None:
        self._active[program] = self._active.get(program, 0) + 1

    def _leave(self, program: str) -> None:
        left = self._active.get(program, 1) - 1
        if left:
            self._active[program] = left
        else:
            self._active.pop(program, None)

    def _check(self) -> None:
        if self.stop is not None and self.watch is not None and self.watch.requested is not None:
            raise self.stop(self.watch.requested)
        seconds = self.clock() - self.started
        if self.on_status is not None and seconds >= self.quiet_s and int(seconds) != self._reported:
            self._reported = int(seconds)
            self.on_status(STILL_COMPILING, {"programs": self.describe(), "seconds": seconds})
