"""Choose a PPO preset by measurement: for each batch shape (envs x steps x minibatches x epochs) one compiled run of
a sweep over sweepable values x seeds, every slot's greedy return at the end, and the shape's training SPS.

Each shape is one ``agents.ppo.train`` call in this process (the device opened once): ``--sweep``'s grid x
``--num-seeds`` slots trained side by side (``docs/sweeps.md``), evaluated greedily at the end on
``--eval-episodes`` episodes of their own. The SPS counts every slot's steps, so it says how much a shape costs
beside the others, not what one run of it reaches (time one run with ``python -m rlpar.train``).

    python benchmarks/preset_search.py --env Breakout-MinAtar --shapes 512x32x8x4,1024x32x16x4 \\
        --sweep "lr=5e-4,1e-3,2e-3" --num-seeds 3 --total-timesteps 10000000

``--set "lr=1e-3 ent_coef=0.03"`` fixes fields as constants of the compiled program instead (``--num-seeds 1`` and no
``--sweep``: one seed's program, as ``python -m rlpar.train`` compiles it; add ``collector_unroll=1`` for the
Breakout-MinAtar accelerator preset's collector); ``--seed`` picks the run's seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import time

import common  # also puts the repository root on sys.path
from common import command_line, emit, platform_fields


def parse_shape(text: str) -> dict:
    try:
        envs, steps, minibatches, epochs = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r}: expected ENVSxSTEPSxMINIBATCHESxEPOCHS, e.g. 512x32x8x4")
    return dict(num_envs=envs, num_steps=steps, num_minibatches=minibatches, update_epochs=epochs)


def sweep_grid(sweep: str) -> list[dict]:
    """The sweep's values per value index, the first field varying slowest (as ``--sweep`` orders its slots)."""
    fields = [(name, [float(v) for v in values.split(",")])
              for name, values in (item.split("=", 1) for item in sweep.split())]
    return [dict(zip([name for name, _ in fields], combo))
            for combo in itertools.product(*(values for _, values in fields))] or [{}]


def parse_set(text: str, config) -> dict:
    """``"lr=1e-3 torso=mlp"`` -> ``{"lr": 0.001, "torso": "mlp"}``, each value of its field's type in ``config``;
    ``ValueError`` (one line) for an unknown field or a value that is not of its type."""
    values = {}
    fields = {f.name for f in dataclasses.fields(config)} - {"seed"}  # the seed: --seed
    for item in text.split():
        name, sep, value = item.partition("=")
        if not sep or name not in fields:
            raise ValueError(f"--set {item!r}: expected NAME=VALUE with NAME a field of {type(config).__name__} "
                             "other than seed (--seed)")
        kind = type(getattr(config, name))
        try:
            if kind is bool:
                if value.lower() not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                    raise ValueError
                values[name] = value.lower() in ("1", "true", "yes", "on")
            elif kind is tuple:  # layer widths: 256,256
                values[name] = tuple(int(part) for part in value.split(","))
            else:
                values[name] = kind(value)
        except (TypeError, ValueError):
            raise ValueError(f"--set {item!r}: {value!r} is not a {kind.__name__}") from None
    return values


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="Breakout-MinAtar")
    parser.add_argument("--shapes", required=True, help="comma list of ENVSxSTEPSxMINIBATCHESxEPOCHS")
    parser.add_argument("--sweep", default="", help="as rlpar.train's --sweep (sweepable fields)")
    parser.add_argument("--set", default="", metavar="'NAME=VALUE ...'",
                        help="config fields set for every slot, as constants of the program (unlike --sweep's values, "
                             "which the slots' states carry), e.g. 'lr=1e-3 ent_coef=0.03'")
    parser.add_argument("--seed", type=int, default=0, help="the run's seed (slot i draws from seed index i of it)")
    parser.add_argument("--num-seeds", type=int, default=3)
    parser.add_argument("--total-timesteps", type=int, default=10_000_000, help="env steps per slot")
    parser.add_argument("--eval-episodes", type=int, default=64)
    common.add_out_argument(parser, "preset_search")
    args = parser.parse_args(argv)
    try:
        shapes = [parse_shape(text) for text in args.shapes.split(",")]
    except argparse.ArgumentTypeError as err:
        parser.exit(2, f"error: --shapes {err}\n")

    import jax

    import agents.ppo
    from agents.ppo import PPOConfig

    base = PPOConfig.for_env(args.env, platform="cpu")  # the CPU preset's learning settings, on any backend
    try:  # an unknown env or a shape the config refuses: one line, before anything compiles
        fixed = parse_set(args.set, base)
        base = base.replace(seed=args.seed, **fixed)
        import envs

        envs.make(args.env)
        for shape in shapes:
            base.replace(**shape).validate()
    except ValueError as err:
        parser.exit(2, f"error: {err}\n")
    for shape in shapes:
        config = base.replace(**shape, total_timesteps=args.total_timesteps)
        start = time.perf_counter()
        result = agents.ppo.train(config, args.env, devices=1, num_seeds=args.num_seeds, sweep=args.sweep,
                                  log_every=max(1, config.num_updates // 4), eval_every=10 ** 9,
                                  eval_episodes=args.eval_episodes)
        wall = time.perf_counter() - start
        last = result.metrics[-1]
        run_s = sum(record["time_s"] for record in result.metrics)
        slots = last.get("slots") or [last]
        record = {"benchmark": "preset_search", "env": args.env, **shape, "total_timesteps": args.total_timesteps,
                  "sweep": args.sweep, "set": fixed, "seed": args.seed,
                  "num_seeds": args.num_seeds, "compile_s": result.compile_s,
                  "run_s": run_s, "wall_s": wall, "sps_all_slots": last["env_steps"] * len(slots) / run_s,
                  **platform_fields(jax.devices()[:1]), "command": command_line()}
        grid = sweep_grid(args.sweep)
        for slot, values in enumerate(slots):
            emit({**record, "slot": slot, "seed_index": slot % args.num_seeds, **grid[slot // args.num_seeds],
                  **{k: v for k, v in values.items() if not isinstance(v, (dict, list))}}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
