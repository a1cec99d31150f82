"""The CLI's progress display: a live rich bar on a terminal, one plain line per logged chunk otherwise.

Both show env steps, steps per second, the latest mean episode return and an ETA. The ETA is the updates left times
the mean seconds per update of the chunks this process has run (compile time excluded). While the update program
compiles (``compiling`` / ``compiled``) the display says so instead of standing still; a compile longer than a few
seconds (``still_compiling``) is shown with the programs it waits for and the seconds so far, and past ``SAFE_S``
with a word that Ctrl-C stops the run safely.

A record with a greedy evaluation (``eval/episode_return``, see ``--eval-every``) adds its mean return (``eval``);
the live bar keeps showing the latest one.

A run of several slots (``--num-seeds``, ``--sweep``) shows the return of each swept value (or of each seed), from
the record's ``"slots"``, instead of the pooled mean; ``slot_labels`` names the slots from ``config.json``.

This module imports nothing from the runner, so the runner can import ``format_record`` from here.
"""

from __future__ import annotations

import sys
from typing import TextIO

COMPILING = "compiling the update program..."
SAFE_S = 60  # from here a long compile's status names the programs and says that Ctrl-C is safe
PLAIN_MARKS_S = (5, 15, 30)  # without a live bar, a long compile prints a line at these seconds, then once a minute
EVAL_RETURN = "eval/episode_return"  # a record's mean greedy-evaluation return, when it has one
MEMBERS = ["<members>"]  # slot_labels of a population run (--search): show the best member, not every one


def slot_label(slot: dict) -> str:
    """The swept setting of one slot of ``config.json``'s ``"slots"``: ``{"slot": 2, "seed_index": 0, "lr": 0.001}``
    -> ``"lr=0.001"``; ``""`` for a slot that only has a seed."""
    return ", ".join(f"{k}={v}" for k, v in slot.items() if k not in ("slot", "seed_index"))


def slot_labels(slots: list[dict]) -> list[str]:
    """A display label per slot: its swept setting (``"lr=0.001"``; the seeds of one value share it), or, for a run
    of seeds only, ``"seed=0"``, ``"seed=1"``, ..."""
    labels = [slot_label(slot) for slot in slots]
    if not any(labels):
        labels = [f"seed={slot.get('seed_index', i)}" for i, slot in enumerate(slots)]
    return labels


def returns_by_label(slots: list[dict], labels: list[str]) -> dict[str, float | None]:
    """Mean episode return per label over the slots that carry it, weighted by the episodes each finished
    (``None`` where none finished); labels in order of first appearance.

    E.g. slots with (return 10, 1 episode) and (return 40, 2 episodes) under one label -> (10 + 80) / 3 = 30.
    """
    sums: dict[str, list[float]] = {}
    for slot, label in zip(slots, labels):
        total = sums.setdefault(label, [0.0, 0.0])
        if slot.get("episode_return") is not None and slot.get("episodes"):
            total[0] += slot["episode_return"] * slot["episodes"]
            total[1] += slot["episodes"]
    return {label: (ret / n if n else None) for label, (ret, n) in sums.items()}


def format_values(hparams: dict) -> str:
    """A member's values, short: ``{"lr": 0.000256123, "gamma": 0.99}`` -> ``"lr=0.000256, gamma=0.99"``."""
    return ", ".join(f"{name}={value:.3g}" for name, value in hparams.items())


def format_best(record: dict, key: str = "episode_return") -> str:
    """A population run's best member in the record by ``key`` and its values now:
    ``"best 2 (lr=0.00256, ent_coef=0.00764): 33.50"``; ``"n/a"`` when no member has the value."""
    scored = [(slot[key], i) for i, slot in enumerate(record["slots"]) if slot.get(key) is not None]
    if not scored:
        return "n/a"
    value, best = max(scored, key=lambda pair: (pair[0], -pair[1]))
    return f"best {best} ({format_values(record['slots'][best].get('hparams', {}))}): {value:.2f}"


def format_return(record: dict, slot_labels: list[str] | None = None) -> str:
    """The record's mean return (``"    23.10"``, ``"      n/a"``), or with ``slot_labels`` and per-slot stats in the
    record, one per label: ``"lr=0.0001: 23.10  lr=0.001: 45.20"``; for a population run (``slot_labels`` is
    ``MEMBERS``) the best member's (``format_best``)."""
    if slot_labels == MEMBERS and record.get("slots"):
        return format_best(record)
    if slot_labels and record.get("slots"):
        per_label = returns_by_label(record["slots"], slot_labels)
        return "  ".join(f"{label}: {ret:.2f}" if ret is not None else f"{label}: n/a"
                         for label, ret in per_label.items())
    ret = record["episode_return"]
    return f"{ret:9.2f}" if ret is not None else "      n/a"


def evals_by_label(slots: list[dict], labels: list[str]) -> dict[str, float]:
    """Mean evaluation return per label over the slots that carry it (each slot ran the same number of episodes),
    labels in order of first appearance; e.g. slots evaluated at 10 and 30 under one label -> 20."""
    groups: dict[str, list[float]] = {}
    for slot, label in zip(slots, labels):
        groups.setdefault(label, []).append(slot[EVAL_RETURN])
    return {label: sum(values) / len(values) for label, values in groups.items()}


def format_eval(record: dict, slot_labels: list[str] | None = None) -> str:
    """``"eval 500.00"`` for a record with an evaluation (one per label with ``slot_labels``:
    ``"eval lr=0.0001: 23.10  lr=0.001: 500.00"``), ``""`` for one without."""
    if EVAL_RETURN not in record:
        return ""
    if slot_labels == MEMBERS and record.get("slots"):
        return "eval " + format_best(record, EVAL_RETURN)
    if slot_labels and record.get("slots"):
        per_label = evals_by_label(record["slots"], slot_labels)
        return "eval " + "  ".join(f"{label}: {ret:.2f}" for label, ret in per_label.items())
    return f"eval {record[EVAL_RETURN]:.2f}"


def final_evaluation(records: list[dict], slot_labels: list[str] | None = None, episodes: int | None = None) -> str:
    """The last evaluation of a run for the ``done:`` line: ``"greedy evaluation at update 976 (64 episodes):
    return 500.00 +- 0.00"`` (one mean per label with ``slot_labels``); ``""`` when the run evaluated nothing."""
    evaluated = [r for r in records if EVAL_RETURN in r]
    if not evaluated:
        return ""
    last = evaluated[-1]
    head = f"greedy evaluation at update {last['update']}" + (f" ({episodes} episodes)" if episodes else "")
    if slot_labels and last.get("slots"):
        return f"{head}: " + format_eval(last, slot_labels).removeprefix("eval ")
    return f"{head}: return {last[EVAL_RETURN]:.2f} +- {last[EVAL_RETURN + '_std']:.2f}"


def format_bytes(n: float) -> str:
    """``n`` bytes for a person: GiB with two decimals from 1 GiB, else MiB (one decimal below 10 MiB)."""
    if n >= 2 ** 30:
        return f"{n / 2 ** 30:.2f} GiB"
    return f"{n / 2 ** 20:.1f} MiB" if n < 10 * 2 ** 20 else f"{n / 2 ** 20:.0f} MiB"


def format_memory(record: dict) -> str:
    """The highest peak device memory in the record (``"peak mem 1.25 GiB"``, ``"peak mem 3.4 MiB"``), or ``""``
    where the backend does not report memory (XLA:CPU)."""
    if not record.get("memory"):
        return ""
    return f"peak mem {format_bytes(max(d['peak_bytes_in_use'] for d in record['memory']))}"


def format_record(record: dict, num_updates: int, slot_labels: list[str] | None = None) -> str:
    """One plain progress line for a log record (``slot_labels``: see ``format_return``)."""
    memory, evaluation = format_memory(record), format_eval(record, slot_labels)
    return (
        f"update {record['update']:>6}/{num_updates}  steps {record['env_steps']:>11,}  "
        f"sps {record['sps']:>10,.0f}  return {format_return(record, slot_labels)}  "
        + (f"{evaluation}  " if evaluation else "")
        + f"loss {record.get('loss/total', float('nan')):8.4f}" + (f"  {memory}" if memory else "")
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


def format_compiling(programs: str, seconds: float) -> str:
    """A long compile's status: ``"compiling the chunk program... 12s"``, and from ``SAFE_S`` on ``"still compiling
    the evaluation program (75s); Ctrl-C stops the run safely"``."""
    if seconds < SAFE_S:
        return f"compiling {programs}... {seconds:.0f}s"
    return f"still compiling {programs} ({seconds:.0f}s); Ctrl-C stops the run safely"


def plain_marks_passed(seconds: float) -> int:
    """How many of the plain display's compile lines are due by ``seconds``: one at each of ``PLAIN_MARKS_S``, then
    one a minute; e.g. 4 s -> 0, 16 s -> 2, 61 s -> 4, 125 s -> 5."""
    return sum(mark <= seconds for mark in PLAIN_MARKS_S) + int(seconds // 60)


def _has_rich() -> bool:
    import importlib.util

    return importlib.util.find_spec("rich") is not None


class ProgressDisplay:
    """Use as ``with ProgressDisplay(num_updates, batch_size) as show: run(..., on_log=show)``.

    Around compilation the runner calls ``show.compiling()``, ``show.still_compiling(programs, seconds)`` while a
    compile lasts, and then ``show.compiled(seconds, cached)``: on a terminal the bar's status reads ``compiling the
    update program...`` (then ``compiling the chunk program... 12s``) and then a line ``compiled in 6.4s`` is
    printed above it; otherwise they are plain lines, the long compile's a few only.

    Args:
      num_updates: updates in the whole run.
      steps_per_update: env steps per update (the batch size), for the step total.
      start_update: updates already done before this process started (a resumed run).
      stream: where to write; ``sys.stdout`` by default.
      live: force the rich bar on (``True``) or off (``False``); by default on when ``stream`` is a terminal.
      slot_labels: for a run of several slots, one label per slot (``slot_labels(meta["slots"])``): the return is
        then shown per label.
    """

    def __init__(self, num_updates: int, steps_per_update: int, *, start_update: int = 0,
                 stream: TextIO | None = None, live: bool | None = None, slot_labels: list[str] | None = None):
        self.num_updates = num_updates
        self.slot_labels = list(slot_labels) if slot_labels else None
        self.steps_per_update = steps_per_update
        self.stream = stream if stream is not None else sys.stdout
        self.live = (self.stream.isatty() and _has_rich()) if live is None else live
        self._seconds = 0.0  # wall time of the chunks seen
        self._updates = 0  # updates in the chunks seen
        self._last_update = start_update
        self._progress = None
        self._task = None
        self._compile_lines = 0  # lines printed about the compile in progress

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
                TextColumn("{task.fields[eval]}"),
                TextColumn("eta {task.fields[eta]}"),
                TextColumn("{task.fields[status]}"),
                console=console,
            )
            self._progress.start()
            self._task = self._progress.add_task(
                "train", total=self.num_updates * self.steps_per_update,
                completed=self._last_update * self.steps_per_update,
                update=self._last_update, updates=self.num_updates, sps="?", ret="n/a", eval="", eta="?", status="",
            )
        return self

    def compiling(self) -> None:
        """Say that the update program is compiling (call before compiling; the first chunk waits for it)."""
        self._compile_lines = 0
        if self._progress is not None:
            self._progress.update(self._task, status=COMPILING)
            self._progress.refresh()  # now: compiling holds the main thread for seconds
        else:
            print(COMPILING, file=self.stream, flush=True)

    def still_compiling(self, programs: str, seconds: float) -> None:
        """Say that ``programs`` (``"the chunk program"``) are compiling, ``seconds`` after the compile began: on a
        terminal the bar's status at every call, and from ``SAFE_S`` on a line above it once a minute (the bar crops
        a long status on a narrow terminal); otherwise a line at ``plain_marks_passed``'s moments only."""
        line = format_compiling(programs, seconds)
        due = int(seconds // SAFE_S) if self._progress is not None else plain_marks_passed(seconds)
        if self._progress is not None:
            self._progress.update(self._task, status=line)
            self._progress.refresh()
            if due > self._compile_lines:
                self._progress.console.print(line, highlight=False)
        elif due > self._compile_lines:
            print(line, file=self.stream, flush=True)
        self._compile_lines = max(self._compile_lines, due)

    def compiled(self, seconds: float, cached: bool | None = None) -> None:
        """Say that compiling took ``seconds``; ``cached=True``: the program came from the compilation cache
        (``None``: unknown, not said)."""
        line = f"compiled in {seconds:.1f}s" + (" (from the compilation cache)" if cached else "")
        if self._progress is not None:
            self._progress.update(self._task, status="")
            self._progress.refresh()
            self._progress.console.print(line, highlight=False)
        else:
            print(line, file=self.stream, flush=True)

    def __call__(self, record: dict) -> None:
        self._updates += record["update"] - self._last_update
        self._last_update = record["update"]
        self._seconds += record.get("time_s", 0.0)
        eta = format_eta(self.eta_s())
        if self._progress is not None:
            evaluation = format_eval(record, self.slot_labels)  # the latest evaluation stays until the next
            self._progress.update(
                self._task, completed=record["env_steps"], update=record["update"], sps=f"{record['sps']:,.0f}",
                ret=format_return(record, self.slot_labels).strip(), eta=eta, status=format_memory(record),
                **({"eval": evaluation} if evaluation else {}),
            )
        else:
            print(f"{format_record(record, self.num_updates, self.slot_labels)}  eta {eta}", file=self.stream,
                  flush=True)

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()


def _recent(stats: list[dict], last: int) -> dict:
    """``{"episode_return", "episodes"}`` over the last ``last`` of ``stats`` that finished an episode."""
    recent = [s for s in stats if s.get("episode_return") is not None][-last:]
    episodes = sum(s["episodes"] for s in recent)
    ret = sum(s["episode_return"] * s["episodes"] for s in recent) / episodes if episodes else None
    return {"episode_return": ret, "episodes": episodes}


def recent_returns(records: list[dict], slot_labels: list[str] | None = None, last: int = 5) -> str:
    """The mean return of the last ``last`` logged chunks' episodes, for the ``done:`` line: one number, or one per
    label (``"lr=0.0001: 23.10  lr=0.001: 45.20"``), never a pool of different hyperparameters."""
    if slot_labels and records and records[-1].get("slots"):
        per_slot = [{**_recent([r["slots"][i] for r in records], last), "hparams": slot.get("hparams", {})}
                    for i, slot in enumerate(records[-1]["slots"])]
        return format_return({"slots": per_slot}, slot_labels)
    ret = _recent(records, last)["episode_return"]
    return f"{ret:.2f}" if ret is not None else "n/a"
