"""The CLI's progress display: a live rich bar on a terminal, one plain line per logged chunk otherwise.

Both show env steps, steps per second, the latest mean episode return and an ETA. The ETA is the updates left times
the mean seconds per update of the chunks this process has run (compile time excluded).
"""

from __future__ import annotations

import sys
from typing import TextIO



def format_record(record: dict, num_updates: int) -> str:
    ret = record["episode_return"]
    ret_s = f"{ret:9.2f}" if ret is not None else "      n/a"
    return (
        f"update {record['update']:>6}/{num_updates}  steps {record['env_steps']:>11,}  "
        f"sps {record['sps']:>10,.0f}  return {ret_s}  "
        f"loss {record.get('loss/total', float('nan')):8.4f}"
    )


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

    def compiling(self) -> None:
        print("compiling the update program...", file=self.stream, flush=True)

    def compiled(self, seconds: float) -> None:
        print(f"compiled in {seconds:.1f}s", file=self.stream, flush=True)

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()


def _pooled_return(records: list[dict], slot: int | None = None, last: int = 5) -> float | None:
    """Mean episode return over the last ``last`` chunks that finished an episode (weighted by episodes), of one
    slot's stats (``record["slots"][slot]``) or of the pooled ones."""
    stats = [r if slot is None else r["slots"][slot] for r in records]
    recent = [s for s in stats if s["episode_return"] is not None][-last:]
    episodes = sum(s["episodes"] for s in recent)
    return sum(s["episode_return"] * s["episodes"] for s in recent) / episodes if episodes else None


def recent_returns(records: list[dict], slots) -> str:
    """The recent mean return as text: one number, or one per swept value (``lr=0.001: 123.45, ...``), never a
    pool of different hyperparameters. ``slots`` is the run's ``rlpar.seeds.Slots``."""
    if slots.field is None or not records or "slots" not in records[-1]:
        value = _pooled_return(records)
        return f"{value:.2f}" if value is not None else "n/a"
    parts = []
    for value in dict.fromkeys(slots.values):
        returns = [_pooled_return(records, i) for i, v in enumerate(slots.values) if v == value]
        returns = [r for r in returns if r is not None]
        mean = f"{sum(returns) / len(returns):.2f}" if returns else "n/a"
        parts.append(f"{slots.field}={value:g}: {mean}")
    return ", ".join(parts)
