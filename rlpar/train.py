"""``python -m rlpar.train AGENT [flags]``: train an agent from the command line.

Flags come from the agent's config dataclass and ``RunConfig``; ``--help`` after the agent name lists them.
"""

from __future__ import annotations

import argparse
import sys

from rlpar import cli
from rlpar.runner import RunConfig


def _agent_names() -> list[str]:
    from agents import AGENTS

    return sorted(AGENTS)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    import agents  # light: jax is imported, no backend is started

    names = _agent_names()
    if not argv or argv[0].startswith("-"):
        if argv and argv[0] in ("-h", "--help"):
            print(f"usage: python -m rlpar.train AGENT [flags]   (AGENT: {', '.join(names)}; AGENT --help for flags)")
            return 0
        print(f"error: name an agent first: python -m rlpar.train AGENT [flags]; known agents: {', '.join(names)}",
              file=sys.stderr)
        return 2
    try:
        spec = agents.get(argv[0])
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2

    parser = argparse.ArgumentParser(prog=f"python -m rlpar.train {spec.name}", description=f"Train {spec.name}.")
    cli.add_dataclass_flags(parser, RunConfig, "run")
    cli.add_dataclass_flags(parser, spec.config_cls, spec.name)
    args = parser.parse_args(argv[1:])

    try:
        run_config = cli.build_dataclass(RunConfig, args).validate()
        config = cli.build_dataclass(spec.config_cls, args)
        # Devices must be requested before JAX starts its backends (i.e. before the first computation).
        from rlpar import parallel

        parallel.request_cpu_devices(run_config.devices)
        import envs

        envs.make(run_config.env)  # unknown env id: a clear error before anything compiles
        devices = parallel.select_devices(run_config.devices)
        config.validate(len(devices))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2

    from rlpar.runner import format_record, mean_recent_return, run

    print(
        f"rlpar: {spec.name} on {run_config.env}, {len(devices)} {devices[0].platform} device(s), "
        f"{config.num_envs} envs x {config.num_steps} steps, {config.num_updates} updates"
        + (f", run dir {run_config.run_dir}" if run_config.run_dir else ""),
        flush=True,
    )
    result = run(spec, config, run_config, on_log=lambda r: print(format_record(r, config.num_updates), flush=True))
    total_s = sum(r["time_s"] for r in result.metrics)
    steps = result.metrics[-1]["env_steps"] if result.metrics else 0
    print(
        f"done: {steps:,} env steps in {total_s:.1f}s ({steps / max(total_s, 1e-9):,.0f} sps) "
        f"+ {result.compile_s:.1f}s compile; mean return of the last logged episodes "
        f"{mean_recent_return(result.metrics):.2f}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
