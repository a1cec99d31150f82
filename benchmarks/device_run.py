"""The run for a machine with an accelerator, in one command: collector sweep, PPO end to end, rejax beside it.

Started by ``benchmarks/device_run.sh``, which installs what the machine lacks first and sets ``REJAX_PYTHON`` /
``REJAX_SITE`` for the peer. Three processes, since a TPU costs 10-15 s to open per process and only one process may
hold it; each part's JSON lines go to a file of its own under ``--out``:

- ``rollout.jsonl``: ``rollout_sps.py`` on CartPole-v1, 2^10 .. 2^17 envs x 128 steps (five sizes), the engine's
  collector and the bare gymnax loop (one process, every size);
- ``ppo_cartpole.jsonl`` and ``ppo_breakout.jsonl``: ``train_sps.py`` (rlpar's PPO, the env's preset) at 1, 4096
  and 65536 envs x 128 steps, all of rlpar's rows in one process (``--then``), then rejax's PPO on the same configs
  (``peers.py``; Breakout-MinAtar's preset, an MLP of 2 x 256, matched field by field as in
  ``train_vs_peer.py``), its rows in one process too. Like for like: rlpar's row for the ratio samples single rows
  as rejax does (``--shuffle-block 1``); where rlpar's own layout differs (blocks of rows on an accelerator, at more
  than one env) it has a row of its own beside it, labelled, never the ratio's side;
- ``accelerator.json``: what the first process saw (JAX's device, its kind, count and memory, the backend every
  later process is then pinned to), libtpu's version or ``nvidia-smi``'s line, where JAX came from, the host CPU;
- ``summary.md``: the accelerator, the tables and every row not measured with its reason, also printed at the end.

Time. A command on the TPU machine it was written for may last 600 s, so the whole command, installs included,
has ``--budget-s`` (570 s) from ``device_run.sh``'s start. Each process gets a share of what is left in proportion to ``EXPECTED_S``;
it starts no row after its share is spent (``--deadline``: the row gets a ``not_measured`` line instead) and is
stopped ``grace_s`` later (the row in flight is lost and named), and never after the budget's end.

``EXPECTED_S`` follows the first run on one TPU v5e chip (2026-12-05, 519 s in all with 49 s of installing): the
collector's rows took about 22 s each (two compiles of 3-10 s, the timing, the state's set-up); rlpar's five PPO rows
took about 90 s (compiles of 9-25 s) and rejax's five about 240 s (compiles of 12-40 s). rlpar now runs each size
twice where its layouts differ (single rows for the ratio, its own layout beside them: four rows more, one of them
too big for a v5e), so the collector measures five sizes (2^10, 2^12, 2^14, 2^16, 2^17) in about 120 s, rlpar
about 150 s and rejax 240 s: with the installs, about 9.3 minutes. Rows cut off are named.

Breakout-MinAtar at 65536 envs is not run where it cannot fit: its observations alone are 65536 x 128 steps x 400
float32, 13.4 GB, and PPO keeps a shuffled copy beside them during the update; a row whose observations exceed half
of the device's memory (15.7 GiB on a v5e; known from the first process's records) is skipped with that reason. On
an accelerator with more memory the row runs.

    bash benchmarks/device_run.sh --out $OUT/device_tpu_v5e
    bash benchmarks/device_run.sh --quick --out /tmp/device_quick      # 2-3 minutes on a 2-core CPU
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
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
from train_vs_peer import CONFIGS as REJAX_CONFIGS
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
    budget_s: float  # the whole command, device_run.sh's installs included
    grace_s: float  # how long past its share a process may finish the row it started


FULL = Budget(
    rollout_envs=[2 ** k for k in (10, 12, 14, 16, 17)], rollout_repeats=3, rollout_min_repeat_s=0.2,
    train={
        "CartPole-v1": [(1, 65_536, 64), (4096, 8_388_608, 4), (65536, 67_108_864, 2)],
        "Breakout-MinAtar": [(1, 32_768, 32), (4096, 4_194_304, 2), (65536, 33_554_432, 1)],
    },
    rejax_repeats=2, budget_s=570, grace_s=90,
)
QUICK = Budget(
    rollout_envs=[16], rollout_repeats=2, rollout_min_repeat_s=0.05,
    train={
        # one env (the one-env path) and several (the vmapped one, and rlpar's own layout beside single rows), each
        # part once: each row compiles for seconds
        "CartPole-v1": [(1, 1024, 4)],
        "Breakout-MinAtar": [(8, 4096, 2)],
    },
    rejax_repeats=1, budget_s=1200, grace_s=400,
)
PART_FILES = {"CartPole-v1": "ppo_cartpole.jsonl", "Breakout-MinAtar": "ppo_breakout.jsonl"}
KIND_LABELS = {"rlpar": "rlpar (single rows)", "rlpar-default": "rlpar (its own layout)"}
NUM_STEPS = 128
# Seconds each process is expected to take on one TPU v5e (from its first run: see above); shares follow them.
EXPECTED_S = {"collector": 120, "rlpar": 150, "rejax": 240}
# float32 numbers in one observation, and the share of the device's memory a row's observations may take.
OBS_FLOATS = {"CartPole-v1": 4, "Breakout-MinAtar": 400}
MEMORY_SHARE = 0.5


class Row(NamedTuple):
    """One measurement: the collector at ``num_envs``, or one program's PPO training at ``num_envs``."""

    kind: str  # "collector", "rlpar" (single rows, as rejax samples), "rlpar-default" (its own layout) or "rejax"
    env: str
    num_envs: int
    argv: list[str]  # the row's flags for its script (empty for the collector: one command measures every size)

    @property
    def key(self) -> tuple[str, str, int]:
        return self.kind, self.env, self.num_envs

    @property
    def label(self) -> str:
        program = "collector" if self.kind == "collector" else f"PPO, {KIND_LABELS.get(self.kind, self.kind)}"
        return f"{program}, {self.env}, {_envs(self.num_envs)}"


def line_kind(line: dict) -> str:
    """The ``Row.kind`` a record or ``not_measured`` line answers."""
    if line.get("benchmark") == "rollout":
        return "collector"
    kind = line.get("program") or line["peer"]  # rejax's lines name their peer
    return "rlpar-default" if kind == "rlpar" and line.get("layout") == "default" else kind


def line_key(line: dict) -> tuple[str, str, int]:
    """The ``Row.key`` a record or ``not_measured`` line answers."""
    return line_kind(line), line["env"], line["num_envs"]


def plan(budget: Budget, parts: set[str], out_dir: Path) -> dict[str, list[Row]]:
    """The rows of each process, in order: ``{"collector": [...], "rlpar": [...], "rejax": [...]}``. rlpar's
    process runs each size with single rows (``--shuffle-block 1``, rejax's sampling: the ratio's side), then, where
    its backend's own layout differs (more than one env), with that layout (``rlpar-default``, a row of its own)."""
    rows: dict[str, list[Row]] = {"collector": [], "rlpar": [], "rejax": []}
    if "rollout" in parts:
        rows["collector"] = [Row("collector", "CartPole-v1", n, []) for n in budget.rollout_envs]
    for env_id, part in (("CartPole-v1", "cartpole"), ("Breakout-MinAtar", "breakout")):
        if part not in parts:
            continue
        for num_envs, total, log_every in budget.train[env_id]:
            # --collector-unroll 0: the backend's collector, whatever the env's preset asks for its own shape (the
            # Breakout-MinAtar accelerator preset takes one step per iteration for its compile time)
            flags = ["--env", env_id, "--devices", "1", "--num-envs", str(num_envs), "--num-steps", str(NUM_STEPS),
                     "--total-timesteps", str(total), "--log-every", str(log_every), "--collector-unroll", "0",
                     "--out", str(out_dir / PART_FILES[env_id])]
            rows["rlpar"].append(Row("rlpar", env_id, num_envs, [*flags, "--shuffle-block", "1"]))
            if num_envs > 1:
                rows["rlpar"].append(Row("rlpar-default", env_id, num_envs, [*flags, "--shuffle-block", "0"]))
            rows["rejax"].append(Row("rejax", env_id, num_envs,
                                     [*rejax_flags(env_id, num_envs, total), "--repeats", str(budget.rejax_repeats)]))
    return rows


def rejax_flags(env_id: str, num_envs: int, total: int) -> list[str]:
    """rejax's flags for rlpar's preset of ``env_id`` at ``num_envs`` (CartPole's preset is peers.py's defaults)."""
    base = REJAX_CONFIGS["ppo-minatar"][3] if env_id == "Breakout-MinAtar" else ["--env", env_id]
    sized = ("--num-envs", "--num-steps", "--total-timesteps")  # set here: drop the flag and its value from base
    kept = [flag for i, flag in enumerate(base) if flag not in sized and (i == 0 or base[i - 1] not in sized)]
    return [*kept, "--num-envs", str(num_envs), "--num-steps", str(NUM_STEPS), "--total-timesteps", str(total)]


def too_big(row: Row, device_memory: int | None) -> str | None:
    """Why ``row`` cannot fit a device of ``device_memory`` bytes (None: it may, or the memory is unknown)."""
    if row.kind == "collector" or not device_memory:
        return None
    obs_bytes = row.num_envs * NUM_STEPS * OBS_FLOATS[row.env] * 4
    if obs_bytes <= MEMORY_SHARE * device_memory:
        return None
    return (f"does not fit: its observations alone ({row.num_envs} envs x {NUM_STEPS} steps x {OBS_FLOATS[row.env]} "
            f"float32) are {obs_bytes / 1e9:.1f} GB, over {MEMORY_SHARE:.0%} of the device's "
            f"{device_memory / 2 ** 30:.1f} GiB (PPO keeps a shuffled copy beside them)")


class Clock:
    """The budget's end, in Unix time (the children's deadlines are Unix times too), and each process's share."""

    def __init__(self, budget: Budget, started: float):
        self.started, self.end, self.grace_s = started, started + budget.budget_s, budget.grace_s

    def left(self) -> float:
        return self.end - time.time()

    def share(self, name: str, remaining: list[str]) -> tuple[float, float]:
        """``(deadline, stop_at)`` for process ``name`` with ``remaining`` (itself included) still to run: no row
        starts after the deadline, the process is stopped at ``stop_at``."""
        now, left = time.time(), max(self.left(), 0.0)
        deadline = now + left * EXPECTED_S[name] / sum(EXPECTED_S[n] for n in remaining)
        return deadline, min(self.end, deadline + self.grace_s)


def reasons(rows: list[Row], lines: list[dict], error: str | None) -> dict[tuple, str]:
    """Why each row of one process has no record: its own ``not_measured`` line, else what stopped the process
    (the row in flight when it was stopped, and those after it)."""
    seen = {line_key(line): line for line in lines if {"env", "num_envs"} <= line.keys()}
    why, stopped = {}, False
    for row in rows:
        line = seen.get(row.key)
        if line is not None:
            if "not_measured" in line:
                why[row.key] = line["not_measured"]
            continue
        if error and error.startswith("timed out"):  # the time guard stopped it: this row was in flight
            why[row.key] = "not started: out of time" if stopped else f"stopped by the time guard ({error})"
            stopped = True
        else:
            why[row.key] = f"no result: the process {error or 'ended without one'} (its messages above)"
    return why


def runnable(rows: list[Row], acc: dict | None) -> tuple[list[Row], list[str]]:
    """The rows of one process that can run, and the others with why not (too big for the device, or rejax's rows
    with rejax not installed)."""
    todo, skipped = [], []
    for row in rows:
        why = too_big(row, acc and acc.get("device_memory_bytes"))
        if why is None and row.kind == "rejax" and not peers.installed("rejax"):
            why = "rejax is not installed (no wheels for it, no index, no benchmarks/.peers/rejax-venv)"
        if why:
            skipped.append(f"{row.label}: {why}")
        else:
            todo.append(row)
    return todo, skipped


def run_part(name: str, todo: list[Row], budget: Budget, out_dir: Path, env: dict, deadline: float,
             stop_at: float) -> tuple[list[dict], str | None]:
    """Run process ``name`` ("collector", "rlpar" or "rejax") on its rows ``todo``; its JSON lines and what went
    wrong (None if nothing)."""
    if name == "collector":  # one command measures every size
        return run_process(
            [sys.executable, str(HERE / "rollout_sps.py"), "--env", "CartPole-v1", "--devices", "1",
             "--num-envs", ",".join(str(r.num_envs) for r in todo), "--num-steps", str(NUM_STEPS),
             "--repeats", str(budget.rollout_repeats), "--min-repeat-s", str(budget.rollout_min_repeat_s),
             "--out", str(out_dir / "rollout.jsonl"), "--deadline", str(deadline)], env, stop_at)
    joined = [arg for n, row in enumerate(todo)
              for arg in [*(["--then"] if n else []), *row.argv, "--deadline", str(deadline)]]
    if name == "rlpar":
        return run_process([sys.executable, str(HERE / "train_sps.py"), *joined], env, stop_at)
    lines, error = peers.run_peer_lines("rejax", joined, timeout_s=max(stop_at - time.time(), 1.0),
                                        platforms=env.get("JAX_PLATFORMS", "cpu"))
    write_rejax_records(lines, out_dir, joined)
    return lines, error


def write_rejax_records(lines: list[dict], out_dir: Path, argv: list[str]) -> None:
    """rejax's records, to its part's file beside rlpar's (stdout keeps the summary)."""
    for line in lines:
        if "not_measured" in line:
            continue
        record = {"benchmark": "train", "program": "rejax", **host_fields(), **line,
                  "command": "python benchmarks/peers.py rejax " + " ".join(argv)}
        with open(out_dir / PART_FILES[line["env"]], "a") as f:
            f.write(json.dumps(record) + "\n")


def run_process(cmd: list[str], env: dict, stop_at: float) -> tuple[list[dict], str | None]:
    """Run ``cmd`` until ``stop_at`` (Unix time); its stdout's JSON lines, those of a stopped run included, and
    what went wrong (None if nothing). Its stderr (progress, errors) passes through."""
    timeout = max(stop_at - time.time(), 1.0)
    try:
        proc = subprocess.run(cmd, cwd=common.ROOT, env=env, stdout=subprocess.PIPE, text=True, timeout=timeout)
        stdout, error = proc.stdout, f"failed (exit {proc.returncode})" if proc.returncode else None
    except subprocess.TimeoutExpired as stopped:
        stdout = stopped.output.decode(errors="replace") if isinstance(stopped.output, bytes) else stopped.output or ""
        error = f"timed out after {timeout:.0f}s"  # as peers.run_peer_lines says it
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")], error


def accelerator(first: dict) -> dict:
    """What the first process saw (its first record's platform fields), with what this process can add without
    opening the device, and the ``JAX_PLATFORMS`` that pins later processes to the backend found."""
    spec = importlib.util.find_spec("jax")
    found = {key: first.get(key) for key in ("jax_version", "backend", "device", "device_kind", "num_devices",
                                             "device_memory_bytes")}
    return {**found, "jax_platforms": jax_platforms(first["backend"]),
            "jax_from": str(Path(spec.origin).parent) if spec else None,
            "libtpu": _version("libtpu"), "nvidia_smi": nvidia_smi(), "python_executable": sys.executable,
            **{key: first.get(key) for key in ("cpu", "host_cpus", "python", "time_utc")}}


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def nvidia_smi() -> str:
    if not shutil.which("nvidia-smi"):
        return ""
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True)
    return smi.stdout.strip()


def probe() -> dict:
    """The platform fields from a child of its own, for when the first process left no record to read them from
    (it failed): the summary still names the accelerator. Costs one more opening of the device."""
    code = ("import json, sys, jax; sys.path.insert(0, %r); import common; "
            "print(json.dumps(common.platform_fields(jax.devices())))" % str(HERE))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"[device_run] JAX does not start:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def jax_platforms(backend: str) -> str:
    """The ``JAX_PLATFORMS`` value that pins every later child to the backend found: the accelerator first, the CPU
    kept beside it for whatever asks for it. ``gpu`` is an alias JAX expands to every GPU plugin, failing on the
    absent ones, so the one present is named."""
    if backend == "cpu":
        return "cpu"
    if backend == "gpu":
        backend = "cuda"  # a ROCm machine names itself "rocm"
    return f"{backend},cpu"


def expected_accelerator() -> str | None:
    """An accelerator this machine has by its software (libtpu installed, ``nvidia-smi`` listing a GPU), or None."""
    if _version("libtpu"):
        return "libtpu is installed"
    if nvidia_smi():
        return "nvidia-smi lists a GPU"
    return None


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


def summary(out_dir: Path, acc: dict, not_run: list[str], times: dict[str, float]) -> str:
    memory = acc.get("device_memory_bytes")
    lines = [f"Accelerator: {acc['device_kind']} ({acc['backend']}; {acc['device']}; {acc['num_devices']} device(s)"
             + (f", {memory / 2 ** 30:.1f} GiB" if memory else "") + ")"
             + (f"; libtpu {acc['libtpu']}" if acc.get("libtpu") else "")
             + (f"; {acc['nvidia_smi']}" if acc.get("nvidia_smi") else "")
             + f"; JAX {acc['jax_version']}. Host CPU {acc['cpu']}, {acc['host_cpus']} cores; python {acc['python']}; "
             f"{acc['time_utc']}. Packages {times['packages']:.0f} s, rows {times['rows']:.0f} s, "
             f"{times['packages'] + times['rows']:.0f} s of the {times['budget']:.0f} s budget.", ""]
    rollout = read_jsonl(out_dir / "rollout.jsonl") if (out_dir / "rollout.jsonl").exists() else []
    if rollout:
        lines += ["| collector, CartPole-v1 x 128 steps | engine SPS | the faster bare gymnax loop's SPS | engine overhead "
                  "| compile s |",
                  "|---|---|---|---|---|"]
        bare = {(r["program"], r["num_envs"]): r for r in rollout if r["program"].startswith("bare")}
        for r in (r for r in rollout if r["program"] == "engine"):
            b, over = bare.get((r.get("best_bare", "bare"), r["num_envs"])), r.get("overhead_vs_bare")
            lines.append(f"| {_envs(r['num_envs'])} | {_k(r['sps_median'])} | {_k(b['sps_median']) if b else 'n/a'} | "
                         f"{'n/a' if over is None else format(100 * over, '+.1f') + '%'} | {r['compile_s']:.1f} |")
        lines.append("")
    for env_id, name in PART_FILES.items():
        records = read_jsonl(out_dir / name) if (out_dir / name).exists() else []
        if not records:
            continue
        lines += [f"| PPO {env_id}, x {NUM_STEPS} steps | env steps | rlpar SPS (single rows) | rejax SPS | "
                  "rlpar / rejax (like for like) | compile s rlpar, rejax | rlpar's own layout SPS (its / rejax) |",
                  "|---|---|---|---|---|---|---|"]
        by = {(line_kind(r), r["num_envs"]): r for r in records}
        for n in sorted({r["num_envs"] for r in records}):
            ours, theirs, own = by.get(("rlpar", n)), by.get(("rejax", n)), by.get(("rlpar-default", n))
            ratio = f"{sps(ours) / sps(theirs):.2f}x" if ours and theirs else "n/a"
            compiles = ", ".join("n/a" if r is None else f"{r['compile_s']:.1f}" for r in (ours, theirs))
            steps = (ours or theirs or own)["env_steps"]
            own_text = "n/a" if own is None else _k(sps(own)) + (f" ({sps(own) / sps(theirs):.2f}x)" if theirs else "")
            lines.append(f"| {_envs(n)} | {_k(steps)} | {_k(sps(ours)) if ours else 'n/a'} | "
                         f"{_k(sps(theirs)) if theirs else 'n/a'} | {ratio} | {compiles} | {own_text} |")
        lines.append("")
    if not_run:
        lines += ["Not measured:", *[f"- {s}" for s in not_run], ""]
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few envs and tiny budgets, to check it on a CPU")
    parser.add_argument("--out", default=None, help="output folder (default: benchmarks/results/<date>/device_run, "
                                                    "or /tmp/device_run_quick with --quick)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help=f"seconds for the whole command from device_run.sh's start, installs included (default "
                             f"{FULL.budget_s:.0f}, --quick {QUICK.budget_s:.0f})")
    parser.add_argument("--parts", default="rollout,cartpole,breakout", help="comma list of parts to run")
    parser.add_argument("--offline", action="store_true", help="(device_run.sh) install nothing from an index")
    parser.add_argument("--allow-cpu", action="store_true",
                        help="run on the CPU although libtpu is installed or nvidia-smi lists a GPU (JAX found none)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    budget = QUICK if args.quick else FULL
    if args.budget_s is not None:
        budget = budget._replace(budget_s=args.budget_s)
    started = float(os.environ.get("DEVICE_RUN_STARTED") or time.time())  # set by device_run.sh before installing
    t0 = time.time()
    clock = Clock(budget, started)
    date = host_fields()["time_utc"][:10]
    out_dir = Path(args.out or ("/tmp/device_run_quick" if args.quick else f"benchmarks/results/{date}/device_run"))
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in ("rollout.jsonl", *PART_FILES.values(), "summary.md", "accelerator.json"):  # a fresh set of files
        (out_dir / name).unlink(missing_ok=True)
    rows = plan(budget, set(args.parts.split(",")), out_dir)
    order = [name for name in rows if rows[name]]

    say(f"host: {common.cpu_description()}, {os.cpu_count()} cores, python {sys.version.split()[0]} ({sys.executable})")
    rejax_where = os.environ.get("REJAX_PYTHON", "") + (f" with PYTHONPATH={os.environ['REJAX_SITE']}"
                                                       if os.environ.get("REJAX_SITE") else "")
    say(f"rejax: {rejax_where or peers.venv_python('rejax')}" if peers.installed("rejax") else "rejax: not installed")
    say(f"{sum(len(r) for r in rows.values())} rows in {len(order)} processes; {clock.left():.0f} s of the "
        f"{budget.budget_s:.0f} s budget left after {t0 - started:.0f} s of installing")

    # The first process runs on JAX's default backend and tells which it is; every later one is pinned to it (a
    # failing plugin then stops a row instead of moving it to the CPU). The compilation cache is off, so that each
    # row's compile_s is a real compile.
    env = {**os.environ, "RLPAR_CACHE_DIR": "off"}
    acc, not_run = None, []
    for i, name in enumerate(order):
        todo, skipped = runnable(rows[name], acc)
        not_run += skipped
        if not todo:
            continue
        deadline, stop_at = clock.share(name, order[i:])
        say(f"{name}: {len(todo)} rows in one process, none started after {deadline - time.time():.0f} s, stopped "
            f"after {stop_at - time.time():.0f} s")
        lines, error = run_part(name, todo, budget, out_dir, env, deadline, stop_at)
        why = reasons(todo, lines, error)
        not_run += [f"{row.label}: {why[row.key]}" for row in todo if row.key in why]
        if acc is None:
            acc = accelerator(next((line for line in lines if "backend" in line), None) or probe())
            env["JAX_PLATFORMS"] = acc["jax_platforms"]
            (out_dir / "accelerator.json").write_text(json.dumps(acc, indent=1) + "\n")
            say(f"accelerator: {acc['device_kind']} ({acc['device']}, {acc['backend']}), JAX {acc['jax_version']} "
                f"from {acc['jax_from']}; later processes pinned to JAX_PLATFORMS={acc['jax_platforms']}")
            expected = expected_accelerator()
            if acc["backend"] == "cpu" and expected and not args.allow_cpu:
                raise SystemExit(f"[device_run] {expected} but JAX runs on the CPU (is its plugin importable by "
                                 f"{sys.executable}?); --allow-cpu runs anyway")
    if acc is None:  # every row was skipped
        acc = accelerator(probe())
    times = {"packages": t0 - started, "rows": time.time() - t0, "budget": budget.budget_s}
    text = summary(out_dir, acc, not_run, times)
    (out_dir / "summary.md").write_text(text)
    print(text, flush=True)
    say(f"wrote {out_dir} in {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
