"""PPO training speed of the two device backends side by side: ``--backend pmap`` vs ``--backend shard_map``.

Same config, same devices, same seed; the runs alternate between the backends (pmap, shard_map, pmap, ...) so that
a change in the machine's load hits both alike. Each run is ``rlpar.run.runner.run`` (what ``python -m rlpar.train``
runs): its compilation is ahead of time and excluded; every logged chunk of ``--log-every`` updates is one timed
repeat. One JSON line per backend: the median train SPS over all chunks of all its runs, with quartiles and extremes.

    python benchmarks/backend_sps.py --devices 2 --num-envs 64 --num-steps 128 --total-timesteps 655360 --runs 2

PPO and run flags are those of ``python -m rlpar.train ppo`` (``--backend`` is set by this script).
"""

from __future__ import annotations

import argparse
import dataclasses

import common  # also puts the repository root on sys.path
from common import command_line, emit, platform_fields, sps_stats


def chunk_seconds_per_step(records: list[dict]) -> list[float]:
    """Seconds per env step of each logged chunk (``sps_stats(1, ...)`` turns them into steps per second)."""
    steps_before = [0] + [r["env_steps"] for r in records[:-1]]
    return [r["time_s"] / (r["env_steps"] - before) for r, before in zip(records, steps_before)]


def measure(config, run_config, backends: list[str], runs: int) -> dict[str, dict]:
    """``runs`` training runs per backend, alternating; per backend its chunk timings and compile times."""
    import agents
    from rlpar.run.runner import run

    timings = {b: {"seconds_per_step": [], "compile_s": []} for b in backends}
    progress = common.Rows(runs * len(backends))
    for i in range(runs):
        for backend in backends:
            progress.start(f"run {i + 1}/{runs}, --backend {backend}")
            result = run(agents.ppo.SPEC, config, dataclasses.replace(run_config, backend=backend))
            timings[backend]["seconds_per_step"] += chunk_seconds_per_step(result.metrics)
            timings[backend]["compile_s"].append(round(result.compile_s, 3))
    return timings


def backend_record(backend: str, timing: dict, config, run_config, devices) -> dict:
    platform = platform_fields(devices)
    return {
        "benchmark": "backend_sps",
        "backend": backend,
        "platform": platform.pop("backend"),  # the device platform (cpu, gpu, tpu); "backend" here is pmap/shard_map
        **platform,
        "env": run_config.env,
        "num_envs": config.num_envs,
        "num_steps": config.num_steps,
        "total_timesteps": config.total_timesteps,
        "log_every": run_config.log_every,
        **sps_stats(1, timing["seconds_per_step"]),  # "repeats" = timed chunks over all runs
        "compile_s": timing["compile_s"],
        "config": dataclasses.asdict(config),
        "command": command_line(),
    }


def parse_args(argv=None):
    from agents.ppo import PPOConfig
    from rlpar.tools import cli
    from rlpar.core.parallel import BACKENDS
    from rlpar.run.runner import RunConfig

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma list of backends to compare")
    parser.add_argument("--runs", type=int, default=2, help="training runs per backend (alternating)")
    parser.add_argument("--out", default=None, help="append JSON lines to this file")
    run_base = RunConfig(eval_every=0)  # speed: no evaluation in the timed chunks unless asked (--eval-every)
    cli.add_dataclass_flags(parser, RunConfig, "run", base=run_base)
    cli.add_dataclass_flags(parser, PPOConfig, "ppo")
    args = parser.parse_args(argv)
    run_config = cli.build_dataclass(RunConfig, args, base=run_base, run_dir="", checkpoint_every=0)
    backends = [b for b in args.backends.split(",") if b]
    for backend in backends:
        dataclasses.replace(run_config, backend=backend).validate()
    if args.runs <= 0:
        parser.error(f"--runs {args.runs}: must be a positive integer")
    return args, backends, run_config.validate(), cli.build_dataclass(PPOConfig, args)


def main(argv=None) -> int:
    import sys

    from rlpar.core import hosts
    from rlpar.tools import train

    argv = list(sys.argv[1:] if argv is None else argv)
    if "--devices" not in argv:
        argv += ["--devices", "2"]  # the default here: a comparison of backends needs more than one device
    train.start_devices(argv)  # CPU devices, before anything (importing gymnax) starts JAX's backends
    args, backends, run_config, config = parse_args(argv)
    devices = hosts.select_devices(run_config.devices)
    config.validate(len(devices))
    timings = measure(config, run_config, backends, args.runs)
    for backend in backends:
        emit(backend_record(backend, timings[backend], config, run_config, devices), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
