"""The run for a machine with an accelerator, in one command: collector sweep, PPO end to end, rejax beside it.

Started by ``benchmarks/device_run.sh``, which installs the packages first (from wheels, for a machine with no
network) and sets ``REJAX_PYTHON`` / ``REJAX_SITE`` for the peer. Three parts, each row in a fresh process, each
part's JSON lines in a file of its own under ``--out``:

- ``rollout.jsonl``: ``rollout_sps.py`` on CartPole-v1, 2^10 .. 2^17 envs x 128 steps, the engine's collector and
  the bare gymnax loop;
- ``ppo_cartpole.jsonl``: ``train_sps.py`` (rlpar's PPO, the env's preset) at 1, 4096 and 65536 envs x 128 steps,
  each followed by rejax's PPO on the same config (``peers.py``);
- ``ppo_breakout.jsonl``: the same on Breakout-MinAtar with its preset (MLP of 2 x 256; rejax matched field by field
  as in ``agents_vs_rejax.py``).

``summary.md`` gets the host and the tables that are printed at the end.

Budgets (``FULL``), for one H200 and under 8 minutes in all, were sized from what costs time there rather than from
a measurement (none exists yet): each of the 13 processes pays JAX's start-up and the accelerator's initialisation
(about 5 s) and one compile (XLA:GPU, 5-30 s for PPO's program); training itself is kept to a few seconds per row:
at 1 env a GPU steps no faster than its kernel launches allow (a few ms per update of 128 steps: 512 updates of
CartPole, 256 of Breakout), while at 4096 and 65536 envs an update holds 0.5M and 8.4M env steps, so 16 and 8
updates (CartPole) or 8 and 4 (Breakout: its 2 x 256 MLP over 400 inputs costs about 7 MFLOP of learning per env
step by ``profile_update.py``'s cost analysis, 60 TFLOP per update at 65536 envs, a second or so on an H200) are
enough to time several chunks. The collector's 16 programs take a second or two each to compile and 1-2 s to time.
Summed: about 15 s of installing, a minute or so for the collector, 12 training rows of 15-35 s: 5 to 8 minutes.
``--budget-s`` (default 420 s) keeps the pessimistic end inside 8: a row gets at most what is left (and never over
150 s), and rows that no longer fit are skipped and named in the summary.

    bash benchmarks/device_run.sh --out benchmarks/results/2026-12-04/device_h200
    bash benchmarks/device_run.sh --quick --out /tmp/device_quick      # about 1.5 minutes on a 2-core CPU
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import common
import peers
from agents_vs_rejax import CONFIGS as REJAX_CONFIGS
from common import host_fields, read_jsonl, say

HERE = Path(__file__).resolve().parent


class Budget(NamedTuple):
    """One mode's sizes: the collector's env counts and repeats, and per training env id the rows
    ``(num_envs, total_timesteps, log_every)``; every row is 128 steps per env per update."""

    rollout_envs: list[int]
    rollout_repeats: int
    rollout_min_repeat_s: float
    train: dict[str, list[tuple[int, int, int]]]
    rejax_repeats: int
    budget_s: float
    row_cap_s: float  # no single row runs longer than this


FULL = Budget(
    rollout_envs=[2 ** k for k in range(10, 18)], rollout_repeats=3, rollout_min_repeat_s=0.2,
    train={
        "CartPole-v1": [(1, 65_536, 64), (4096, 8_388_608, 4), (65536, 67_108_864, 2)],
        "Breakout-MinAtar": [(1, 32_768, 32), (4096, 4_194_304, 2), (65536, 33_554_432, 1)],
    },
    rejax_repeats=2, budget_s=420, row_cap_s=150,
)
QUICK = Budget(
    rollout_envs=[16, 64], rollout_repeats=2, rollout_min_repeat_s=0.05,
    train={
        # one env and several (the one-env path and the vmapped one), Breakout once: each row compiles for seconds
        "CartPole-v1": [(1, 1024, 4), (64, 16_384, 1)],
        "Breakout-MinAtar": [(8, 4096, 2)],
    },
    rejax_repeats=1, budget_s=1200, row_cap_s=400,
)
PART_FILES = {"CartPole-v1": "ppo_cartpole.jsonl", "Breakout-MinAtar": "ppo_breakout.jsonl"}
NUM_STEPS = 128


def probe() -> dict:
    """The accelerator as JAX and ``nvidia-smi`` see it, from a child process (so this one never holds the device:
    JAX takes most of a GPU's memory when it starts)."""
    code = ("import json, jax; d = jax.devices(); print(json.dumps({'jax_version': jax.__version__, "
            "'backend': d[0].platform, 'device_kind': d[0].device_kind, 'num_devices': len(d), "
            "'platform_version': getattr(d[0].client, 'platform_version', '')}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"[device_run] JAX does not start:\n{proc.stderr[-2000:]}")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    found["nvidia_smi"] = ""
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True)
        found["nvidia_smi"] = smi.stdout.strip()
    return found


def jax_platforms(found: dict) -> str:
    """The ``JAX_PLATFORMS`` value that pins every child to the backend found: the accelerator first (the default),
    the CPU kept beside it for whatever asks for it. ``gpu`` is an alias JAX expands to every GPU plugin, failing on
    the absent ones, so the one present is named."""
    if found["backend"] != "gpu":
        return found["backend"]
    return ("rocm" if "rocm" in found["platform_version"].lower() else "cuda") + ",cpu"


class Runner:
    """Runs rows in fresh processes within the budget; remembers what it skipped and why."""

    def __init__(self, budget: Budget, total_rows: int, env: dict):
        self.budget, self.env, self.t0 = budget, env, time.perf_counter()
        self.rows = common.Rows(total_rows)
        self.skipped: list[str] = []

    def left(self) -> float:
        return self.budget.budget_s - (time.perf_counter() - self.t0)

    def start(self, what: str) -> float | None:
        """The seconds this row may take, or None (row skipped) if the budget is spent."""
        self.rows.start(what)
        timeout = min(self.budget.row_cap_s, self.left())
        if timeout < 10:
            say(f"skipped: {max(self.left(), 0):.0f} s of the {self.budget.budget_s:.0f} s budget left")
            self.skipped.append(f"{what}: out of time")
            return None
        return timeout

    def run(self, what: str, cmd: list[str]) -> bool:
        timeout = self.start(what)
        if timeout is None:
            return False
        try:
            proc = subprocess.run(cmd, cwd=common.ROOT, env=self.env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            say(f"stopped after {timeout:.0f} s: {what}")
            self.skipped.append(f"{what}: stopped after {timeout:.0f} s")
            return False
        if proc.returncode:
            say(f"failed (exit {proc.returncode}): {what}\n{proc.stderr[-3000:]}")
            self.skipped.append(f"{what}: failed (exit {proc.returncode})")
            return False
        return True


def rejax_flags(env_id: str, num_envs: int, total: int) -> list[str]:
    """rejax's flags for rlpar's preset of ``env_id`` at ``num_envs`` (CartPole's preset is peers.py's defaults)."""
    base = REJAX_CONFIGS["ppo-minatar"][3] if env_id == "Breakout-MinAtar" else ["--env", env_id]
    sized = ("--num-envs", "--num-steps", "--total-timesteps")  # set here: drop the flag and its value from base
    kept = [flag for i, flag in enumerate(base) if flag not in sized and (i == 0 or base[i - 1] not in sized)]
    return [*kept, "--num-envs", str(num_envs), "--num-steps", str(NUM_STEPS), "--total-timesteps", str(total)]


def run_rejax(runner: Runner, what: str, argv: list[str], out: Path, platforms: str) -> None:
    timeout = runner.start(what)
    if timeout is None:
        return
    if not peers.installed("rejax"):
        say("skipped: rejax is not installed (no wheels for it in .whl/, no benchmarks/.peers/rejax-venv)")
        runner.skipped.append(f"{what}: rejax not installed")
        return
    record = peers.run_peer("rejax", argv, timeout_s=timeout, platforms=platforms)
    if record is None:
        runner.skipped.append(f"{what}: failed or stopped (its message above)")
        return
    record = {"benchmark": "train", "program": "rejax", **host_fields(), **record,
              "command": "python benchmarks/peers.py rejax " + " ".join(argv)}
    with open(out, "a") as f:  # to the part's file only, as train_sps.py's records (stdout keeps the summary)
        f.write(json.dumps(record) + "\n")


def sps(record: dict) -> float:
    """End-to-end training SPS (rlpar: all steps / all chunk seconds; rejax: steps / the compiled run's seconds),
    or the collector's median."""
    return record.get("sps_end_to_end") or record["sps_median"]


def _k(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x / 1e9:.2f}G" if x >= 1e9 else f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.1f}k"


def _envs(n: int) -> str:
    return f"{n} env{'s' if n > 1 else ''}"


def summary(out_dir: Path, found: dict, host: dict, skipped: list[str], wall_s: float) -> str:
    lines = [f"Host: {found['nvidia_smi'] or found['device_kind']}; JAX {found['jax_version']} on {found['backend']} "
             f"({found['num_devices']} device(s), {found['device_kind']}); CPU {host['cpu']}, {host['host_cpus']} "
             f"cores; python {host['python']}; {host['time_utc']}; {wall_s:.0f} s in all.", ""]
    rollout = read_jsonl(out_dir / "rollout.jsonl") if (out_dir / "rollout.jsonl").exists() else []
    if rollout:
        lines += ["| collector, CartPole-v1 x 128 steps | engine SPS | bare gymnax SPS | engine overhead | compile s |",
                  "|---|---|---|---|---|"]
        bare = {r["num_envs"]: r for r in rollout if r["program"] == "bare"}
        for r in (r for r in rollout if r["program"] == "engine"):
            b, over = bare.get(r["num_envs"]), r.get("overhead_vs_bare")
            lines.append(f"| {_envs(r['num_envs'])} | {_k(r['sps_median'])} | {_k(b['sps_median']) if b else 'n/a'} | "
                         f"{'n/a' if over is None else format(100 * over, '+.1f') + '%'} | {r['compile_s']:.1f} |")
        lines.append("")
    for env_id, name in PART_FILES.items():
        records = read_jsonl(out_dir / name) if (out_dir / name).exists() else []
        if not records:
            continue
        lines += [f"| PPO {env_id}, x {NUM_STEPS} steps | env steps | rlpar SPS | rejax SPS | rlpar / rejax | "
                  "compile s rlpar, rejax |", "|---|---|---|---|---|---|"]
        by = {(r["program"], r["num_envs"]): r for r in records}
        for n in dict.fromkeys(r["num_envs"] for r in records):
            ours, theirs = by.get(("rlpar", n)), by.get(("rejax", n))
            ratio = f"{sps(ours) / sps(theirs):.2f}x" if ours and theirs else "n/a"
            compiles = ", ".join("n/a" if r is None else f"{r['compile_s']:.1f}" for r in (ours, theirs))
            steps = (ours or theirs)["env_steps"]
            lines.append(f"| {_envs(n)} | {_k(steps)} | {_k(sps(ours)) if ours else 'n/a'} | "
                         f"{_k(sps(theirs)) if theirs else 'n/a'} | {ratio} | {compiles} |")
        lines.append("")
    if skipped:
        lines += ["Not measured:", *[f"- {s}" for s in skipped], ""]
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few envs and tiny budgets, to check it on a CPU")
    parser.add_argument("--out", default=None, help="output folder (default: benchmarks/results/<date>/device_run, "
                                                    "or /tmp/device_run_quick with --quick)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help=f"seconds for all rows (default {FULL.budget_s:.0f}, --quick {QUICK.budget_s:.0f})")
    parser.add_argument("--parts", default="rollout,cartpole,breakout", help="comma list of parts to run")
    parser.add_argument("--offline", action="store_true", help="(device_run.sh) install nothing from the index")
    parser.add_argument("--allow-cpu", action="store_true",
                        help="run on the CPU although nvidia-smi lists a GPU (JAX found none)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    budget = QUICK if args.quick else FULL
    if args.budget_s is not None:
        budget = budget._replace(budget_s=args.budget_s)
    date = host_fields()["time_utc"][:10]
    out_dir = Path(args.out or ("/tmp/device_run_quick" if args.quick else f"benchmarks/results/{date}/device_run"))
    out_dir.mkdir(parents=True, exist_ok=True)
    parts = set(args.parts.split(","))
    t0 = time.perf_counter()

    found, host = probe(), host_fields()
    say(f"accelerator: {found['nvidia_smi'] or 'nvidia-smi: none'}; JAX {found['jax_version']} sees "
        f"{found['num_devices']} x {found['device_kind']} ({found['backend']})")
    say(f"host: {host['cpu']}, {host['host_cpus']} cores, python {host['python']} ({sys.executable})")
    rejax_where = os.environ.get("REJAX_PYTHON", "") + (f" with {os.environ['REJAX_SITE']}"
                                                       if os.environ.get("REJAX_SITE") else "")
    say(f"rejax: {rejax_where or peers.venv_python('rejax')}" if peers.installed("rejax") else "rejax: not installed")
    if found["nvidia_smi"] and found["backend"] == "cpu" and not args.allow_cpu:
        raise SystemExit("[device_run] nvidia-smi lists a GPU but JAX runs on the CPU (is the CUDA plugin "
                         "installed for this python?); --allow-cpu runs anyway")
    platforms = jax_platforms(found)
    # Every child on the backend found (a failing plugin then stops a row instead of moving it to the CPU); rlpar's
    # program cache off, so that each row's compile_s is a real compile.
    env = {**os.environ, "JAX_PLATFORMS": platforms, "RLPAR_CACHE_DIR": "off"}
    for name in ("rollout.jsonl", *PART_FILES.values(), "summary.md"):  # a fresh set of files
        (out_dir / name).unlink(missing_ok=True)

    train_envs = [e for e, part in (("CartPole-v1", "cartpole"), ("Breakout-MinAtar", "breakout")) if part in parts]
    total = ("rollout" in parts) + 2 * sum(len(budget.train[e]) for e in train_envs)
    runner = Runner(budget, total, env)
    python = sys.executable
    if "rollout" in parts:
        sizes = ",".join(str(n) for n in budget.rollout_envs)
        runner.run(f"collector, CartPole-v1 at {sizes} envs",
                   [python, str(HERE / "rollout_sps.py"), "--env", "CartPole-v1", "--devices", "1", "--num-envs", sizes,
                    "--num-steps", str(NUM_STEPS), "--repeats", str(budget.rollout_repeats),
                    "--min-repeat-s", str(budget.rollout_min_repeat_s), "--out", str(out_dir / "rollout.jsonl")])
    for env_id in train_envs:
        out = out_dir / PART_FILES[env_id]
        for num_envs, total_steps, log_every in budget.train[env_id]:
            what = f"PPO {env_id}, {_envs(num_envs)}, {total_steps:,} steps"
            runner.run(f"{what}, rlpar",
                       [python, str(HERE / "train_sps.py"), "--env", env_id, "--devices", "1", "--num-envs",
                        str(num_envs), "--num-steps", str(NUM_STEPS), "--total-timesteps", str(total_steps),
                        "--log-every", str(log_every), "--out", str(out)])
            run_rejax(runner, f"{what}, rejax",
                      [*rejax_flags(env_id, num_envs, total_steps), "--repeats", str(budget.rejax_repeats)], out,
                      platforms)
    text = summary(out_dir, found, host, runner.skipped, time.perf_counter() - t0)
    (out_dir / "summary.md").write_text(text)
    print(text, flush=True)
    say(f"wrote {out_dir} in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
