"""``python -m rlpar.train AGENT [flags]``: train an agent from the command line.

``AGENT`` is a registered name (``ppo``, ``ppo_rnn``) or ``package.module:ATTR`` naming an ``rlpar.agent.AgentSpec``.
Flags come from the agent's config dataclass and ``RunConfig``; ``--help`` after the agent name lists them, with the
preset of ``--env`` (if the agent has presets) as the defaults. ``--dry-run`` (or ``--check``) makes every check a
run makes and says what it would train, compiling nothing.
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
import threading
import time
from typing import NoReturn

from rlpar.run.runner import RunConfig
from rlpar.tools import cli, resume

_IMPORTED_AT = time.time()


def process_started() -> float:
    """``time.time()`` when this process started: from ``/proc`` on Linux, else when this module was imported."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            start_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime, in clock ticks
            since_boot = float(uptime.read().split()[0])
        return time.time() - since_boot + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return _IMPORTED_AT


def _prog() -> str:
    """How the user called us: the ``rlpar-train`` console script, or ``python -m rlpar.train``."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return name if name == "rlpar-train" else "python -m rlpar.train"


DRY_RUN_FLAGS = ("--dry-run", "--check")


def dry_run_requested(argv: list[str]) -> tuple[bool, list[str]]:
    """Whether ``argv`` asks for a dry run (``--dry-run`` or ``--check``), and ``argv`` without those flags: read
    first, since a dry run joins no multi-process run, and ``--resume RUN_DIR --dry-run`` takes no other flag."""
    rest = [arg for arg in argv if arg not in DRY_RUN_FLAGS]
    return len(rest) < len(argv), rest


def start_devices(argv: list[str], join: bool = True) -> None:
    """Create the CPU devices asked for and (with ``join``) join a multi-process run, from the run flags alone.

    Both must happen before JAX starts its backends, so this runs before any agent or environment is built. Flags
    it cannot parse or validate are left for the full parser below to report.
    """
    from rlpar.core import hosts

    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    cli.add_dataclass_flags(parser, RunConfig, "run")
    try:
        run_config = cli.build_dataclass(RunConfig, parser.parse_known_args(argv)[0]).validate()
        hosts.request_cpu_devices(run_config.devices)
    except (argparse.ArgumentError, ValueError):
        return
    if not join:
        return
    if run_config.coordinator:  # one line per process on stderr: which run it waits for, and for how long
        who = ("as found in the environment" if run_config.coordinator == "auto"
               else f"as process {run_config.process_id} of {run_config.num_processes}")
        print(f"rlpar: joining the multi-process run at {run_config.coordinator} {who} "
              f"(init timeout {run_config.init_timeout_s}s, heartbeat timeout {run_config.heartbeat_timeout_s}s)",
              file=sys.stderr, flush=True)
    hosts.init_distributed(
        run_config.coordinator, run_config.num_processes, run_config.process_id,
        init_timeout_s=run_config.init_timeout_s, heartbeat_timeout_s=run_config.heartbeat_timeout_s,
    )


def _env_flag(argv: list[str]) -> str:
    """The ``--env`` value in ``argv`` (the default env without one), read before the full parser exists."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("--env", default=RunConfig.env)
    try:
        return parser.parse_known_args(argv)[0].env
    except argparse.ArgumentError:
        return RunConfig.env


def make_parser(spec, base=None) -> cli.Parser:
    """The flags of ``spec``'s runs: ``RunConfig``'s and its config's (``base``'s values shown as the defaults)."""
    parser = cli.Parser(prog=f"{_prog()} {spec.name}", description=f"Train {spec.name}.")
    cli.add_dataclass_flags(parser, RunConfig, "run")
    cli.add_dataclass_flags(parser, spec.config_cls, spec.name, base=base)
    parser.add_argument("--no-compile-cache", dest="RunConfig.compile_cache", action="store_const", const="off",
                        help="compile from scratch, without JAX's persistent compilation cache")
    parser.add_argument(resume.FLAG, metavar="RUN_DIR", help="continue the run in RUN_DIR from its newest complete "
                        "checkpoint, with the settings in its config.json (give no other flags)")
    parser.add_argument(*DRY_RUN_FLAGS, dest="dry_run", action="store_const", const=True,
                        help="check everything the run would (env, agent, config, devices and their layout, run dir, "
                             "search space), print what it would train, and exit without compiling or writing "
                             "anything; a multi-process run is checked on this process's devices, without joining")
    return parser


def parse_run_args(spec, argv: list[str]):
    """``(run_config, config)`` from the agent's flags; the env's preset (if the agent has presets) is the base
    that flags override, and ``--help`` shows its values as the defaults. ``ValueError`` for bad values."""
    for_env = getattr(spec.config_cls, "for_env", None)
    base = for_env(_env_flag(argv)) if for_env else None
    args = make_parser(spec, base).parse_args(argv)
    return cli.build_dataclass(RunConfig, args).validate(), cli.build_dataclass(spec.config_cls, args, base=base)


def _check(spec, run_config: RunConfig, config) -> list:
    """Everything that can be refused before compiling: the env id, the devices, the config on those devices, and
    the agent's own checks of the env (e.g. an action space it cannot take)."""
    import envs

    from rlpar.core import hosts, platform
    from rlpar.run.prepare import check_agent, config_env_kwargs, make_slots

    platform.plain_layers_requested()  # a $RLPAR_PLAIN_LAYERS that is not a boolean: refused before any compile

    # unknown env id, or options it cannot take: a clear error before anything compiles
    env, env_params = envs.make(run_config.env, **config_env_kwargs(config))
    devices = hosts.select_devices(run_config.devices)
    config.validate(len(devices))
    run_config.validate_devices(len(devices))
    make_slots(run_config, config, len(devices))  # fields the config cannot take, values it refuses
    run_config.pbt_settings(config.num_updates)  # an interval as long as the run
    check_agent(spec, config, env, env_params, config.num_envs // len(devices))
    return devices


def main(argv: list[str] | None = None) -> int:
    from rlpar.core import platform

    platform.set_runtime_defaults()  # before anything opens a TPU
    dry_run, argv = dry_run_requested(list(sys.argv[1:] if argv is None else argv))
    try:
        resumed = resume.expand(argv)  # [AGENT] --resume RUN_DIR -> the run's own command line
        argv = resumed.argv
        start_devices(argv[1:], join=not dry_run)
    except ValueError as err:
        return _fail(err, 2)
    except RuntimeError as err:  # could not join a multi-process run
        return _fail(err, 1)
    from rlpar.tools import registry

    if not argv or argv[0].startswith("-"):
        if argv and argv[0] in ("-h", "--help"):
            print(f"usage: {_prog()} AGENT [flags]   (AGENT: {', '.join(registry.names())}, or package.module:ATTR;"
                  f" AGENT --help for flags)\n       {_prog()} --resume RUN_DIR")
            return 0
        return _fail(f"name an agent first: {_prog()} AGENT [flags]; known agents: {', '.join(registry.names())}", 2)
    try:
        spec = registry.get(argv[0])
        if ":" in argv[0]:  # config.json records how to find it again (evaluate, --resume)
            spec = spec._replace(name=argv[0])
        run_config, config = parse_run_args(spec, argv[1:])
        if dry_run:
            return _dry_run(spec, config, run_config, resumed.run_dir)
        devices = _check(spec, run_config, config)
    except ValueError as err:
        return _fail(err, 2)
    return _train(spec, config, run_config, devices, resumed.run_dir)


def _fail(err, code: int) -> int:
    from rlpar.tools import errors

    return errors.fail(err, code)


def _train(spec, config, run_config: RunConfig, devices: list, resume_dir: str | None) -> int:
    import jax

    from rlpar.core import hosts
    from rlpar.run.guard import NonFiniteError
    from rlpar.run.preemption import EXIT_CODE, Preempted
    from rlpar.run.chunks import Interrupted

    say = print if hosts.is_primary() else (lambda *args, **kwargs: None)  # only process 0 prints
    say(_header(spec, config, run_config, devices, jax.process_count()), flush=True)
    try:
        result = _run_with_progress(spec, config, run_config, resume_dir, say)
    except ValueError as err:  # a run dir that cannot be resumed or reused, found before compiling
        return _fail(err, 2)
    except NonFiniteError as err:
        return _fail(err, 1)
    except KeyboardInterrupt:  # before training started (compiling, restoring): nothing was saved by this run
        print("interrupted before the first update; nothing of this run was saved", file=sys.stderr, flush=True)
        return 130
    except RuntimeError as err:  # XLA's out-of-memory error, at compile (before the first update) or later
        from rlpar.tools import errors

        per_device = config.num_envs // max(len(devices), 1)
        fit = errors.out_of_memory(err, f"{config.num_envs} envs x {config.num_steps} steps "
                                        f"({per_device} envs per device)")
        if fit is None:
            raise
        return _fail(fit, 2)
    except Preempted as stop:
        print(preempted_line(stop), file=sys.stderr, flush=True)
        return EXIT_CODE
    except Interrupted as stop:
        saved = f"update {stop.checkpoint_update}" if stop.checkpoint_update is not None else "none"
        how = (f"; continue with: {_prog()} --resume {stop.run_dir}" if stop.run_dir and stop.checkpoint_update
               else "")
        print(f"interrupted at update {stop.update}; last checkpoint: {saved}{how}", file=sys.stderr, flush=True)
        return 130
    say(done_line(result, run_config, config), flush=True)
    return 0


def _header(spec, config, run_config: RunConfig, devices: list, processes: int) -> str:
    """The run's first line: ``rlpar: ppo on CartPole-v1, 1 cpu device(s), 8 envs x 128 steps, 488 updates``."""
    in_processes = f" in {processes} processes" if processes > 1 else ""
    return (f"rlpar: {spec.name} on {run_config.env}, {len(devices)} {devices[0].platform} device(s){in_processes}, "
            f"{config.num_envs} envs x {config.num_steps} steps, {config.num_updates} updates"
            + (f", run dir {run_config.run_dir}" if run_config.run_dir else ""))


def _dry_run(spec, config, run_config: RunConfig, resume_dir: str | None) -> int:
    """``--dry-run``: ``prepare.check`` (a ``ValueError`` for what a run would refuse), then the run's header line
    and what it would train; nothing compiles."""
    from rlpar.run import prepare

    plan = prepare.check(spec, config, run_config, resume=resume_dir is not None)
    print(_header(spec, config, run_config, plan.devices, 1), flush=True)
    for line in plan_lines(plan, config, run_config):
        print(f"  {line}")
    print("dry run: every check passed; nothing was compiled or written", flush=True)
    return 0


def plan_lines(plan, config, run_config: RunConfig, most: int = 8) -> list[str]:
    """What a dry run says the run would train, one item a line."""
    from rlpar.run.progress import format_values

    slots, steps = plan.slots, config.num_updates * config.batch_size
    members = slots.count // run_config.num_seeds
    how = (f"{members} member(s) x {run_config.num_seeds} seed(s)" if slots.hparams
           else f"{run_config.num_seeds} seed(s)")
    lines = [f"train: {slots.count} slot(s) ({how}) in one program, {steps:,} env steps each"
             + (f", {steps * slots.count:,} in all" if slots.count > 1 else "")]
    if slots.hparams:
        spaces = ", ".join(f"{name} {_space(space)}" for name, space in slots.spaces.items())
        drawn = f"{run_config.population} members drawn from " if run_config.population else "the grid of "
        lines.append(f"members: {drawn}{spaces}")
        described = slots.describe()[::run_config.num_seeds]  # one slot per member
        lines += [f"member {i}: {format_values({k: v for k, v in d.items() if k not in ('slot', 'seed_index')})}"
                  for i, d in enumerate(described[:most])]
        if len(described) > most:
            lines.append(f"... and {len(described) - most} more member(s)")
    if plan.pbt is not None:
        lines.append(f"PBT: a round every {plan.pbt.interval} updates, the bottom {plan.pbt.quantile:g} of the "
                     f"members copy a top one (fitness {plan.pbt.fitness}, resample {plan.pbt.resample:g})")
    every = run_config.eval_interval(config.num_updates)
    lines.append(f"evaluation: every {every} updates and at the end, {run_config.eval_episodes} greedy episodes"
                 if every else "evaluation: none")
    if run_config.population_devices > 1:
        per_group = len(plan.devices) // run_config.population_devices
        lines.append(f"layout: {run_config.population_devices} device groups x {per_group} device(s), "
                     f"{slots.count // run_config.population_devices} slot(s) each ({run_config.device_backend})")
    if run_config.coordinator:
        who = ("the processes found in the environment" if run_config.coordinator == "auto"
               else f"process {run_config.process_id} of {run_config.num_processes}")
        lines.append(f"multi-process: would join {run_config.coordinator} as {who} (not joined in a dry run; "
                     "checked on this process's devices)")
    if plan.resume_from is not None and plan.resume_from >= config.num_updates:
        lines.append(f"resume: the run in {run_config.run_dir} is finished (update {plan.resume_from} of "
                     f"{config.num_updates}): nothing to resume")
    elif plan.resume_from is not None:
        lines.append(f"resume: from the checkpoint of update {plan.resume_from} in {run_config.run_dir}")
    elif run_config.run_dir:
        saves = (f"a checkpoint every {run_config.checkpoint_every} updates" if run_config.checkpoint_every
                 else "no checkpoints")
        lines.append(f"run dir: {run_config.run_dir} (config.json, metrics.jsonl, {saves})")
    else:
        lines.append("run dir: none (nothing would be written)")
    return lines


def _space(space) -> str:
    if space.kind == "list":
        return ",".join(f"{v:g}" for v in space.values)
    return f"{'log:' if space.kind == 'log' else ''}{space.low:g}..{space.high:g}"


def preempted_line(stop) -> str:
    """What a run stopped by SIGTERM or SIGUSR1 prints: where it stopped and how to continue."""
    if stop.compiling and stop.checkpoint_update is None:
        return f"preempted while compiling, before the first update ({stop.signal_name}); nothing to save yet"
    if stop.compiling:
        return (f"preempted while compiling ({stop.signal_name}); newest checkpoint: update {stop.checkpoint_update}; "
                f"continue with: {_prog()} --resume {stop.run_dir}")
    if stop.checkpoint_update is None:
        why = "no --run-dir" if not stop.run_dir else "checkpoints are off (--checkpoint-every 0)"
        return f"preempted at update {stop.update} ({stop.signal_name}); nothing saved: {why}"
    saved = ("checkpoint saved" if stop.checkpoint_update == stop.update
             else f"newest checkpoint: update {stop.checkpoint_update}")
    return f"preempted at update {stop.update}; {saved}; continue with: {_prog()} --resume {stop.run_dir}"


def _slots(run_config: RunConfig, config):
    from rlpar.core import seeds

    return seeds.make_slots(run_config.num_seeds, run_config.sweep, search=run_config.search,
                            population=run_config.population, seed=config.seed)


def _slot_labels(run_config: RunConfig, config) -> list[str] | None:
    from rlpar.run import progress

    if run_config.search:  # members are many and their values long: the progress line shows the best one
        return progress.MEMBERS
    slots = _slots(run_config, config)
    return progress.slot_labels(slots.describe()) if slots.count > 1 else None


def done_line(result, run_config: RunConfig, config) -> str:
    from rlpar.run.progress import final_evaluation, recent_returns

    total_s = sum(r["time_s"] for r in result.metrics)
    slots = _slots(run_config, config)
    steps = result.metrics[-1]["env_steps"] if result.metrics else 0
    all_steps = steps * slots.count  # every slot's steps, as the chunk lines and timing.jsonl count them
    startup = [r["startup_s"] for r in result.metrics if "startup_s" in r][-1:]  # this process's
    startup_s = f", {startup[0]:.1f}s from process start to the first update" if startup else ""
    labels = _slot_labels(run_config, config)
    evaluation = final_evaluation(result.metrics, labels, run_config.eval_episodes)
    evaluation = f"; {evaluation}" if evaluation else ""
    return (f"done: {all_steps:,} env steps in {total_s:.1f}s ({all_steps / max(total_s, 1e-9):,.0f} sps) "
            f"+ {result.compile_s:.1f}s compile{startup_s}; mean return of the last logged episodes "
            f"{recent_returns(result.metrics, labels)}{evaluation}{_best_member(result.metrics, run_config)}")


def _best_member(records: list[dict], run_config: RunConfig) -> str:
    """``"; best member 2 (ranked at the last PBT round): lr=0.00256, ent_coef=0.00764"`` for a population run."""
    from rlpar.core import population
    from rlpar.run.progress import format_values

    best = population.best_member(records) if run_config.search else None
    if best is None:
        return ""
    how = ("ranked at the last PBT round" if population.rounds_of(records) else
           "by its last greedy evaluation" if any("eval/episode_return" in s for s in records[-1]["slots"]) else
           "by its recent training return")
    return f"; best member {best} ({how}): {format_values(records[-1]['slots'][best].get('hparams', {}))}"


def _run_with_progress(spec, config, run_config: RunConfig, resume_dir: str | None, say):
    """``runner.run`` with the progress display on the primary process (none on the others)."""
    from rlpar.core import hosts
    from rlpar.run.progress import ProgressDisplay
    from rlpar.run.runner import Hooks, run

    if not hosts.is_primary():
        return run(spec, config, run_config, resume=resume_dir is not None)
    start = resume.updates_done(resume_dir)
    with ProgressDisplay(config.num_updates, config.batch_size, start_update=start,
                         slot_labels=_slot_labels(run_config, config)) as show:
        def on_status(event: str, info: dict) -> None:
            if event == "restoring":
                say(f"restoring the newest checkpoint of {info['run_dir']} ...", flush=True)
            elif event == "resumed" and info["update"] >= config.num_updates:
                say(f"the run is finished (update {info['update']} of {config.num_updates}, checkpoint "
                    f"{info['checkpoint']}): nothing to resume", flush=True)
            elif event == "resumed":
                say(f"resumed from update {info['update']} (checkpoint {info['checkpoint']})", flush=True)
            elif event == "compiling":
                show.compiling()
            elif event == "still compiling":
                show.still_compiling(info["programs"], info["seconds"])
            elif event == "compiled":
                show.compiled(info["seconds"], info.get("cached"))

        return run(spec, config, run_config, hooks=Hooks(on_log=show, on_status=on_status,
                                                         started_at=process_started()),
                   resume=resume_dir is not None)


def console() -> None:
    """The ``rlpar-train`` command and ``python -m rlpar.train``: ``main``, then ``end_process`` with its exit code."""
    end_process(main())


def end_process(code: int) -> NoReturn:
    """Exit with ``code`` once everything is written: the other non-daemon threads joined (as the interpreter would),
    but for a compile that Ctrl-C or a signal abandoned (``rlpar.run.compiling.CompileThread``: it writes nothing),
    ``atexit`` handlers run, output flushed; then ``os._exit``, which skips the interpreter's teardown of a thousand
    modules and of XLA's runtime, a noticeable part of a short command (docs/benchmarks.md, "The CLI ends
    with os._exit")."""
    from rlpar.run.compiling import CompileThread

    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon and not isinstance(thread, CompileThread):
            thread.join()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    console()
