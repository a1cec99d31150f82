"""Where a population's members train: every device trains every member on its share of the environments (``1xD``,
data-parallel: a gradient all-reduce per step), or each group of devices trains its own members
(``--population-devices``, ``Mx1``: no all-reduce at all), against the same population on one device.

For each agent (PPO and DQN on CartPole-v1 at their presets, ``--members`` members drawn from a search over their
learning rate) and each round, three fresh processes train the same population: on 1 device, on 2 devices as 1x2 and
on 2 devices as 2x1, in an order that rotates by round. Steps per second counts every member's environment steps over
the chunks after the first (compiled and warm). Reported per row: the median over rounds and each round's figure;
the summary line per agent gives the medians of the per-round ratios 2x1 / 1, 1x2 / 1 and 2x1 / 1x2.

    python benchmarks/population_devices.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import common  # also puts the repository root on sys.path

LAYOUTS = {"1 device": (1, 1), "1x2": (2, 1), "2x1": (2, 2)}  # name -> (devices, population devices)
# agent -> (config changes from its preset, search, env steps per member)
CASES = {
    "ppo": ({}, "lr=log:1e-4..1e-2", 64 * 1024 * 2),
    "dqn": ({}, "lr=log:1e-4..1e-2", 256 * 40),
}


def worker(agent: str, devices: int, groups: int, members: int, budget: int, log_every: int) -> dict:
    """One training of the population in this process (its first JAX work: the device count is still free)."""
    from rlpar.core import hosts

    hosts.request_cpu_devices(devices)
    import agents

    changes, search, _ = CASES[agent]
    spec = getattr(agents, agent)
    config = (agents.PPOConfig.for_env("CartPole-v1") if agent == "ppo" else agents.DQNConfig())
    config = config.replace(total_timesteps=budget, **changes)
    result = spec.train(config, "CartPole-v1", devices=devices, population_devices=groups, search=search,
                        population=members, log_every=log_every, eval_every=0, compile_cache="off",
                        checkpoint_every=0)
    warm = result.metrics[1:]
    steps = sum(r["sps"] * r["time_s"] for r in warm)  # every member's steps
    seconds = sum(r["time_s"] for r in warm)
    return {"sps": steps / seconds, "compile_s": result.compile_s, "chunks_timed": len(warm)}


def measure(agent: str, layout: str, args) -> dict:
    devices, groups = LAYOUTS[layout]
    budget = args.budget or CASES[agent][2]
    run = common.run_fresh([sys.executable, __file__, "--worker", agent, str(devices), str(groups), str(args.members),
                            str(budget), str(args.log_every)], env={"PYTHONUNBUFFERED": "1"})
    return run.records[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", default="ppo,dqn", help="comma list of: " + ", ".join(CASES))
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=int, default=0, help="env steps per member (0: each agent's default)")
    parser.add_argument("--log-every", type=int, default=5, help="updates per chunk (the first chunk is not timed)")
    common.add_out_argument(parser, "population_devices")
    parser.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        agent, devices, groups, members, budget, log_every = args.worker
        print(json.dumps(worker(agent, int(devices), int(groups), int(members), int(budget), int(log_every))))
        return 0
    names = list(LAYOUTS)
    for agent in args.agents.split(","):
        per_round = {name: {} for name in names}  # layout -> {round: measurement}
        for r, name in common.interleave(args.rounds, names, rotate=True, describe=lambda n: f"{agent}, {n}"):
            per_round[name][r] = measure(agent, name, args)
        for name in names:
            sps = [m["sps"] for m in per_round[name].values()]
            common.emit(common.record(
                "population_devices", agent=agent, layout=name, members=args.members, devices=LAYOUTS[name][0],
                population_devices=LAYOUTS[name][1], sps_median=round(statistics.median(sps)),
                sps_rounds=[round(s) for s in sps],
                compile_s=[round(m["compile_s"], 1) for m in per_round[name].values()]), args.out)

        def ratios(a, b):
            return [per_round[a][k]["sps"] / per_round[b][k]["sps"] for k in sorted(per_round[a])]

        summary = {"2x1 / 1 device": ratios("2x1", "1 device"), "1x2 / 1 device": ratios("1x2", "1 device"),
                   "2x1 / 1x2": ratios("2x1", "1x2")}
        common.emit(common.record(
            "population_devices", agent=agent, summary="medians of per-round SPS ratios",
            **{k: round(statistics.median(v), 2) for k, v in summary.items()},
            rounds={k: [round(x, 2) for x in v] for k, v in summary.items()}), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
