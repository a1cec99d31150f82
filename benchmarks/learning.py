"""Learning quality against published results: train an agent's presets at the published budgets, then evaluate.

For each env, one ``python -m rlpar.train AGENT --env ENV --total-timesteps BUDGET --num-seeds S`` (the env's preset,
seeds vmapped in one program) runs in a fresh process; then ``rlpar.evaluate`` scores each seed's final policy
greedily over ``--episodes`` episodes. Reported per env: the final greedy return (mean +- std over seeds, and each
seed's), the reference beside it, compile and training seconds, and the time to the reference return including
compilation, per seed (the first logged chunk whose return reaches it: the greedy evaluation's where the run
evaluates, else the mean return of the training episodes; ``null`` if never).

``--peer rejax`` compares on the same preset, seeds and budget in the same run: rlpar as preset, rlpar with
``--no-anneal-lr`` (rejax keeps the learning rate constant), then rejax's PPO (``benchmarks/peers.py``) with a greedy
64-episode evaluation ten times per run, as rlpar's default; both sides' final in-training evaluation is reported
(``final_eval_returns``) and the time to the solved threshold (CartPole-v1 475, Acrobot-v1 -100). rejax clips
gradients element-wise where rlpar clips their global norm, and has no value clipping: kept as they are.

References (PPO, one seed, final evaluation) are gymnax-blines' (github.com/RobertTLange/gymnax-blines) and
PureJaxRL's (github.com/luchris429/purejaxrl); the gymnax MinAtar settings apply (minimal action set, no sticky
actions, 1000-step episode limit).

    python benchmarks/learning.py --envs CartPole-v1 Acrobot-v1 --seeds 3
    python benchmarks/learning.py --envs CartPole-v1 Acrobot-v1 --seeds 3 --peer rejax
    python benchmarks/learning.py --envs Breakout-MinAtar --seeds 1     # 1e7 steps: about half an hour per seed here
    python benchmarks/learning.py --agent ippo --envs marl-MPE_simple_spread_v3 --seeds 3 --budget-scale 0.1
    python benchmarks/learning.py --agent ippo --envs marl-overcooked --seeds 3 --budget-scale 0.6   # 3e6 steps
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
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
    # Team envs (the marl extra; --agent ippo or mappo): no published return is adopted as the reference, the
    # random team's return is measured beside each row (random_team_return) instead.
    "marl-MPE_simple_spread_v3": (10_000_000, float("nan"), "JaxMARL ippo_ff_mpe's budget and settings (the preset)"),
    "marl-MPE_simple_reference_v3": (10_000_000, float("nan"), "JaxMARL ippo_ff_mpe's budget and settings"),
    "marl-HeuristicEnemySMAX@3m": (2_000_000, float("nan"), "the SMAX preset's CPU budget (JaxMARL's mappo: 1e7)"),
    "marl-overcooked": (5_000_000, float("nan"), "JaxMARL ippo_ff_overcooked's budget and settings, its reward shaping included (the preset)"),
}

# Returns that count as solved (Gym's thresholds), timed by --peer comparisons instead of the reference.
SOLVED = {"CartPole-v1": 475.0, "Acrobot-v1": -100.0}


def train(agent: str, env: str, budget: int | None, seeds: int, run_dir: Path, extra: list[str]) -> dict:
    """``python -m rlpar.train`` in a fresh process; ``budget`` None: the preset's own ``total_timesteps``."""
    steps = [] if budget is None else ["--total-timesteps", str(budget)]
    argv = [sys.executable, "-m", "rlpar.train", agent, "--env", env, *steps,
            "--num-seeds", str(seeds), "--run-dir", str(run_dir), *extra]
    run = common.run_fresh(argv)
    return {"wall_s": run.wall_s, "done_line": next((line for line in run.stdout.splitlines()[::-1]
                                                     if line.startswith("done:")), "")}


def _slot_values(record: dict, key: str, seeds: int) -> list:
    """``key`` of each seed's slot in a metrics record (the record itself when there is one seed)."""
    slots = record.get("slots") or [record] * seeds
    return [slot.get(key) for slot in slots[:seeds]]


def time_to_target(run_dir: Path, target: float, compile_s: float, seeds: int) -> tuple[list, list]:
    """Per seed: seconds (compilation included) and env steps to the end of the first chunk whose return reaches
    ``target``: the greedy evaluation's where the run evaluates, else the training episodes' mean; None if never."""
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    timing = [json.loads(line) for line in (run_dir / "timing.jsonl").read_text().splitlines()]
    key = "eval/episode_return" if any("eval/episode_return" in r for r in metrics) else "episode_return"
    seconds, steps = [None] * seeds, [None] * seeds
    elapsed = compile_s
    for record, times in zip(metrics, timing):
        elapsed += times["time_s"]
        for i, value in enumerate(_slot_values(record, key, seeds)):
            if seconds[i] is None and value is not None and value >= target:
                seconds[i], steps[i] = elapsed, record["env_steps"]
    return seconds, steps


def final_eval(run_dir: Path, seeds: int) -> list:
    """Per seed, the return of the run's last greedy evaluation during training (``--eval-episodes`` episodes)."""
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = next((r for r in reversed(metrics) if "eval/episode_return" in r), None)
    return _slot_values(last, "eval/episode_return", seeds) if last else [None] * seeds


def random_team_return(env_id: str, episodes: int, seed: int = 0) -> float:
    """Mean return (the team's summed reward) of a team acting uniformly at random among its available actions."""
    import jax
    import jax.numpy as jnp

    import envs
    from rlpar.core import episodes as engine_episodes

    env, env_params = envs.make(env_id)

    def uniform(carry, obs, key):
        return jax.random.categorical(key, jnp.where(obs.action_mask > 0, 0.0, -1e9)), carry

    run = engine_episodes.make_episodes(env, env_params, lambda n: (), episodes,
                                        env.max_steps_in_episode or engine_episodes.STEP_CAP)
    return float(jnp.mean(jax.jit(lambda k: run(uniform, k).returns)(jax.random.PRNGKey(seed))))


def rlpar_row(args, env: str, budget: int, target: float, extra: list[str]) -> dict:
    from rlpar.tools import evaluate

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(args.keep).resolve() / env if args.keep else Path(tmp) / "run"
        trained = train(args.agent, env, budget, args.seeds, run_dir, extra)
        timing = [json.loads(line) for line in (run_dir / "timing.jsonl").read_text().splitlines()]
        compiled = re.search(r"\+ ([0-9.]+)s compile", trained["done_line"])
        compile_s = float(compiled.group(1)) if compiled else float("nan")
        returns = [float(evaluate.evaluate(run_dir, episodes=args.episodes, slot=s).returns.mean())
                   for s in range(args.seeds)]
        target_s, target_steps = time_to_target(run_dir, target, compile_s, args.seeds)
        in_training = final_eval(run_dir, args.seeds)
        last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
        steps_run = last["env_steps"]
        # a team env's own episode metrics (SMAX: episode/won), per seed, over the last logged chunk's episodes
        env_metrics = {key: _slot_values(last, key, args.seeds) for key in ("episode/won",)
                       if key in (last.get("slots") or [last])[0]}
    return {"program": "rlpar", "budget": steps_run, "agent": args.agent, "greedy_return_mean": statistics.mean(returns),
            "greedy_return_std": statistics.pstdev(returns), "greedy_returns": returns,
            "final_eval_returns": in_training, "train_s": sum(t["time_s"] for t in timing), "compile_s": compile_s,
            "wall_s": trained["wall_s"], "time_to_target_s": target_s, "steps_to_target": target_steps,
            "extra": extra, **({"last_chunk": env_metrics} if env_metrics else {})}


def rejax_row(args, env: str, budget: int, target: float) -> dict | None:
    """rejax's PPO on the env's rlpar preset (rejax keeps the learning rate constant and clips gradients
    element-wise; rlpar's preset flags that have no rejax equivalent are reported, not matched)."""
    import dataclasses

    from agents.ppo import PPOConfig

    c = PPOConfig.for_env(env)
    batch = c.num_envs * c.num_steps
    evals = max(1, min(10, budget // batch))
    argv = ["--algo", "ppo", "--env", env, "--total-timesteps", str(budget), "--num-envs", str(c.num_envs),
            "--num-steps", str(c.num_steps), "--update-epochs", str(c.update_epochs), "--num-minibatches",
            str(c.num_minibatches), "--lr", str(c.lr), "--gamma", str(c.gamma), "--gae-lambda", str(c.gae_lambda),
            "--clip-eps", str(c.clip_eps), "--ent-coef", str(c.ent_coef), "--vf-coef", str(c.vf_coef),
            "--max-grad-norm", str(c.max_grad_norm), "--activation", c.activation,
            "--hidden-sizes", ",".join(map(str, c.hidden_sizes)), "--seeds", str(args.seeds),
            "--eval-freq", str(-(-budget // batch // evals) * batch), "--eval-episodes", "64", "--target", str(target)]
    start = time.perf_counter()
    record = common.peer_row("rejax", argv, timeout_s=3600)
    if record is None:
        return None
    differs = {k: v for k, v in dataclasses.asdict(c).items() if k in ("anneal_lr", "clip_value", "normalize_obs")}
    returns = record["final_greedy_returns"]
    return {"program": "rejax", "agent": "ppo", "greedy_return_mean": statistics.mean(returns),
            "greedy_return_std": statistics.pstdev(returns), "greedy_returns": returns,
            "final_eval_returns": returns, "train_s": record["train_s"], "compile_s": record["compile_s"],
            "wall_s": time.perf_counter() - start, "time_to_target_s": record["time_to_target_s"],
            "rlpar_preset_fields_not_matched": differs, "peer_version": record["peer_version"],
            "peer_command": record["command"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="ppo")
    parser.add_argument("--envs", nargs="+", default=["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1"],
                        choices=sorted(REFERENCES))  # PPO's references; other agents are compared with them too
    parser.add_argument("--seeds", type=int, default=3, help="seeds per env, vmapped in one run")
    parser.add_argument("--episodes", type=int, default=20, help="greedy evaluation episodes per seed")
    parser.add_argument("--budget-scale", type=float, default=1.0, help="fraction of the published budget to run")
    parser.add_argument("--preset-budget", action="store_true",
                        help="train for the agent's preset budget (its total_timesteps) instead of the published one")
    common.add_out_argument(parser, "learning")
    parser.add_argument("--keep", default=None, help="keep each run directory as KEEP/ENV (default: a temporary one)")
    parser.add_argument("--peer", choices=["rejax"], default=None,
                        help="also train rejax's PPO on the same preset and seeds, and rlpar with --no-anneal-lr "
                             "(rejax's learning rate is constant), one after another in this run")
    parser.add_argument("--target", type=float, default=None,
                        help="return whose first reach is timed (default: the env's solved threshold, else the "
                             "reference)")
    parser.add_argument("extra", nargs="*", help="further rlpar.train flags (after --)")
    args = parser.parse_args()

    progress = common.Rows(len(args.envs) * (1 + (args.peer is not None and "--no-anneal-lr" not in args.extra)
                                              + (args.peer == "rejax")))
    for env in args.envs:
        budget, reference, source = REFERENCES[env]
        budget = None if args.preset_budget else int(budget * args.budget_scale)
        target = args.target if args.target is not None else SOLVED.get(env, reference)
        variants = [args.extra]
        if args.peer and "--no-anneal-lr" not in args.extra:
            variants.append([*args.extra, "--no-anneal-lr"])
        rows = []
        for extra in variants:
            progress.start(f"{env}, rlpar {args.agent} {' '.join(extra)}, {args.seeds} seed(s)".replace("  ", " "))
            rows.append(rlpar_row(args, env, budget, target, extra))
        if args.peer == "rejax":
            progress.start(f"{env}, rejax, {args.seeds} seed(s)")
            rows.append(rejax_row(args, env, budget, target))
        for row in filter(None, rows):
            row = common.record("learning", **{"env": env, "budget": budget, "seeds": args.seeds,
                                               "episodes": args.episodes, "reference": reference,
                                               "reference_source": source, "target": target, **row})
            if env.startswith("marl-"):
                row["random_team_return"] = random_team_return(env, 256)
            common.emit(row, args.out)
            hit = [t for t in row["time_to_target_s"] if t is not None]
            print(f"{env} {row['program']} {' '.join(row.get('extra', []))}: greedy {row['greedy_return_mean']:.1f} "
                  f"+- {row['greedy_return_std']:.1f} over {args.seeds} seeds at {row['budget']:,} steps (reference "
                  f"{reference}, {source}); train {row['train_s']:.0f}s + compile {row['compile_s']:.0f}s; to "
                  f"{target}: {len(hit)}/{args.seeds} seeds, median "
                  f"{'n/a' if not hit else f'{statistics.median(hit):.0f}s'}"
                  + (f"; random team {row['random_team_return']:.1f}" if "random_team_return" in row else ""),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
