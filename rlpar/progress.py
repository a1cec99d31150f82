"""The CLI's progress display: a live rich bar on a terminal, one plain line per logged chunk otherwise.

Both show env steps, steps per second, the latest mean episode return and an ETA. The ETA is the updates left times
the mean seconds per update of the chunks this process has run (compile time excluded).
"""

from __future__ import annotations

import sys
from typing import TextIO

from rlpar.runner import format_record


def format_eta(seconds: float | None) -> str:
    """``None`` -> ``"?"``; 75.2 -> ``"1m15s"``; 3725 -> ``"1h02m05s"``."""
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _has_rich() -> bool:
    import importlib.util

    return importlib.util.find_spec("rich") is not None


class ProgressDisplay:
    """Use as ``with ProgressDisplay(num_updates, batch_size) as show: run(..., on_log=show)``.

    Args:
      num_updates: updates in the whole run.
      steps_per_update: env steps per update (the batch size), for the step total.
      start_update: updates already done before this process started (a resumed run).
      stream: where to write; ``sys.stdout`` by default.
      live: force the rich bar on (``True``) or off (``False``); by default on when ``stream`` is a terminal.
    """

    def __init__(self, num_updates: int, steps_per_update: int, *, start_update: int = 0,
                 stream: TextIO | None = None, live: bool | None = None):
        self.num_updates = num_updates
        self.steps_per_update = steps_per_update
        self.stream = stream if stream is not None else sys.stdout
        self.live = (self.stream.isatty() and _has_rich()) if live is None else live
        self._seconds = 0.0  # wall time of the chunks seen
        self._updates = 0  # updates in the chunks seen
        self._last_update = start_update
        self._progress = None
        self._task = None

    def eta_s(self) -> float | None:
        if not self._updates:
            return None
        return (self.num_updates - self._last_update) * self._seconds / self._updates

    def __enter__(self) -> "ProgressDisplay":
        if self.live:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn

            console = Console(file=self.stream, force_terminal=True)
            self._progress = Progress(
                TextColumn("[bold]update {task.fields[update]}/{task.fields[updates]}"),
                BarColumn(),
                TextColumn("steps {task.completed:,.0f}/{task.total:,.0f}"),
                TextColumn("sps {task.fields[sps]}"),
                TextColumn("return {task.fields[ret]}"),
                TextColumn("eta {task.fields[eta]}"),
                console=console,
            )
            self._progress.start()
            self._task = self._progress.add_task(
                "train", total=self.num_updates * self.steps_per_update,
                completed=self._last_update * self.steps_per_update,
                update=self._last_update, updates=self.num_updates, sps="?", ret="n/a", eta="?",
            )
        return self

    def __call__(self, record: dict) -> None:
        self._updates += record["update"] - self._last_update
        self._last_update = record["update"]
        self._seconds += record.get("time_s", 0.0)
        eta = format_eta(self.eta_s())
        if self._progress is not None:
            ret = record["episode_return"]
            self._progress.update(
                self._task, completed=record["env_steps"], update=record["update"], sps=f"{record['sps']:,.0f}",
                ret=f"{ret:.2f}" if ret is not None else "n/a", eta=eta,
            )
        else:
            print(f"{format_record(record, self.num_updates)}  eta {eta}", file=self.stream, flush=True)

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()
