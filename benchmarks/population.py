"""PBT against a random search and against the preset, PPO, at the same environment steps per member.

For each env and seed, three runs of the env's PPO preset (``agents.ppo.train``), each ``--budget`` env steps per
member, evaluated greedily once, after the last update (``--eval-episodes`` episodes per member):

- ``preset``: the preset's own values, one member;
- ``search``: ``--population`` members drawn from ``--search`` (seeded by the run's seed), trained side by side;
- ``pbt``: the same members with ``--pbt`` at its defaults (about ten rounds, quantile 0.25, resample 0.25, fitness:
  training return).

Reported per run: the final greedy return of its best member (``rlpar.core.population.best_member``: for PBT the fittest
at the last round, chosen before the final evaluation; for the search the member with the best final evaluation,
chosen on the number it reports, which favours the search), the median and maximum over members, compile and
training seconds. The last line gives the median over seeds of each arm.

    python benchmarks/population.py --envs Acrobot-v1 --seeds 3 --budget 100000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import common  # also puts the repository root on sys.path

SEARCH = "lr=log:1e-4..1e-2 ent_coef=0..0.05 gae_lambda=0.8..1"


def run_arm(arm: str, env: str, seed: int, args) -> dict:
    import agents
    from rlpar.core import population

    config = agents.PPOConfig.for_env(env).replace(seed=seed, total_timesteps=args.budget)
    options = dict(eval_every=config.num_updates, eval_episodes=args.eval_episodes, log_every=args.log_every)
    if arm != "preset":
        options.update(search=args.search, population=args.population, pbt=arm == "pbt")
    start = time.perf_counter()
    result = agents.ppo.train(config, env, **options)
    wall = time.perf_counter() - start
    last = result.metrics[-1]
    members = [s["eval/episode_return"] for s in last["slots"]] if "slots" in last else [last["eval/episode_return"]]
    best = population.best_member(result.metrics) if "slots" in last else 0
    return common.record(
        "population", env=env, arm=arm, seed=seed, budget_per_member=args.budget, members=len(members),
        best_member=best, best_eval_return=members[best], median_eval_return=statistics.median(members),
        max_eval_return=max(members), best_values=last["slots"][best].get("hparams") if "slots" in last else None,
        compile_s=round(result.compile_s, 1), train_s=round(wall - result.compile_s, 1),
        eval_episodes=args.eval_episodes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["Acrobot-v1"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budget", type=int, default=100_000, help="env steps per member")
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--search", default=SEARCH)
    parser.add_argument("--eval-episodes", type=int, default=64)
    parser.add_argument("--log-every", type=int, default=10)
    common.add_out_argument(parser, "population")
    args = parser.parse_args(argv)
    for env in args.envs:
        rows = [run_arm(arm, env, seed, args) for seed in range(args.seeds) for arm in ("preset", "search", "pbt")]
        for row in rows:
            common.emit(row, args.out)
        summary = {arm: statistics.median(r["best_eval_return"] for r in rows if r["arm"] == arm)
                   for arm in ("preset", "search", "pbt")}
        common.emit({"benchmark": "population", "env": env, "summary": "median over seeds of the best member's final "
                     "greedy return", **summary, "seeds": args.seeds, "budget_per_member": args.budget}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
