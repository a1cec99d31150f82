"""``python -m rlpar.train AGENT [flags]``: train an agent from the command line.

Flags come from the agent's config dataclass and ``RunConfig``; ``--help`` after the agent name lists them.
"""

from __future__ import annotations

import argparse
import sys

from rlpar import cli, resume
from rlpar.runner import RunConfig


def _agent_names() -> list[str]:
    from agents import AGENTS

    return sorted(AGENTS)


def start_devices(argv: list[str]) -> None:
    """Create the CPU devices asked for and join a multi-process run, from the run flags alone.

    Both must happen before JAX starts its backends, and importing an agent or environment module can start them
    (gymnax builds arrays at import), so this runs before those imports. Flags it cannot parse or validate are left
    for the full parser below to report.
    """
    from rlpar import parallel

    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    cli.add_dataclass_flags(parser, RunConfig, "run")
    try:
        run_config = cli.build_dataclass(RunConfig, parser.parse_known_args(argv)[0]).validate()
    except (argparse.ArgumentError, ValueError):
        return
    parallel.request_cpu_devices(run_config.devices)
    if run_config.coordinator:  # one line per process on stderr: which run it waits for, and for how long
        who = ("as found in the environment" if run_config.coordinator == "auto"
               else f"as process {run_config.process_id} of {run_config.num_processes}")
        print(f"rlpar: joining the multi-process run at {run_config.coordinator} {who} "
              f"(init timeout {run_config.init_timeout_s}s, heartbeat timeout {run_config.heartbeat_timeout_s}s)",
              file=sys.stderr, flush=True)
    parallel.init_distributed(
        run_config.coordinator, run_config.num_processes, run_config.process_id,
        init_timeout_s=run_config.init_timeout_s, heartbeat_timeout_s=run_config.heartbeat_timeout_s,
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        resumed = resume.expand(argv)  # [AGENT] --resume RUN_DIR -> the run's own command line
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    argv = resumed.argv
    try:
        start_devices(argv[1:])
    except RuntimeError as err:  # could not join a multi-process run
        print(f"error: {err}", file=sys.stderr)
        return 1
    import agents  # may start JAX's backends

    names = _agent_names()
    if not argv or argv[0].startswith("-"):
        if argv and argv[0] in ("-h", "--help"):
            print(f"usage: python -m rlpar.train AGENT [flags]   (AGENT: {', '.join(names)}; AGENT --help for flags)\n"
                  "       python -m rlpar.train --resume RUN_DIR")
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
    parser.add_argument(resume.FLAG, metavar="RUN_DIR", help="continue the run in RUN_DIR from its newest complete "
                        "checkpoint, with the settings in its config.json (give no other flags)")
    args = parser.parse_args(argv[1:])

    try:
        run_config = cli.build_dataclass(RunConfig, args).validate()
        # An agent's per-environment preset (if it has one) is the base; flags given override it.
        for_env = getattr(spec.config_cls, "for_env", None)
        config = cli.build_dataclass(spec.config_cls, args, base=for_env(run_config.env) if for_env else None)
        from rlpar import parallel
        import envs

        envs.make(run_config.env)  # unknown env id: a clear error before anything compiles
        devices = parallel.select_devices(run_config.devices)
        config.validate(len(devices))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2

    import jax

    from rlpar.guard import NonFiniteError
    from rlpar.runner import mean_recent_return

    # Only the primary process prints (and writes files); the others train silently alongside it.
    say = print if parallel.is_primary() else (lambda *args, **kwargs: None)
    processes = f" in {jax.process_count()} processes" if jax.process_count() > 1 else ""
    say(
        f"rlpar: {spec.name} on {run_config.env}, {len(devices)} {devices[0].platform} device(s){processes}, "
        f"{config.num_envs} envs x {config.num_steps} steps, {config.num_updates} updates"
        + (f", run dir {run_config.run_dir}" if run_config.run_dir else ""),
        flush=True,
    )
    try:
        result = _run_with_progress(spec, config, run_config, resumed.run_dir)
    except ValueError as err:  # a run dir that cannot be resumed or reused, found before compiling
        print(f"error: {err}", file=sys.stderr)
        return 2
    except NonFiniteError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    total_s = sum(r["time_s"] for r in result.metrics)
    steps = result.metrics[-1]["env_steps"] if result.metrics else 0
    say(
        f"done: {steps:,} env steps in {total_s:.1f}s ({steps / max(total_s, 1e-9):,.0f} sps) "
        f"+ {result.compile_s:.1f}s compile; mean return of the last logged episodes "
        f"{mean_recent_return(result.metrics):.2f}",
        flush=True,
    )
    return 0


def _run_with_progress(spec, config, run_config: RunConfig, resume_dir: str | None):
    """``runner.run`` with the progress display on the primary process (none on the others)."""
    from rlpar import parallel
    from rlpar.progress import ProgressDisplay
    from rlpar.runner import run

    if not parallel.is_primary():
        return run(spec, config, run_config, resume=resume_dir is not None)
    start = resume.updates_done(resume_dir)
    with ProgressDisplay(config.num_updates, config.batch_size, start_update=start) as show:
        return run(spec, config, run_config, on_log=show, resume=resume_dir is not None)


if __name__ == "__main__":
    sys.exit(main())
