"""Training speed of rlpar's PQN, DQN and SAC against rejax's same algorithm on the same config, in the same run.

Each round runs, in fresh processes and one after another, for every agent: ``python -m rlpar.train AGENT`` on 1
device, then on 2 devices (``--devices 2``: fake CPU devices on a CPU-only host), then rejax's algorithm
(``benchmarks/peers.py rejax --algo AGENT``, in its own venv). Train SPS excludes compilation on both sides (rlpar:
the chunks' ``time_s`` in ``timing.jsonl``; rejax: the compiled program's run). Reported per agent: the median over
rounds of each side's SPS and of the per-round ratios (rlpar 1 device / rejax, 2 devices / 1 device), plus compile
seconds (rlpar with ``--no-compile-cache``: a real compile every time).

The configs are rlpar's defaults for the agent's env, with rejax's settings matched field by field (``CONFIGS``);
where rejax fixes something rlpar lets vary (PQN's and DQN's 64x64 network), rlpar is run with rejax's value. Budgets
are shortened for DQN and SAC: rejax's DQN and SAC run one env step per iteration, and at rlpar's full budgets one
rejax run takes minutes here.

    python benchmarks/peers.py install --peers rejax      # once
    python benchmarks/agents_vs_rejax.py --rounds 3 --out benchmarks/results/agents.jsonl
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import common
import peers

# case -> (env, total steps, rlpar flags on top of the agent's defaults, rejax flags giving the same config); the case's
# name up to a "-" is the agent.
CONFIGS: dict[str, tuple[str, int, list[str], list[str]]] = {
    # rlpar PQN defaults: 32 envs x 32 steps, 4 epochs x 4 minibatches, lr 1e-3, Q(0.9), epsilon 1 -> 0.05 over the
    # first 20% of training, LayerNorm MLP (rejax: 64x64 fixed).
    "pqn": ("CartPole-v1", 655_360, ["--hidden-sizes", "64,64"],
            ["--num-envs", "32", "--num-steps", "32", "--update-epochs", "4", "--num-minibatches", "4", "--lr", "1e-3",
             "--max-grad-norm", "10", "--td-lambda", "0.9", "--eps-start", "1", "--eps-end", "0.05",
             "--exploration-fraction", "0.2"]),
    # rlpar DQN defaults: 8 envs, 128 gradient steps of 64 transitions per 8 x 32 env steps (0.5 per env step; rejax:
    # 4 per step of the 8 envs), hard target update every 128 gradient steps (= 256 env steps), double DQN, relu.
    "dqn": ("CartPole-v1", 20_480, ["--hidden-sizes", "64,64"],
            ["--algo", "dqn", "--num-envs", "8", "--update-epochs", "4", "--batch-size", "64", "--buffer-size",
             "100000", "--fill-buffer", "1000", "--lr", "2.3e-3", "--max-grad-norm", "10", "--eps-start", "1",
             "--eps-end", "0.04", "--exploration-fraction", "0.1", "--target-update-freq", "256", "--polyak", "0",
             "--activation", "relu"]),
    # rlpar SAC defaults: 8 envs, 64 gradient steps of 128 transitions per 8 x 8 env steps (1 per env step; rejax:
    # 8 per step of the 8 envs), Polyak 0.005, 64x64 relu, 1024 uniform steps first.
    "sac": ("Pendulum-v1", 20_480, [],
            ["--algo", "sac", "--num-envs", "8", "--update-epochs", "8", "--batch-size", "128", "--buffer-size",
             "100000", "--fill-buffer", "1024", "--lr", "1e-3", "--polyak", "0.995", "--target-update-freq", "1",
             "--activation", "relu", "--hidden-sizes", "64,64"]),
    # PPO with rlpar's Breakout-MinAtar preset (64 envs x 128 steps, 4 epochs x 8 minibatches, lr 5e-4 constant,
    # gamma 0.999, relu MLP of 2 x 256 on the flattened image: gymnax-blines' settings) against rejax's PPO, whose
    # network is that MLP too; the convolution torso (3x3x16, then 128 units) is timed beside it on rlpar alone.
    "ppo-minatar": ("Breakout-MinAtar", 491_520, [],
                    ["--algo", "ppo", "--num-envs", "64", "--num-steps", "128", "--update-epochs", "4",
                     "--num-minibatches", "8", "--lr", "5e-4", "--gamma", "0.999", "--activation", "relu",
                     "--hidden-sizes", "256,256"]),
    "ppo-minatar-cnn": ("Breakout-MinAtar", 491_520, ["--torso", "auto", "--hidden-sizes", "128"], []),
}
for _case, (_env, _steps, _, _rejax) in CONFIGS.items():  # the shared fields once
    if _rejax:
        _rejax[:0] = ["--algo", _case] if "--algo" not in _rejax else []
        _rejax += ["--env", _env, "--total-timesteps", str(_steps)]


def run_rlpar(case: str, devices: int) -> dict:
    """One ``python -m rlpar.train`` run in a fresh process; its train SPS and compile seconds."""
    env, steps, flags, _ = CONFIGS[case]
    agent = case.partition("-")[0]
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "rlpar.train", agent, "--env", env, "--total-timesteps", str(steps), *flags,
                "--devices", str(devices), "--eval-every", "0", "--no-compile-cache", "--run-dir", f"{tmp}/run"]
        proc = subprocess.run(argv, cwd=common.ROOT, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"{' '.join(argv)} failed:\n{proc.stderr[-3000:]}")
        timing = common.read_jsonl(Path(tmp) / "run" / "timing.jsonl")
        metrics = common.read_jsonl(Path(tmp) / "run" / "metrics.jsonl")
    done = next(line for line in proc.stdout.splitlines()[::-1] if line.startswith("done:"))
    compiled = re.search(r"\+ ([0-9.]+)s compile", done)
    train_s = sum(t["time_s"] for t in timing)
    return {"program": "rlpar", "num_devices": devices, "env_steps": metrics[-1]["env_steps"], "train_s": train_s,
            "sps": metrics[-1]["env_steps"] / train_s, "compile_s": float(compiled.group(1)) if compiled else None,
            "command": " ".join(["python", *argv[1:-2]])}


def run_rejax(case: str) -> dict | None:
    if not CONFIGS[case][3]:
        return None
    argv = CONFIGS[case][3] + ["--repeats", "1"]
    record = peers.run_peer("rejax", argv, timeout_s=1800)
    if record is None:
        return None
    return {"program": "rejax", "num_devices": 1, "env_steps": record["env_steps"], "train_s": record["train_s_median"],
            "sps": record["sps_median"], "compile_s": record["compile_s"], "final_return": record["final_return"],
            "command": "python benchmarks/peers.py rejax " + " ".join(argv)}


def summary(rows: list[dict]) -> list[str]:
    """Per agent: median SPS of each side and the median (range) of the per-round ratios."""
    lines = []
    for agent in dict.fromkeys(r["agent"] for r in rows):
        by = {(r["program"], r["num_devices"], r["round"]): r for r in rows if r["agent"] == agent}
        rounds = sorted({k[2] for k in by})

        def ratio(a, b):
            values = [by[a + (k,)]["sps"] / by[b + (k,)]["sps"] for k in rounds if a + (k,) in by and b + (k,) in by]
            if not values:
                return "n/a"
            return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f}, {len(values)} rounds)"

        def med(side, field="sps"):
            values = [r[field] for k, r in by.items() if k[:2] == side and r.get(field) is not None]
            return statistics.median(values) if values else float("nan")

        lines.append(f"{agent} on {CONFIGS[agent][0]}: train SPS rlpar 1 dev {med(('rlpar', 1)):,.0f}, 2 dev "
                     f"{med(('rlpar', 2)):,.0f}, rejax {med(('rejax', 1)):,.0f}; rlpar/rejax "
                     f"{ratio(('rlpar', 1), ('rejax', 1))}; 2 dev/1 dev {ratio(('rlpar', 2), ('rlpar', 1))}; "
                     f"compile s rlpar {med(('rlpar', 1), 'compile_s'):.1f}, rejax {med(('rejax', 1), 'compile_s'):.1f}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="pqn,dqn,sac", help="comma list of cases: " + ", ".join(CONFIGS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--devices", default="1,2", help="rlpar device counts per round")
    parser.add_argument("--out", default=None, help="append JSON lines here")
    args = parser.parse_args()
    agents = args.agents.split(",")
    unknown = [a for a in agents if a not in CONFIGS]
    if unknown:
        parser.error(f"--agents: unknown {', '.join(unknown)}; known: {', '.join(CONFIGS)}")
    rows = []
    devices = [int(d) for d in args.devices.split(",")]
    progress = common.Rows(args.rounds * len(agents) * (len(devices) + 1))

    def started(what, fn, *fn_args):
        progress.start(what)
        return fn(*fn_args)

    for round_ in range(args.rounds):
        for agent in agents:
            where = f"round {round_ + 1}/{args.rounds}, {agent}"
            runs = [started(f"{where}, rlpar on {d} device(s)", run_rlpar, agent, d) for d in devices]
            runs.append(started(f"{where}, rejax", run_rejax, agent))
            for run in filter(None, runs):
                row = {"benchmark": "agents_vs_rejax", "agent": agent, "env": CONFIGS[agent][0], "round": round_,
                       **run, **common.host_fields()}
                rows.append(row)
                common.emit(row, args.out)
    print("\n".join(summary(rows)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
