"""End-to-end PPO training speed: environment steps per second and wall-clock time to a target return.

Runs ``rlpar.run.runner.run`` (what ``python -m rlpar.train ppo`` runs) and reads its per-chunk metrics records:

- ``sps_end_to_end``: all env steps / all training seconds (compilation excluded, reported as ``compile_s``);
- ``sps_median``, quartiles, min/max: over the logged chunks (``--log-every`` updates each);
- ``time_to_target_s``: training seconds until the first chunk whose mean episode return reaches
  ``--target-return`` (``null`` if never), and the env steps by then.

    python benchmarks/train_sps.py --devices 1
    python benchmarks/train_sps.py --devices 2 --num-envs 256 --total-timesteps 2000000
    python benchmarks/train_sps.py --num-envs 1 --out t.jsonl --then --env Breakout-MinAtar --num-envs 64 --out t.jsonl

``--then`` starts another row, with flags of its own, in the same process (on a TPU each process pays 10-15 s to
open the chip). A row whose ``--deadline`` (Unix time) has passed is not started, and a row that fails does not stop
the next; either way a ``{"not_measured": reason, ...}`` line on stdout says so, and the exit status is 1 if any
row failed.

PPO flags are the same as ``python -m rlpar.train ppo`` (generated from ``PPOConfig``), and as there they start
from the ``--env``'s preset (``PPOConfig.for_env``; CartPole-v1's is the plain defaults).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import traceback

import common  # also puts the repository root on sys.path
from common import command_line, emit, platform_fields, sps_stats


def layout(config) -> str:
    """How the config's minibatches sample: ``"single"`` rows (as the peers), ``"default"`` (the backend's choice:
    blocks of rows on an accelerator) or ``"blocks of B"``."""
    block = getattr(config, "shuffle_block", 0)
    return "default" if block == 0 else "single" if block == 1 else f"blocks of {block}"


def time_to_target(records: list[dict], target: float) -> tuple[float | None, int | None]:
    """Training seconds and env steps up to the end of the first chunk whose mean return is >= ``target``."""
    elapsed = 0.0
    for record in records:
        elapsed += record["time_s"]
        if record["episode_return"] is not None and record["episode_return"] >= target:
            return elapsed, record["env_steps"]
    return None, None


def train_record(config, run_config, target: float) -> dict:
    """Train once; one result record."""
    import agents
    from rlpar.core import hosts
    from rlpar.run.runner import run
    from rlpar.run.records import mean_recent_return

    devices = hosts.select_devices(run_config.devices)
    result = run(agents.ppo.SPEC, config, run_config)
    records = result.metrics
    train_s = sum(r["time_s"] for r in records)
    steps = records[-1]["env_steps"]
    chunk = sps_stats(1, [r["time_s"] / (r["env_steps"] - prev) for r, prev in
                          zip(records, [0] + [r["env_steps"] for r in records[:-1]])])
    target_s, target_steps = time_to_target(records, target)
    return {
        "benchmark": "train",
        "program": "rlpar",
        "layout": layout(config),
        **platform_fields(devices),
        "env": run_config.env,
        "num_envs": config.num_envs,
        "num_steps": config.num_steps,
        "total_timesteps": config.total_timesteps,
        "seed": config.seed,
        "env_steps": steps,
        "train_s": round(train_s, 3),
        "compile_s": round(result.compile_s, 3),
        "sps_end_to_end": steps / train_s,
        **chunk,  # over chunks; "repeats" = chunks
        "target_return": target,
        "time_to_target_s": target_s,
        "steps_to_target": target_steps,
        "final_return": mean_recent_return(records),
        "log_every": run_config.log_every,
        "config": dataclasses.asdict(config),
        "command": command_line(),
    }


def parse_args(argv=None):
    # CPU devices must be requested before anything starts JAX's backend, and importing agents may (gymnax builds
    # arrays at import): read --devices first.
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--devices", type=int, default=1)
    early.add_argument("--env", default=None)
    known = early.parse_known_args(argv)[0]
    from rlpar.core import hosts

    hosts.request_cpu_devices(known.devices)

    from agents.ppo import PPOConfig
    from rlpar.tools import cli
    from rlpar.run.runner import RunConfig

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target-return", type=float, default=475.0, help="return that counts as solved")
    parser.add_argument("--seeds", default="0", help="comma list; one training run (and record) per seed")
    common.add_out_argument(parser, "train_sps")
    parser.add_argument("--deadline", type=float, default=None, help="Unix time after which this row is not started")
    common.add_force_argument(parser)
    run_base = RunConfig(eval_every=0)  # speed: no evaluation in the timed chunks unless asked (--eval-every)
    cli.add_dataclass_flags(parser, RunConfig, "run", base=run_base)
    base = PPOConfig.for_env(known.env or RunConfig.env)  # the env's preset, as the training CLI's base
    cli.add_dataclass_flags(parser, PPOConfig, "ppo", base=base)
    args = parser.parse_args(argv)
    run_config = cli.build_dataclass(RunConfig, args, base=run_base, run_dir="")
    if getattr(args, "RunConfig.devices") is None:
        run_config = dataclasses.replace(run_config, devices=1)
    config = cli.build_dataclass(PPOConfig, args, base=base)
    try:
        args.forced = common.parse_forcing(args.force)
    except ValueError as error:
        parser.exit(2, f"error: {error}\n")
    return args, run_config.validate(), config


def main(argv=None) -> int:
    failed = False
    rows = [parse_args(row) for row in common.split_rows(sys.argv[1:] if argv is None else argv)]  # all checked first
    for args, run_config, config in rows:
        what = dict(benchmark="train", program="rlpar", layout=layout(config), env=run_config.env,
                    num_envs=config.num_envs)
        if common.past_deadline(args.deadline):
            common.say(f"not started, past its deadline: {run_config.env}, {config.num_envs} envs")
            common.not_measured("not started: out of time", **what)
            continue
        seeds = [int(s) for s in args.seeds.split(",")]
        progress = common.Rows(len(seeds))
        try:
            for seed in seeds:
                progress.start(f"seed {seed}: {run_config.env}, {config.num_envs} envs, training "
                               f"{config.total_timesteps:,} steps on {run_config.devices or 'all'} device(s)")
                common.apply_forcing(args.forced)
                emit({**train_record(config.replace(seed=seed), run_config, args.target_return),
                      "forced": args.forced}, args.out)
        except Exception as error:  # the next row may still run (another env, fewer envs)
            traceback.print_exc()
            common.not_measured(common.failure(error), **what)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
