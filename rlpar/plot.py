"""``python -m rlpar.plot RUN_DIR [RUN_DIR ...] [--out FILE]``: learning curves (episode return vs env steps) as a PNG.

Runs whose ``config.json`` differ only in ``seed`` form one group, drawn as the mean over their curves with a band of
one standard deviation either side; other runs get a line (and band) of their own, labelled by the settings that
tell the groups apart.

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

from rlpar import rundir

Y_FIELD = "episode_return"


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


def curves_from_records(records: list[dict], field: str = Y_FIELD) -> list[Curve]:
    """One curve per seed in the records: a scalar ``field`` gives one curve, a list (or the per-slot values of a
    ``--num-seeds`` run) gives one per entry."""
    width = max((len(_per_seed(r, field)) for r in records if isinstance(_per_seed(r, field), list)), default=1)
    curves = []
    for seed in range(width):
        points = []
        for r in records:
            value = _per_seed(r, field)
            value = value[seed] if isinstance(value, list) else value
            if value is not None:
                points.append((r["env_steps"], float(value)))
        if points:
            steps, values = map(np.asarray, zip(*points))
            curves.append(Curve(steps, values))
    return curves


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
        flat.update({k: v for k, v in meta["config"].items() if k != "seed"})
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


def plot(run_dirs: list[str], out: str | Path) -> Path:
    """Write the learning-curve PNG for ``run_dirs`` to ``out``; returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for label, dirs in group_runs(run_dirs).items():
        curves = [c for d in dirs for c in curves_from_records(read_records(d))]
        b = band(curves)
        line, = ax.plot(b.steps, b.mean, label=f"{label} (n={b.count})")
        if b.count > 1:
            ax.fill_between(b.steps, b.mean - b.std, b.mean + b.std, color=line.get_color(), alpha=0.25, linewidth=0)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("mean episode return")
    ax.set_title("learning curves: mean over seeds, band ±1 std")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlpar.plot", description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run dirs (seeds of one setting share a band)")
    parser.add_argument("--out", default="", metavar="FILE",
                        help="PNG to write (default: RUN_DIR/learning_curve.png of the first run dir)")
    args = parser.parse_args(argv)
    out = args.out or str(Path(args.run_dirs[0]) / "learning_curve.png")
    try:
        path = plot(args.run_dirs, out)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
