"""A cold compile through the command line, as a user waits for it, against rejax's on the same config.

Each round runs ``python -m rlpar.train AGENT --env ENV --no-compile-cache --eval-every 0 --total-timesteps N`` in a
fresh process once per code tree (``--code DIR``, repeatable: the repository by default; another checkout, e.g. a ``git
worktree`` of an older commit, is put first on ``PYTHONPATH``), then rejax's lowering and compile of the same config
(``peers.py rejax``, where installed; with ``--case``, one of ``train_vs_peer.py``'s configs, rejax gets that config's
flags, else rejax's PPO defaults, which are PPO's CartPole preset). Reported per run: the CLI's ``compiled in`` figure,
the process's CPU seconds (user + system, all threads) and its wall time; rejax's ``compile_s`` (lowering + XLA) and the
CPU seconds of its compile. Rounds alternate; medians and the median of per-round ratios (each tree / rejax, each tree /
the first) are printed.

    python benchmarks/cli_compile.py --rounds 5 --code . --code ../before -- ppo --env CartPole-v1
    python benchmarks/cli_compile.py --rounds 3 --code . --case ppo-minatar
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

import common
import train_vs_peer


def run_cli(code: Path, argv: list[str], total_timesteps: int) -> dict:
    run = common.run_fresh([sys.executable, "-m", "rlpar.train", *argv, "--no-compile-cache", "--eval-every", "0",
                            "--total-timesteps", str(total_timesteps)], cwd=code,
                           env={"PYTHONPATH": common.pythonpath_first(code), "RLPAR_CACHE_DIR": "off"}, timeout_s=900)
    compiled = re.search(r"compiled in ([0-9.]+)s", run.stdout)
    return {"code": str(code), "commit": _commit(code), "compile_s": float(compiled.group(1)),
            "process_cpu_s": round(run.cpu_s, 3), "wall_s": round(run.wall_s, 3)}


def _commit(code: Path) -> str | None:
    """The tree's commit, ``+`` when it has changes not committed; ``None`` outside git."""
    try:
        head = subprocess.run(["git", "-C", str(code), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(code), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+" if dirty else "")


def run_rejax(flags: list[str], total_timesteps: int) -> dict | None:
    record = common.peer_row("rejax", [*flags, "--repeats", "1", "--total-timesteps", str(total_timesteps)])
    return None if record is None else {"code": "rejax", "compile_s": record["compile_s"],
                                        "compile_cpu_s": record.get("compile_cpu_s")}


def configs(case: str | None, cli: list[str]) -> tuple[list[str], list[str] | None]:
    """``(rlpar's argv, rejax's flags or None)``: a case of ``train_vs_peer.CONFIGS`` (its total steps left out:
    the run is short), else ``cli`` beside rejax's PPO defaults when ``cli`` is PPO's CartPole preset."""
    if case is None:
        return cli, ([] if cli == ["ppo", "--env", "CartPole-v1"] else None)
    if case not in train_vs_peer.CONFIGS:
        raise SystemExit(f"error: --case {case!r}: one of {', '.join(train_vs_peer.CONFIGS)}")
    env, _, flags, rejax = train_vs_peer.CONFIGS[case]
    cut = rejax.index("--total-timesteps") if "--total-timesteps" in rejax else len(rejax)
    return [case.partition("-")[0], "--env", env, *flags], (rejax[:cut] + rejax[cut + 2:]) or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code", action="append", type=Path, help="a checkout of rlpar (default: this repository)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--total-timesteps", type=int, default=10240, help="a short run: the compile is measured")
    common.add_out_argument(parser, "cli_compile")
    parser.add_argument("--no-rejax", action="store_true", help="rlpar's trees only")
    parser.add_argument("--case", help="one of train_vs_peer.py's configs (rlpar's flags and rejax's same config)")
    parser.add_argument("cli", nargs="*", help="after --: the agent and its flags, e.g. ppo --env CartPole-v1")
    args = parser.parse_args(argv)
    if bool(args.case) == bool(args.cli):
        parser.error("give the command line after -- or --case, one of them")
    cli, rejax_flags = configs(args.case, args.cli)
    codes = [c.resolve() for c in (args.code or [common.ROOT])]
    for code in codes:
        if not (code / "rlpar" / "train.py").is_file():
            parser.error(f"--code {code}: not a checkout of rlpar (no rlpar/train.py there)")
    common.say(common.host_line())
    rows: list[list[dict]] = []
    for round_index in range(args.rounds):
        row = [run_cli(code, cli, args.total_timesteps) for code in codes]
        rejax = None if args.no_rejax or rejax_flags is None else run_rejax(rejax_flags, args.total_timesteps)
        row += [rejax] if rejax else []
        for record in row:
            common.emit(common.record("cli_compile", **record, round=round_index, cli=cli), args.out)
        rows.append(row)
    for i, code in enumerate(codes):
        compile_s = [row[i]["compile_s"] for row in rows]
        cpu = [row[i]["process_cpu_s"] for row in rows]
        line = (f"{code}: compiled in {statistics.median(compile_s):.2f} s ({min(compile_s):.2f}-{max(compile_s):.2f}),"
                f" process CPU {statistics.median(cpu):.1f} s")
        per_round = {k: row[i]["compile_s"] for k, row in enumerate(rows)}
        if i:
            first = {k: row[0]["compile_s"] for k, row in enumerate(rows)}
            line += f"; / first {common.ratio_text(common.ratio(per_round, first))}"
        rejax_rounds = {k: row[-1]["compile_s"] for k, row in enumerate(rows) if len(row) > len(codes)}
        if rejax_rounds:
            line += f"; / rejax {common.ratio_text(common.ratio(per_round, rejax_rounds))}"
        common.say(line)
    rejax = [row[-1]["compile_s"] for row in rows if len(row) > len(codes)]
    if rejax:
        common.say(f"rejax: compile {statistics.median(rejax):.2f} s ({min(rejax):.2f}-{max(rejax):.2f}), "
                   f"{len(rejax)} of {len(rows)} rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
