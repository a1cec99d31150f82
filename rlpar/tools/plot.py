"""``python -m rlpar.plot RUN_DIR [RUN_DIR ...] [--out FILE]``: learning curves (episode return vs env steps) as a PNG.

Runs whose ``config.json`` differ only in ``seed`` form one group, drawn as the mean over their curves with a band of
one standard deviation either side; other runs get a line (and band) of their own, labelled by the settings that
tell the groups apart. A sweep run (``--sweep lr=...``: ``config.json`` lists its ``"slots"``) gives one line per
swept value, over that value's seeds, labelled ``lr=0.0001``; never one line pooled over the values.

One population run (``--search``, ``--pbt``) is drawn member by member instead: each member's return, and below it
one panel per searched field with each member's value over the run (PBT changes them at its rounds).

Runs that evaluated their greedy policy during training (``--eval-every``: records with ``eval/episode_return``)
add a dashed line per group in the same colour: the evaluation return at the env steps it was measured.

Curves per record: a record's ``episode_return`` may be a number (one curve per run, as written today) or a list of
numbers, one per seed trained side by side in one run; each entry then becomes a curve of its own (``None`` entries,
chunks where that seed finished no episode, are skipped). Curves are compared on the env steps all of them reached,
interpolated linearly onto the union of their logged steps.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np

from rlpar.run import rundir
from rlpar.run.progress import slot_label
from rlpar.tools import cli, errors

Y_FIELD = "episode_return"
EVAL_FIELD = "eval/episode_return"  # mean return of a greedy evaluation, in the records that have one


class Curve(NamedTuple):
    steps: np.ndarray  # [P] env steps of the logged points, ascending
    values: np.ndarray  # [P] mean episode return at those steps


class Band(NamedTuple):
    steps: np.ndarray  # [P]
    mean: np.ndarray  # [P] mean over curves
    std: np.ndarray  # [P] standard deviation over curves (0 for one curve)
    count: int  # curves


def read_records(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / rundir.METRICS
    if not path.is_file():
        raise ValueError(f"{path} is missing: {str(run_dir)!r} is not a run dir with metrics")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _per_seed(record: dict, field: str):
    """A record's per-seed values of ``field``: from its ``slots`` (``--num-seeds``), a list, or a plain number."""
    if "slots" in record:
        return [slot.get(field) for slot in record["slots"]]
    return record.get(field)


def _slot_curves(records: list[dict], field: str) -> list[Curve | None]:
    """One entry per seed (slot) of the records, ``None`` for a seed that never has a value."""
    width = max((len(_per_seed(r, field)) for r in records if isinstance(_per_seed(r, field), list)), default=1)
    curves = []
    for seed in range(width):
        points = []
        for r in records:
            value = _per_seed(r, field)
            value = value[seed] if isinstance(value, list) else value
            if value is not None:
                points.append((r["env_steps"], float(value)))
        curves.append(Curve(*map(np.asarray, zip(*points))) if points else None)
    return curves


def curves_from_records(records: list[dict], field: str = Y_FIELD) -> list[Curve]:
    """One curve per seed in the records: a scalar ``field`` gives one curve, a list (or the per-slot values of a
    ``--num-seeds`` run) gives one per entry."""
    return [c for c in _slot_curves(records, field) if c is not None]


def curves_by_label(records: list[dict], labels: list[str] | None, field: str = Y_FIELD) -> dict[str, list[Curve]]:
    """The records' curves grouped by the label of their slot (``labels[i]`` for slot ``i``, e.g. ``"lr=0.001"``;
    ``None``: one group ``""``). Labels keep the order of the slots; a slot without any value adds no curve."""
    groups: dict[str, list[Curve]] = {}
    for i, curve in enumerate(_slot_curves(records, field)):
        label = labels[i] if labels is not None and i < len(labels) else ""
        entry = groups.setdefault(label, [])
        if curve is not None:
            entry.append(curve)
    return groups


def band(curves: list[Curve]) -> Band:
    """Mean and standard deviation of ``curves`` over the env steps they all reached.

    E.g. curves ``[1, 3]`` and ``[3, 5]`` at steps ``[10, 20]`` -> mean ``[2, 4]``, std ``[1, 1]``.
    """
    if not curves:
        raise ValueError("no curve has an episode return to plot (did any episode finish?)")
    last = min(c.steps[-1] for c in curves)
    first = max(c.steps[0] for c in curves)
    steps = np.unique(np.concatenate([c.steps for c in curves]))
    steps = steps[(steps >= first) & (steps <= last)]
    stacked = np.stack([np.interp(steps, c.steps, c.values) for c in curves])
    return Band(steps, stacked.mean(axis=0), stacked.std(axis=0), len(curves))


def group_runs(run_dirs: list[str]) -> dict[str, list[str]]:
    """Run dirs grouped by their settings other than the seed; keys are labels naming what differs between groups."""
    metas = {d: rundir.read_meta(d) for d in run_dirs}

    def settings(meta: dict) -> dict:
        flat = {"agent": meta["agent"], "env": meta["run"]["env"], "devices": meta["num_devices"]}
        flat.update({k: v for k, v in rundir.config_values(meta["config"]).items() if k != "seed"})
        return flat

    groups: dict[str, list[str]] = {}
    keys = {d: json.dumps(settings(m), sort_keys=True) for d, m in metas.items()}
    for d in run_dirs:
        groups.setdefault(keys[d], []).append(d)
    all_settings = [settings(metas[ds[0]]) for ds in groups.values()]
    differing = [k for k in all_settings[0] if len({json.dumps(s.get(k)) for s in all_settings}) > 1]
    labels = {}
    for ds in groups.values():
        s = settings(metas[ds[0]])
        label = ", ".join(f"{k}={s[k]}" for k in differing) if differing else f"{s['agent']} on {s['env']}"
        labels[label] = ds
    return labels


def join_labels(run_label: str, slot_label: str, runs_differ: bool) -> str:
    """The legend label of a group of curves: the swept value alone (``"lr=0.001"``) unless the runs' own settings
    differ too (``"ent_coef=0.0, lr=0.001"``); a run that sweeps nothing keeps its run label."""
    if not slot_label:
        return run_label
    return f"{run_label}, {slot_label}" if runs_differ else slot_label


def group_curves(run_dirs: list[str], field: str = Y_FIELD) -> dict[str, list[Curve]]:
    """Every curve of ``field`` in ``run_dirs``, grouped into the lines to draw: runs that differ only in the seed
    share a line, and a sweep run adds one line per swept value (its seeds sharing it)."""
    runs = group_runs(run_dirs)
    lines: dict[str, list[Curve]] = {}
    for run_label, dirs in runs.items():
        for d in dirs:
            slots = rundir.read_meta(d).get("slots")
            labels = [slot_label(slot) for slot in slots] if slots else None
            for label, curves in curves_by_label(read_records(d), labels, field).items():
                lines.setdefault(join_labels(run_label, label, len(runs) > 1), []).extend(curves)
    return lines


def figure(run_dirs: list[str]):
    """The learning-curve figure of ``run_dirs`` (a matplotlib ``Figure`` with one ``Axes``): a line per group of
    curves, its mean, and for two or more curves a band of one standard deviation; where the runs evaluated, a
    dashed line of the evaluation returns in the group's colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    bands = {label: band(curves) for label, curves in group_curves(run_dirs).items()}
    evals = {label: band(curves) for label, curves in group_curves(run_dirs, EVAL_FIELD).items() if curves}
    with_band = any(b.count > 1 for b in [*bands.values(), *evals.values()])
    for label, b in bands.items():
        name = f"{label} (mean ± 1 std of {b.count} seeds)" if b.count > 1 else label
        line, = ax.plot(b.steps, b.mean, label=name)
        _draw_band(ax, b, line.get_color())
        if label in evals:
            e = evals[label]
            name = f"{label}, greedy evaluation" + (f" (mean ± 1 std of {e.count} seeds)" if e.count > 1 else "")
            ax.plot(e.steps, e.mean, linestyle="--", marker=".", color=line.get_color(), label=name)
            _draw_band(ax, e, line.get_color())
    ax.set_xlabel("environment steps")
    ax.set_ylabel("mean episode return")
    ax.set_title("learning curves: mean over seeds, band ±1 std" if with_band else "learning curves")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    return fig


def _draw_band(ax, b: Band, color) -> None:
    if b.count > 1:
        ax.fill_between(b.steps, b.mean - b.std, b.mean + b.std, color=color, alpha=0.25, linewidth=0)


def is_population(run_dir: str | Path) -> bool:
    """A run of members (``--search``, with or without ``--pbt``): ``config.json`` names its search."""
    return bool(rundir.read_meta(run_dir).get("run", {}).get("search"))


def population_figure(run_dir: str | Path):
    """A population run's figure: on top each member's training return (and, dashed, its greedy evaluations) against
    env steps; below, one panel per searched field with each member's value over the run (from ``config.json``'s
    start values and each logged chunk's), PBT rounds as dotted vertical lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_records(run_dir)
    start = rundir.read_meta(run_dir)["slots"]
    fields = [k for k in start[0] if k not in ("slot", "seed_index")]
    fig, axes = plt.subplots(1 + len(fields), 1, figsize=(7, 3 + 2 * len(fields)), dpi=120, sharex=True,
                             squeeze=False)
    axes = axes[:, 0]
    per_update = records[0]["env_steps"] / records[0]["update"]
    rounds = [r for record in records for r in record.get("pbt", [])]
    for i in range(len(start)):
        returns = [(r["env_steps"], r["slots"][i].get(Y_FIELD)) for r in records]
        line, = axes[0].plot(*zip(*[(x, y) for x, y in returns if y is not None] or [(np.nan, np.nan)]),
                             label=f"member {i}")
        evals = [(r["env_steps"], r["slots"][i][EVAL_FIELD]) for r in records if EVAL_FIELD in r["slots"][i]]
        if evals:
            axes[0].plot(*zip(*evals), linestyle="--", marker=".", color=line.get_color())
        for ax, name in zip(axes[1:], fields):  # values change only at rounds: the start, each round, the end
            points = [(0, start[i][name])] + [(r["update"] * per_update, r["hparams"][name][i]) for r in rounds]
            points.append((records[-1]["env_steps"], records[-1]["slots"][i].get("hparams", {}).get(name, np.nan)))
            ax.step(*zip(*points), where="post", color=line.get_color())
    for r in rounds:
        for ax in axes:
            ax.axvline(r["update"] * per_update, color="grey", linestyle=":", linewidth=0.8)
    axes[0].set_ylabel("mean episode return")
    axes[0].set_title("members' returns (dashed: greedy evaluation), dotted: PBT rounds", fontsize=10)
    axes[0].legend(loc="best", fontsize=7, ncol=2)
    for ax, name in zip(axes[1:], fields):
        ax.set_ylabel(name)
        if all(s[name] > 0 for s in start):
            ax.set_yscale("log")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("environment steps")
    fig.tight_layout()
    return fig


def plot(run_dirs: list[str], out: str | Path) -> Path:
    """Write the learning-curve PNG for ``run_dirs`` to ``out`` (its folder is created); returns its path. One
    population run gets ``population_figure``: its members' returns and each searched value's schedule."""
    import matplotlib.pyplot as plt

    fig = population_figure(run_dirs[0]) if len(run_dirs) == 1 and is_population(run_dirs[0]) else figure(run_dirs)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        fig.savefig(out)
    finally:
        plt.close(fig)
    return out


def make_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m rlpar.plot``."""
    parser = cli.Parser(prog="python -m rlpar.plot", description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run dirs (seeds of one setting share a band)")
    parser.add_argument("--out", default="", metavar="FILE",
                        help="PNG to write (default: RUN_DIR/learning_curve.png of the first run dir)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    out = args.out or str(Path(args.run_dirs[0]) / "learning_curve.png")
    try:
        path = plot(args.run_dirs, out)
    except ValueError as err:
        return errors.fail(err, 2)
    except OSError as err:  # --out in a folder that cannot be written, ...
        print(f"error: could not write {out}: {err.strerror or err}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
