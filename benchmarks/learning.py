"""Learning quality against published results: train an agent's presets at the published budgets, then evaluate.

For each env, one ``python -m rlpar.train AGENT --env ENV --total-timesteps BUDGET --num-seeds S`` (the env's preset,
seeds vmapped in one program) runs in a fresh process; then ``rlpar.evaluate`` scores each seed's final policy
greedily over ``--episodes`` episodes. Reported per env: the final greedy return (mean +- std over seeds, and each
seed's), the reference beside it, compile and training seconds, and the time to the reference return including
compilation (the first logged chunk whose return reaches it: the evaluation return where the run logs one, else the
mean return of the training episodes; ``null`` if never).

References (PPO, one seed, final evaluation) are gymnax-blines' (github.com/RobertTLange/gymnax-blines) and
PureJaxRL's (github.com/luchris429/purejaxrl); the gymnax MinAtar settings apply (minimal action set, no sticky
actions, 1000-step episode limit).

    python benchmarks/learning.py --envs CartPole-v1 Acrobot-v1 --seeds 3 --out benchmarks/results/learning.jsonl
    python benchmarks/learning.py --envs Breakout-MinAtar --seeds 1     # 1e7 steps: about half an hour per seed here
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common

# env -> (budget in env steps, reference return, source)
REFERENCES: dict[str, tuple[int, float, str]] = {
    "CartPole-v1": (500_000, 500.0, "PureJaxRL: solved within 5e5 steps"),
    "Acrobot-v1": (500_000, -78.9, "gymnax-blines PPO"),
    "MountainCar-v0": (250_000, -118.3, "gymnax-blines PPO"),
    "Pendulum-v1": (1_000_000, -200.6, "gymnax-blines PPO"),
    "Asterix-MinAtar": (10_000_000, 15.0, "gymnax-blines PPO"),
    "Breakout-MinAtar": (10_000_000, 22.9, "gymnax-blines PPO (checkpoint 28); PureJaxRL about 40"),
    "Freeway-MinAtar": (10_000_000, 58.8, "gymnax-blines PPO"),
    "SpaceInvaders-MinAtar": (10_000_000, 131.6, "gymnax-blines PPO"),
}


def train(agent: str, env: str, budget: int, seeds: int, run_dir: Path, extra: list[str]) -> dict:
    argv = [sys.executable, "-m", "rlpar.train", agent, "--env", env, "--total-timesteps", str(budget),
            "--num-seeds", str(seeds), "--run-dir", str(run_dir), *extra]
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=common.ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{proc.stderr[-3000:]}")
    return {"wall_s": wall, "done_line": next((line for line in proc.stdout.splitlines()[::-1]
                                               if line.startswith("done:")), "")}


def time_to_target(run_dir: Path, target: float, compile_s: float) -> tuple[float | None, int | None]:
    """Seconds (compilation included) and env steps to the first chunk whose return reaches ``target``."""
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    timing = [json.loads(line) for line in (run_dir / "timing.jsonl").read_text().splitlines()]
    elapsed = compile_s
    for record, times in zip(metrics, timing):
        elapsed += times["time_s"]
        value = record.get("eval/episode_return", record.get("episode_return"))
        if value is not None and value >= target:
            return elapsed, record["env_steps"]
    return None, None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="ppo")
    parser.add_argument("--envs", nargs="+", default=["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1"],
                        choices=sorted(REFERENCES))
    parser.add_argument("--seeds", type=int, default=3, help="seeds per env, vmapped in one run")
    parser.add_argument("--episodes", type=int, default=20, help="greedy evaluation episodes per seed")
    parser.add_argument("--budget-scale", type=float, default=1.0, help="fraction of the published budget to run")
    parser.add_argument("--out", default=None, help="append JSON lines here")
    parser.add_argument("--keep", default=None, help="keep each run directory as KEEP/ENV (default: a temporary one)")
    parser.add_argument("extra", nargs="*", help="further rlpar.train flags (after --)")
    args = parser.parse_args()

    from rlpar import evaluate

    for env in args.envs:
        budget, reference, source = REFERENCES[env]
        budget = int(budget * args.budget_scale)
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = Path(args.keep).resolve() / env if args.keep else Path(tmp) / "run"
            trained = train(args.agent, env, budget, args.seeds, run_dir, args.extra)
            timing = [json.loads(line) for line in (run_dir / "timing.jsonl").read_text().splitlines()]
            compiled = re.search(r"\+ ([0-9.]+)s compile", trained["done_line"])
            compile_s = float(compiled.group(1)) if compiled else float("nan")
            returns = [float(evaluate.evaluate(run_dir, episodes=args.episodes, slot=s).returns.mean())
                       for s in range(args.seeds)]
            target_s, target_steps = time_to_target(run_dir, reference, compile_s)
        row = {"benchmark": "learning", "agent": args.agent, "env": env, "budget": budget, "seeds": args.seeds,
               "episodes": args.episodes, "greedy_return_mean": statistics.mean(returns),
               "greedy_return_std": statistics.pstdev(returns), "greedy_returns": returns, "reference": reference,
               "reference_source": source, "train_s": sum(t["time_s"] for t in timing), "compile_s": compile_s,
               "wall_s": trained["wall_s"], "time_to_reference_s": target_s, "steps_to_reference": target_steps,
               "extra": args.extra, **common.host_fields(), "command": common.command_line()}
        common.emit(row, args.out)
        print(f"{env}: greedy {row['greedy_return_mean']:.1f} +- {row['greedy_return_std']:.1f} over {args.seeds} "
              f"seeds at {budget:,} steps (reference {reference} {source}); train {row['train_s']:.0f}s + compile "
              f"{compile_s:.0f}s; to reference: {'never' if target_s is None else f'{target_s:.0f}s'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
