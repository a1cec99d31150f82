"""Where a traced program's time went on an accelerator, per update: each loop's time and the kernels by how often
they ran. Reads a ``jax.profiler`` trace (``python -m rlpar.train ... --profile DIR`` writes one of a warm chunk).

A TPU's trace lists every op it ran on the ``XLA Ops`` line of its ``/device:`` plane, a loop (``while``) as an op
spanning its body's kernels. Per update (``--updates``: the updates the traced call ran):

- ``loops``: each ``while`` op's time and how often it ran (the collect's loop: 1 per update, 128 iterations inside);
- ``classes``: the kernels grouped by how many times each ran per update (128: once per step of a 128-step collect or
  of GAE's scan), with their count and summed time. A loop's time less the time of the kernels that ran inside it is
  the loop's own cost between kernels.

    python benchmarks/trace_ops.py prof --updates 20 --out ops.json

``--out``: every op by name with its microseconds and count per update (JSON), to compare two programs' ops.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json

import thunks  # benchmarks/ is the script's folder, first on sys.path


def ops_per_update(path: str, updates: float) -> dict[str, tuple[float, float]]:
    """``{op name: (microseconds, count)}`` per update, over the ``/device:`` planes' ``XLA Ops`` lines of the
    ``.xplane.pb`` under ``path`` (the newest); loops included, names cut to the instruction's (``fusion.12``)."""
    from jax.profiler import ProfileData

    files = sorted(glob.glob(f"{path}/**/*.xplane.pb", recursive=True))
    if not files:
        raise SystemExit(f"error: no .xplane.pb under {path!r}: give the folder --profile wrote")
    time_ns, count = collections.Counter(), collections.Counter()
    for name, duration_ns in thunks.kernel_events(ProfileData.from_file(files[-1]), loops=True, devices_only=True):
        time_ns[name] += duration_ns
        count[name] += 1
    return {name: (time_ns[name] / 1e3 / updates, count[name] / updates) for name in time_ns}


def summary(ops: dict[str, tuple[float, float]]) -> dict:
    """The loops by time, and the other kernels grouped by runs per update."""
    loops = sorted(((us, n, name) for name, (us, n) in ops.items() if name.startswith("while")), reverse=True)
    classes = collections.defaultdict(lambda: [0, 0.0])
    for name, (us, n) in ops.items():
        if not name.startswith(("while", "conditional")):
            classes[round(n, 2)][0] += 1
            classes[round(n, 2)][1] += us
    return {"loops": [{"op": name, "us": round(us, 1), "per_update": round(n, 2)} for us, n, name in loops],
            "classes": [{"runs_per_update": k, "kernels": v[0], "us": round(v[1], 1)}
                        for k, v in sorted(classes.items())]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", help="the folder a --profile run wrote")
    parser.add_argument("--updates", type=float, required=True, help="updates the traced call ran")
    parser.add_argument("--out", default="", help="every op per update as JSON")
    args = parser.parse_args(argv)
    ops = ops_per_update(args.trace, args.updates)
    if not ops:
        raise SystemExit(f"error: {args.trace!r} holds no accelerator ops (a CPU's trace has none): trace on a TPU")
    found = summary(ops)
    for loop in found["loops"]:
        print(f"loop {loop['op']:16s} {loop['us']:10.1f} us, {loop['per_update']:g} per update")
    for group in found["classes"]:
        print(f"kernels run {group['runs_per_update']:g} times per update: {group['kernels']} of them, "
              f"{group['us']:.1f} us")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"updates": args.updates, "ops": ops, **found}, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
