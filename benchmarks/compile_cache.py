"""The README's train command, cold (empty compilation cache) and warm (the cache the cold run filled), alternating.

Each round runs ``python -m rlpar.train ppo --env CartPole-v1 [extra flags]`` in a fresh process twice: first
with a new, empty ``--compile-cache`` directory, then again with the same directory (traced and lowered, then the
compiled programs looked up in JAX's persistent cache). Reported per run: the compile time
and whether the program came from the cache (from the CLI's lines), the start-up time (process start to the first
update, the done line's figure, as ``timing.jsonl``'s ``startup_s``; no ``--run-dir``: the README's command as written) and the whole command's wall time. Medians over rounds, and the ratio warm /
cold of each round. Where rejax is installed (``python benchmarks/peers.py install``), each round also runs rejax's
equivalent whole training script (import, compile, train the same config once) in a fresh process, and the ratio warm
rlpar / rejax of each round is reported.

    python benchmarks/compile_cache.py --rounds 3 --out benchmarks/results/compile_cache.jsonl
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import common


def run_once(cache: Path, extra: list[str]) -> dict:
    """The README's command as it is (no run dir), with ``--compile-cache``; the start-up time from its done line."""
    argv = [sys.executable, "-m", "rlpar.train", "ppo", "--env", "CartPole-v1", "--compile-cache", str(cache), *extra]
    run = common.run_fresh(argv, timeout_s=900)
    compiled = re.search(r"compiled in ([0-9.]+)s( \(from the compilation cache\))?", run.stdout)
    startup = re.search(r"([0-9.]+)s from process start to the first update", run.stdout)
    return {"compile_s": float(compiled.group(1)), "from_cache": bool(compiled.group(2)),
            "startup_s": float(startup.group(1)), "wall_s": run.wall_s}


def run_rejax() -> dict | None:
    """rejax's whole training command on the same config: the CartPole preset's steps (peers.py's other defaults are
    PPOConfig's; rejax's learning rate is constant, as the preset's)."""
    from agents.ppo import PPOConfig

    steps = PPOConfig.for_env("CartPole-v1").total_timesteps
    start = time.perf_counter()
    record = common.peer_row("rejax", ["--repeats", "1", "--total-timesteps", str(steps)])
    wall = time.perf_counter() - start
    return None if record is None else {"compile_s": record["compile_s"], "wall_s": wall}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    common.add_out_argument(parser, "compile_cache")
    parser.add_argument("extra", nargs="*", help="further rlpar.train flags (after --)")
    args = parser.parse_args()
    rows = []
    progress = common.Rows(3 * args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            cache = Path(tmp) / f"cache{r}"
            for kind in ("cold", "warm"):
                progress.start(f"round {r + 1}/{args.rounds}, the README command, {kind}")
                row = common.record("compile_cache", round=r, run=kind, **run_once(cache, args.extra))
                rows.append(row)
                common.emit(row, args.out)
            progress.start(f"round {r + 1}/{args.rounds}, rejax's script")
            peer = run_rejax()
            if peer is not None:
                row = common.record("compile_cache", round=r, run="rejax", **peer)
                rows.append(row)
                common.emit(row, args.out)
    for key in ("compile_s", "startup_s", "wall_s"):
        cold = [row[key] for row in rows if row["run"] == "cold"]
        warm = [row[key] for row in rows if row["run"] == "warm"]
        ratios = [w / c for w, c in zip(warm, cold)]
        print(f"{key}: cold median {statistics.median(cold):.2f}, warm median {statistics.median(warm):.2f}, "
              f"warm/cold median {statistics.median(ratios):.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f})")
    rejax = [row for row in rows if row["run"] == "rejax"]
    if rejax:
        warm = [row["wall_s"] for row in rows if row["run"] == "warm"]
        ratios = [w / p["wall_s"] for w, p in zip(warm, rejax)]
        print(f"rejax whole command: median {statistics.median(p['wall_s'] for p in rejax):.2f}s "
              f"(compile {statistics.median(p['compile_s'] for p in rejax):.2f}s); rlpar warm / rejax median "
              f"{statistics.median(ratios):.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
