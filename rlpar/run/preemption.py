"""Stopping a run when its scheduler asks: SIGTERM and SIGUSR1 finish the chunk in progress and save a checkpoint.

SLURM, Kubernetes and most batch systems send SIGTERM some seconds before they kill a job (SLURM's ``KillWait``,
30 s by default; Kubernetes' ``terminationGracePeriodSeconds``, 30 s), and SLURM can send SIGUSR1 earlier
(``sbatch --signal=USR1@120``). While ``Watch`` is active either signal only sets a flag: the runner checks it after
each chunk of updates (a compiled chunk cannot be cut short), saves a checkpoint there and raises ``Preempted``; the
command line then prints one line and exits with ``EXIT_CODE``. A resumed run continues from that checkpoint as from
any other, so it ends bit-identical to a run never stopped. A signal while the run's programs compile stops it at
once, with nothing new to save (``rlpar.run.compiling``: the main thread waits for XLA in short slices).

Two things end the process at once instead, with exit code ``128 + signal`` as an unhandled signal would: the same
signal a second time, and ``grace_s`` seconds passing after the first one without the run having stopped (a long
chunk, a slow disk). Neither can damage the newest complete checkpoint: a checkpoint counts only once its commit
marker is written, after every file of it (``rlpar.run.checkpoint``), and a half-written one is removed at the next
start.

In a multi-process run the processes agree after every chunk on whether any of them was signalled
(``hosts.all_processes_agree``), so all of them stop after the same update and save the same checkpoint, even
when the scheduler signalled only one, or signalled them at different moments.

Ctrl-C (SIGINT) keeps its own meaning: stop now, keep the last checkpoint (``rlpar.run.chunks.Interrupted``).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Callable

SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
EXIT_CODE = 75  # EX_TEMPFAIL (sysexits.h): stopped on request at a clean point; resume to continue
GRACE_S = 60  # default seconds from the first signal to the forced end


class Preempted(Exception):
    """The run stopped at ``update`` because the scheduler asked (``signal_name``); ``checkpoint_update``: the
    checkpoint it saved there (or ``None``: no run dir, or checkpoints off); ``compiling``: asked before its first
    chunk, while compiling (``checkpoint_update``: the newest checkpoint, or ``None``: none yet)."""

    def __init__(self, update: int, checkpoint_update: int | None, run_dir: str, signal_name: str,
                 compiling: bool = False):
        super().__init__(f"preempted ({signal_name}) at update {update}")
        self.update, self.checkpoint_update, self.run_dir = update, checkpoint_update, run_dir
        self.signal_name, self.compiling = signal_name, compiling


class Watch:
    """While active (``with Watch(grace_s):``), SIGTERM and SIGUSR1 set ``requested`` instead of ending the process;
    the previous handlers come back on exit. Signals reach only the main thread: elsewhere, or with ``grace_s=0``,
    it does nothing and the signals keep their handlers."""

    def __init__(self, grace_s: float = GRACE_S):
        self.grace_s = grace_s
        self.requested: str | None = None  # the first signal's name, e.g. "SIGTERM"
        self.compiling: Callable[[], str] | None = None  # while the run compiles and stops on a signal: what it
        # compiles, e.g. "the chunk program" (set by rlpar.run.compiling.Compiles)
        self._previous: dict = {}
        self._timer: threading.Timer | None = None

    def __enter__(self) -> "Watch":
        if self.grace_s > 0 and threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
        if self._timer is not None:
            self._timer.cancel()

    def _on_signal(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self.requested is not None:
            _end_now(signum, f"{name} again: stopping now")
        self.requested = name
        if self.compiling is not None:
            print(f"rlpar: {name} received while compiling {self.compiling()}: nothing to save yet, stopping",
                  file=sys.stderr, flush=True)
        else:
            print(f"rlpar: {name} received: finishing the current chunk of updates, then saving a checkpoint "
                  f"(a second {name}, or {self.grace_s:g}s without finishing, ends the run at once)",
                  file=sys.stderr, flush=True)
        self._timer = threading.Timer(self.grace_s, _end_now, (signum, f"no clean stop within {self.grace_s:g}s of "
                                                                          f"{name}: stopping now"))
        self._timer.daemon = True
        self._timer.start()


def _end_now(signum: int, why: str) -> None:
    """End the process at once with ``128 + signum``, as the signal unhandled would; the newest complete checkpoint
    stays as it is (a checkpoint being written is left uncommitted and removed at the next start)."""
    print(f"rlpar: {why}; the newest complete checkpoint is kept", file=sys.stderr, flush=True)
    os._exit(128 + signum)


def agreed(watch: Watch | None) -> bool:
    """Whether any process of the run has been asked to stop (a collective in a multi-process run: every process
    calls it after every chunk)."""
    from rlpar.core import hosts

    local = int(watch is not None and watch.requested is not None)
    return any(flag for (flag,) in hosts.all_processes_agree([local]))
