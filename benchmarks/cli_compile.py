"""A cold compile through the command line, as a user waits for it, against rejax's on the same config.

Each round runs ``python -m rlpar.train AGENT --env ENV --no-compile-cache --eval-every 0 --total-timesteps N`` in a
fresh process once per code tree (``--code DIR``, repeatable: the repository by default; another checkout, e.g. a
``git worktree`` of an older commit, is put first on ``PYTHONPATH``), then rejax's lowering and compile of the same
config (``peers.py rejax --algo ...``, where installed). Reported per run: the CLI's ``compiled in`` figure, the
process's CPU seconds (user + system, all threads) and its wall time; rejax's ``compile_s`` (lowering + XLA) and the
CPU seconds of its compile. Rounds alternate; medians and the median of per-round ratios (each tree / rejax, each
tree / the first) are printed.

    python benchmarks/cli_compile.py --rounds 5 --code . --code ../before -- ppo --env CartPole-v1
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import common
import peers

REJAX_ALGOS = {"ppo": "ppo", "pqn": "pqn", "dqn": "dqn", "sac": "sac"}


def run_cli(code: Path, argv: list[str], total_timesteps: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code), "RLPAR_CACHE_DIR": "off"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "rlpar.train", *argv, "--no-compile-cache", "--eval-every", "0",
                           "--total-timesteps", str(total_timesteps)], cwd=code, env=env, capture_output=True,
                          text=True, timeout=900)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    compiled = re.search(r"compiled in ([0-9.]+)s", proc.stdout)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"code": str(code), "compile_s": float(compiled.group(1)), "process_cpu_s": round(cpu, 3),
            "wall_s": round(wall, 3)}


def run_rejax(argv: list[str], total_timesteps: int) -> dict | None:
    agent, env = argv[0], argv[argv.index("--env") + 1] if "--env" in argv else "CartPole-v1"
    if agent not in REJAX_ALGOS or not peers.installed("rejax"):
        return None
    record = peers.run_peer("rejax", ["--algo", REJAX_ALGOS[agent], "--env", env, "--repeats", "1",
                                      "--total-timesteps", str(total_timesteps)])
    return None if record is None else {"code": "rejax", "compile_s": record["compile_s"],
                                        "compile_cpu_s": record.get("compile_cpu_s")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code", action="append", type=Path, help="a checkout of rlpar (default: this repository)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--total-timesteps", type=int, default=10240, help="a short run: the compile is measured")
    parser.add_argument("--out", help="append the records as JSON lines")
    parser.add_argument("--no-rejax", action="store_true", help="rlpar's trees only")
    parser.add_argument("cli", nargs="+", help="after --: the agent and its flags, e.g. ppo --env CartPole-v1")
    args = parser.parse_args(argv)
    codes = [c.resolve() for c in (args.code or [common.ROOT])]
    common.say(common.host_line())
    rows: list[list[dict]] = []
    for round_index in range(args.rounds):
        row = [run_cli(code, args.cli, args.total_timesteps) for code in codes]
        rejax = None if args.no_rejax else run_rejax(args.cli, args.total_timesteps)
        row += [rejax] if rejax else []
        for record in row:
            common.emit({**record, "round": round_index, "cli": args.cli, **common.host_fields()}, args.out)
        rows.append(row)
    for i, code in enumerate(codes):
        compile_s = [row[i]["compile_s"] for row in rows]
        cpu = [row[i]["process_cpu_s"] for row in rows]
        line = f"{code}: compiled in {statistics.median(compile_s):.2f} s ({min(compile_s):.2f}-{max(compile_s):.2f})," \
               f" process CPU {statistics.median(cpu):.1f} s"
        if i:
            ratios = [row[i]["compile_s"] / row[0]["compile_s"] for row in rows]
            line += f"; / first {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
        if len(rows[0]) > len(codes):
            ratios = [row[i]["compile_s"] / row[-1]["compile_s"] for row in rows]
            line += f"; / rejax {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
        common.say(line)
    if len(rows[0]) > len(codes):
        rejax = [row[-1]["compile_s"] for row in rows]
        common.say(f"rejax: compile {statistics.median(rejax):.2f} s ({min(rejax):.2f}-{max(rejax):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
