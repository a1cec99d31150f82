"""Does PPO learn as well per env step when its minibatches move blocks of rows as with single rows?

PPO's shuffle can move ``B`` consecutive rows of one time step as one unit (``--shuffle-block``; the
accelerators' default) instead of single rows (rejax's and PureJaxRL's sampling: a fresh permutation of single
rows each epoch). This trains the same config under both layouts, ``--seeds`` seeds each (vmapped in one program per
layout), with a greedy evaluation of ``--eval-episodes`` episodes at the same env steps, and reports per case and
layout the greedy return over seeds (mean and a 95% t-interval) at each evaluation, and at the last one the
difference blocks - rows with Welch's 95% interval. Both layouts use the same permutation method (JAX's sort-based
``jax.random.permutation``) and the same block on every backend (the one an accelerator picks for the config), so a
CPU runs what an accelerator runs.

Cases:

- ``cartpole-4096``: PPO CartPole-v1, its preset at 4,096 envs x 128 steps (4 epochs x 4 minibatches: blocks of 64),
  32 updates (16.8M steps);
- ``breakout``: PPO Breakout-MinAtar, the accelerator preset (512 envs x 32 steps, 8 minibatches: blocks of 8),
  1e7 steps;
- ``mpe``: IPPO on JaxMARL's MPE simple spread at 1,024 envs (the marl extra).

    python benchmarks/layout_learning.py --cases cartpole-4096 --seeds 5
    python benchmarks/layout_learning.py --cases cartpole-4096,breakout,mpe --seeds 5
    python benchmarks/layout_learning.py --quick        # a few updates of each case: checks the script
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
import time

import common  # also puts the repository root on sys.path

LAYOUTS = ("rows", "blocks")


def cases(quick: bool) -> dict[str, dict]:
    """case -> the agent, env, config changes on the accelerator preset, updates between evaluations."""
    out = {
        "cartpole-4096": dict(agent="ppo", env="CartPole-v1", changes=dict(num_envs=4096, num_steps=128),
                              updates=32, eval_every=8),
        "breakout": dict(agent="ppo", env="Breakout-MinAtar", changes=dict(total_timesteps=10_000_000), updates=None,
                         eval_every=61),
        "mpe": dict(agent="ippo", env="marl-MPE_simple_spread_v3", changes=dict(num_envs=1024), updates=None,
                    eval_every=None),
    }
    if quick:  # few envs and updates: what every case builds and runs, not what it learns
        for case in out.values():
            case["changes"] = dict(case["changes"], num_envs=64, total_timesteps=None)
            case["updates"], case["eval_every"] = 4, 2
    return out


def config_for(case: dict):
    """The case's config: the accelerator preset of its env with the case's changes, the same on every backend."""
    import inspect

    from rlpar.tools import registry

    config_cls = registry.get(case["agent"]).config_cls
    takes_platform = "platform" in inspect.signature(config_cls.for_env).parameters
    config = config_cls.for_env(case["env"], platform="tpu") if takes_platform else config_cls.for_env(case["env"])
    config = config.replace(**{k: v for k, v in case["changes"].items() if v is not None})
    if case["updates"]:
        config = config.replace(total_timesteps=config.batch_size * case["updates"])
    return config


def accelerator_block(case: dict, config) -> int:
    """The block an accelerator's shuffle picks for ``config`` on one device (a team agent's rows are
    env x agent samples)."""
    import envs
    from rlpar.core import platform

    agents_per_env = getattr(envs.make(case["env"])[0], "num_agents", 1) if case["agent"] != "ppo" else 1
    rows = config.num_envs * agents_per_env
    with platform.fast_paths(False):
        return platform.shuffle_block(config.num_steps * rows, rows, config.num_minibatches)


def interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and a two-sided 95% t-interval of ``values``."""
    from scipy import stats

    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, float("nan"), float("nan")
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def welch(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """``mean(a) - mean(b)`` and its 95% interval (Welch's unequal-variance t)."""
    from scipy import stats

    diff = statistics.fmean(a) - statistics.fmean(b)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return diff, diff, diff
    dof = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = stats.t.ppf(0.975, dof) * math.sqrt(va + vb)
    return diff, diff - half, diff + half


def train_layout(name: str, case: dict, layout: str, args) -> dict:
    """One layout of one case: ``args.seeds`` seeds in one program; the greedy curve of every seed."""
    import jax

    from rlpar.core import platform
    from rlpar.run.runner import RunConfig, run
    from rlpar.tools import registry

    preset = config_for(case)
    block = 1 if layout == "rows" else accelerator_block(case, preset)
    config = preset.replace(shuffle_block=block)  # the layout is the config's, the same on every backend
    eval_every = case["eval_every"] or max(1, config.num_updates // 10)
    run_config = RunConfig(env=case["env"], devices=1, num_seeds=args.seeds, eval_every=eval_every,
                           eval_episodes=args.eval_episodes, log_every=eval_every, compile_cache="off")
    common.say(f"{name}, {layout} (block {block}): {config.num_updates} updates of "
               f"{config.batch_size:,} env steps, {args.seeds} seeds, greedy evaluation every {eval_every} updates")
    start = time.perf_counter()
    with platform.forcing(shuffle_method="sort"):  # one permutation method on every backend
        result = run(registry.get(case["agent"]), config, run_config)
    wall_s = time.perf_counter() - start
    curve = [(m["env_steps"], [slot["eval/episode_return"] for slot in m["slots"]])
             for m in result.metrics if "eval/episode_return" in m]
    final = curve[-1][1]
    mean, low, high = interval(final)
    return common.record("layout_learning", case=name, layout=layout, agent=case["agent"], env=case["env"],
                         shuffle_block=block, shuffle_method="sort", seeds=args.seeds,
                         eval_episodes=args.eval_episodes, num_envs=config.num_envs, num_steps=config.num_steps,
                         num_minibatches=config.num_minibatches, update_epochs=config.update_epochs,
                         env_steps=curve[-1][0], greedy_curve=curve, final_greedy=final, final_mean=mean,
                         final_ci95=[low, high], compile_s=result.compile_s, wall_s=wall_s,
                         backend=jax.default_backend(), config=dataclasses.asdict(config))


def summary(rows: list[dict]) -> list[str]:
    lines = ["| case | layout | block | env steps | greedy return (mean, 95% CI) | seeds |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        low, high = row["final_ci95"]
        lines.append(f"| {row['case']} | {row['layout']} | {row['shuffle_block']} | {row['env_steps']:,} | "
                     f"{row['final_mean']:.1f} [{low:.1f}, {high:.1f}] | {row['seeds']} |")
    for case in dict.fromkeys(r["case"] for r in rows):
        by = {r["layout"]: r for r in rows if r["case"] == case}
        if set(by) == set(LAYOUTS) and by["rows"]["seeds"] > 1:
            diff, low, high = welch(by["blocks"]["final_greedy"], by["rows"]["final_greedy"])
            verdict = "no difference shown" if low <= 0 <= high else ("blocks better" if low > 0 else "blocks worse")
            lines.append(f"{case}: blocks - rows = {diff:+.1f} [{low:+.1f}, {high:+.1f}] (Welch 95%): {verdict}")
    return lines


def main(argv=None) -> int:
    known = cases(False)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="cartpole-4096", help="comma list of " + ", ".join(known))
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help="comma list of " + ", ".join(LAYOUTS))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--eval-episodes", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="a few updates of 64 envs: checks the script")
    common.add_out_argument(parser, "layout_learning")
    args = parser.parse_args(argv)
    names = [c for c in args.cases.split(",") if c]
    layouts = [x for x in args.layouts.split(",") if x]
    bad = [c for c in names if c not in known] or [x for x in layouts if x not in LAYOUTS]
    if bad:
        parser.exit(2, f"error: {bad[0]!r}: expected cases from {', '.join(known)} and layouts from "
                       f"{', '.join(LAYOUTS)}\n")
    if args.seeds < 1:
        parser.exit(2, f"error: --seeds {args.seeds}: expected 1 or more\n")
    chosen = cases(args.quick)
    common.say(common.host_line())
    rows = []
    for name in names:
        for layout in layouts:
            row = train_layout(name, chosen[name], layout, args)
            rows.append(row)
            common.emit(row, args.out)
    print("\n".join(summary(rows)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
