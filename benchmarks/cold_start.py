"""How long a user waits: ``python -m rlpar.train ...`` from process start to exit, cold (no compile cache) and warm
(the cache a first run filled), with when each of the CLI's lines arrived.

Each round runs, per code tree (``--code DIR``, repeatable; the repository by default), the command line after ``--``
in a fresh process twice: ``cold`` with ``--no-compile-cache``, then ``warm`` with ``--compile-cache DIR`` on a cache
that an untimed run of the same command filled first (the cache is the tree's own, made empty at the start).
Reported per run: the process's wall time from its start to its exit, and the arrival of its lines (the header, once
the devices are open; ``compiled in``; the first progress line; ``done:``), the CLI's own figures (compile seconds,
seconds from process start to the first update, training seconds), and what is left after ``done:`` (saving, the
runtime's shutdown). A probe process first times ``import jax``, opening the backend, the other imports of a run, a
first small computation and JAX's own clean-up at exit, alone. With ``--run-dir-root DIR``, each run writes its run
dir under DIR (``--evaluate N`` then scores its policy greedily on N episodes with ``python -m rlpar.evaluate``,
outside the timing). ``--variant "NAME=VALUE ..."`` (repeatable) adds a set of environment variables to compare
against the environment as it is (e.g. a runtime's settings): the probe and every run are repeated with each, and
each row names its variant (``""``: none), its run dirs end in ``-v1``, ``-v2``, ... in the order given. A run
that fails is recorded as ``not_measured`` with its last line of errors, and the others go on (exit status 1).

    python benchmarks/cold_start.py --rounds 1 -- ppo --env Breakout-MinAtar --eval-every 0
    python benchmarks/cold_start.py --no-warm --variant "TPU_SKIP_MDS_QUERY=1" -- ppo --env Breakout-MinAtar
    python benchmarks/cold_start.py --rounds 1 --seeds 0,1,2 --run-dir-root runs --evaluate 64 \\
        -- ppo --env Breakout-MinAtar --eval-every 0
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common
from common import emit, record

PROBE = """
import json, time
t0 = time.perf_counter()
import jax
t1 = time.perf_counter()
devices = jax.devices()
t2 = time.perf_counter()
import flax, optax, gymnax, agents.ppo, envs
t3 = time.perf_counter()
jax.numpy.ones(3).sum().block_until_ready()
t4 = time.perf_counter()
from jax._src import api
api.clean_up()
t5 = time.perf_counter()
print(json.dumps({"import_jax_s": t1 - t0, "open_backend_s": t2 - t1, "other_imports_s": t3 - t2,
                  "first_op_s": t4 - t3, "jax_clean_up_s": t5 - t4, "backend": devices[0].platform,
                  "device_kind": devices[0].device_kind}), flush=True)
"""

PATTERNS = {  # a line of the CLI's output -> the moment it marks
    "header_s": re.compile(r"^rlpar: "),
    "compiled_line_s": re.compile(r"^compiled in "),
    "first_progress_s": re.compile(r"^update\s+\d+/"),
    "done_line_s": re.compile(r"^done: "),
}


def run_timed(argv: list[str], cwd: Path, env: dict, timeout_s: float) -> dict:
    """Run ``argv``; the wall time to exit and when each line of ``PATTERNS`` first arrived (seconds from the spawn)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    marks: dict = {}
    lines = []
    for line in proc.stdout:
        now = time.perf_counter() - start
        lines.append(line)
        for name, pattern in PATTERNS.items():
            if name not in marks and pattern.search(line):
                marks[name] = round(now, 3)
        if now > timeout_s:
            proc.kill()
            break
    stderr = proc.stderr.read()
    code = proc.wait()
    wall = time.perf_counter() - start
    text = "".join(lines)
    if code != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {code}:\n{stderr[-3000:]}")
    figures = {"wall_s": round(wall, 3), **marks}
    compiled = re.search(r"compiled in ([0-9.]+)s", text)
    done = re.search(r"done: ([0-9,]+) env steps in ([0-9.]+)s \(([0-9,]+) sps\)", text)
    startup = re.search(r"([0-9.]+)s from process start to the first update", text)
    figures["compile_s"] = float(compiled.group(1)) if compiled else None
    figures["train_s"] = float(done.group(2)) if done else None
    figures["sps"] = int(done.group(3).replace(",", "")) if done else None
    figures["to_first_update_s"] = float(startup.group(1)) if startup else None
    figures["after_done_s"] = round(wall - marks["done_line_s"], 3) if "done_line_s" in marks else None
    return figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", action="append", type=Path, help="a checkout of rlpar (default: this repository)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--seeds", default="0", help="comma list: one cold and one warm run per seed and round")
    parser.add_argument("--no-warm", action="store_true", help="cold runs only")
    parser.add_argument("--run-dir-root", type=Path, help="write each run's run dir under this folder")
    parser.add_argument("--evaluate", type=int, default=0, metavar="N",
                        help="with --run-dir-root: score each run's policy on N greedy episodes (not timed)")
    parser.add_argument("--no-probe", action="store_true", help="skip the probe process")
    parser.add_argument("--variant", action="append", default=[], metavar='"NAME=VALUE ..."',
                        help="environment variables to compare against none (repeatable: one variant each)")
    parser.add_argument("--timeout-s", type=float, default=600)
    parser.add_argument("cli", nargs="*", help="after --: the agent and its flags, e.g. ppo --env CartPole-v1")
    common.add_out_argument(parser, "cold_start")
    args = parser.parse_args(argv)
    if not args.cli:
        parser.exit(2, "error: give the command line after --, e.g. -- ppo --env CartPole-v1\n")
    try:
        seeds = [int(seed) for seed in args.seeds.split(",")]
    except ValueError:
        parser.exit(2, f"error: --seeds {args.seeds!r}: expected a comma list of integers, e.g. 0,1,2\n")
    if args.evaluate and args.run_dir_root is None:
        parser.exit(2, "error: --evaluate needs --run-dir-root (the runs must save a policy to score)\n")
    try:
        variants = {"": {}, **{text.strip(): parse_variant(text) for text in args.variant}}
        if len(variants) != 1 + len(args.variant):
            raise ValueError("--variant: the same variant given twice")
    except ValueError as err:
        parser.exit(2, f"error: {err}\n")
    codes = [code.resolve() for code in (args.code or [common.ROOT])]

    for name, settings in variants.items() if not args.no_probe else ():
        start = time.perf_counter()
        probe = subprocess.run([sys.executable, "-c", PROBE], cwd=codes[0], capture_output=True, text=True,
                               env={**os.environ, **settings, "PYTHONPATH": common.pythonpath_first(codes[0])})
        wall = time.perf_counter() - start
        if probe.returncode == 0:
            figures = json.loads(probe.stdout.strip().splitlines()[-1])
            emit(record("cold_start_probe", variant=name, **figures, process_wall_s=round(wall, 3)), args.out)
        else:
            common.say(f"the probe{f' ({name})' if name else ''} failed (not recorded): {probe.stderr.strip()[-300:]}")
    caches = {(code, name): Path(tempfile.mkdtemp(prefix="rlpar-cache-")) for code in codes for name in variants}
    modes = ["cold"] if args.no_warm else ["cold", "warm"]
    failed = 0
    try:
        for round_index in range(args.rounds):
            for code in codes:
                for index, (name, settings) in enumerate(variants.items()):
                    tag = f"-v{index}" if index else ""  # run dirs: variant i's (0: none)
                    for seed in seeds:
                        for mode in modes:
                            try:
                                row = run_once(args, code, name, settings, seed, mode, caches[code, name],
                                               round_index, tag)
                            except RuntimeError as err:  # a variant may break the run: say so, go on
                                failed += 1
                                row = {"round": round_index, "code": str(code), "variant": name, "mode": mode,
                                       "seed": seed, "not_measured": str(err).strip().splitlines()[-1][-300:]}
                                label = f"{mode} run, seed {seed}" + (f", {name}" if name else "")
                                common.say(f"{label}: {row['not_measured']}")
                            emit(record("cold_start", **row, cli=" ".join(args.cli)), args.out)
    finally:
        for cache in caches.values():
            shutil.rmtree(cache, ignore_errors=True)
    return 1 if failed else 0


RESERVED = ("PYTHONPATH", "PYTHONUNBUFFERED")  # set by this script for every run


def parse_variant(text: str) -> dict:
    """``'A=1 B="x y"'`` -> ``{"A": "1", "B": "x y"}`` (shell quoting); ``ValueError`` (one line) for anything else:
    an item that is not NAME=VALUE, a name given twice, or one this script sets itself (``RESERVED``)."""
    try:
        items = shlex.split(text)
    except ValueError as err:
        raise ValueError(f"--variant {text!r}: {err}") from None
    settings = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"--variant {text!r}: expected NAME=VALUE items separated by spaces, e.g. "
                             f"'TPU_SKIP_MDS_QUERY=1 XLA_FLAGS=\"--flag_a=1 --flag_b=2\"'")
        if name in settings or name in RESERVED:
            why = "given twice" if name in settings else "set by cold_start.py itself"
            raise ValueError(f"--variant {text!r}: {name} is {why}")
        settings[name] = value
    if not settings:
        raise ValueError(f"--variant {text!r}: expected at least one NAME=VALUE")
    return settings


def run_once(args, code: Path, variant: str, settings: dict, seed: int, mode: str, cache: Path,
             round_index: int, tag: str = "") -> dict:
    """One timed run of the command line (``mode`` cold or warm, a warm one on ``cache``, filled first if empty);
    its run dir (with ``--run-dir-root``) ends in ``tag``. ``RuntimeError`` if the run fails."""
    cmd = [sys.executable, "-m", "rlpar.train", *args.cli, "--seed", str(seed)]
    env = {**settings, "PYTHONPATH": common.pythonpath_first(code)}
    if mode == "cold":
        cmd.append("--no-compile-cache")
    else:
        cmd += ["--compile-cache", str(cache)]
        if not any(cache.iterdir()):  # fill the cache first, untimed
            run_timed(cmd, code, env, args.timeout_s)
    run_dir = None
    if args.run_dir_root is not None:
        run_dir = (args.run_dir_root / f"r{round_index}-{mode}-seed{seed}-{code.name}{tag}").resolve()
        shutil.rmtree(run_dir, ignore_errors=True)
        cmd += ["--run-dir", str(run_dir)]
    figures = run_timed(cmd, code, env, args.timeout_s)
    row = {"round": round_index, "code": str(code), "variant": variant, "mode": mode, "seed": seed, **figures}
    if args.evaluate and run_dir is not None:
        row.update(evaluate(run_dir, args.evaluate, code, settings))
    return row


def evaluate(run_dir: Path, episodes: int, code: Path, settings: dict | None = None) -> dict:
    """The greedy return of ``run_dir``'s policy on ``episodes`` episodes (``python -m rlpar.evaluate``)."""
    proc = subprocess.run([sys.executable, "-m", "rlpar.evaluate", str(run_dir), "--episodes", str(episodes)],
                          cwd=code, env={**os.environ, **(settings or {}), "PYTHONPATH": common.pythonpath_first(code)},
                          capture_output=True, text=True)
    found = re.search(r"return\s+(-?[0-9.]+)", proc.stdout)
    return {"greedy_return": float(found.group(1)) if found else None, "evaluate_output": proc.stdout.strip()[-200:]}


if __name__ == "__main__":
    raise SystemExit(main())
