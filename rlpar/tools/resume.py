"""``python -m rlpar.train [AGENT] --resume RUN_DIR``: continue a run with the settings in its ``config.json``.

The resume flag is expanded into the command line that started the run (every run and agent flag, from
``config.json``, with ``--devices`` set so that the run keeps its global device count), so the usual flag parsing,
device set-up and validation apply unchanged; ``runner.run(..., resume=True)`` then restores the newest complete
checkpoint.

Only where the run executes may change on resume: the multi-process flags (``PROCESS_FIELDS``), since a resumed
cluster job gets a new coordinator address and each process its own ``--process-id``. A checkpoint holds every
device's rows, so a run of 2 processes x 2 devices may also continue as 1 process x 4 devices, or the reverse.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from rlpar.run import rundir
from rlpar.tools import cli

FLAG = "--resume"
PROCESS_FIELDS = ("coordinator", "num_processes", "process_id", "init_timeout_s", "heartbeat_timeout_s")


class ResumeArgs(NamedTuple):
    argv: list[str]  # the equivalent full command line (agent first)
    run_dir: str | None  # the run to continue; None when --resume was not given


def values_to_argv(values: dict) -> list[str]:
    """Flags that ``cli.build_dataclass`` turns back into these field values (as ``config.json`` stores them)."""
    argv = []
    for name, value in values.items():
        flag = cli.flag_name(name)
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, (list, tuple)):
            argv += [flag, ",".join(str(v) for v in value)]
        else:
            argv += [flag, str(value)]  # str(float) round-trips exactly
    return argv


def _split_resume_flag(argv: list[str]) -> tuple[str | None, list[str]]:
    """``(RUN_DIR, the other arguments)`` from ``argv``; ``(None, argv)`` without the flag."""
    for i, arg in enumerate(argv):
        if arg == FLAG:
            if i + 1 >= len(argv):
                raise ValueError(f"{FLAG} needs a run dir: {FLAG} RUN_DIR")
            return argv[i + 1], argv[:i] + argv[i + 2:]
        if arg.startswith(FLAG + "="):
            return arg.split("=", 1)[1], argv[:i] + argv[i + 1:]
    return None, argv


def expand(argv: list[str]) -> ResumeArgs:
    """Replace ``[AGENT] --resume RUN_DIR`` by the run's full command line; other command lines pass unchanged.

    Raises ``ValueError`` for a run dir without a readable ``config.json`` of this rlpar's format, for an agent
    name that is not the run's, for a process count that does not divide the run's device count, and for any flag
    but the multi-process ones (the other settings come from ``config.json`` only).
    """
    run_dir, rest = _split_resume_flag(argv)
    if run_dir is None:
        return ResumeArgs(argv, None)
    meta = rundir.read_meta(run_dir)
    agent = meta.get("agent")
    if rest and not rest[0].startswith("-"):
        if rest[0] != agent:
            raise ValueError(f"agent {rest[0]!r}: the run in {run_dir} trained {agent!r}")
        rest = rest[1:]
    processes, rest = _process_flags(rest)
    if rest:
        raise ValueError(f"{FLAG} takes every setting from {Path(run_dir) / rundir.CONFIG} (only the multi-process "
                         f"flags may be given again); drop {' '.join(rest)}")
    # No agent or env import here: the device flags must be known before anything starts JAX's backends.
    single_process = {"coordinator": "", "num_processes": 1, "process_id": 0}  # unless the flags say otherwise
    run_values = {**rundir.RUN_FIELDS_ADDED, **meta["run"], **single_process, **processes, "run_dir": str(run_dir)}
    num_devices, num_processes = meta["num_devices"], run_values["num_processes"]
    if run_values["coordinator"] != "auto":  # with "auto" the scheduler says how many processes; run.py checks
        if num_devices % num_processes:
            raise ValueError(f"num_processes={num_processes}: the run in {run_dir} used {num_devices} devices, which "
                             f"{num_processes} processes cannot share equally; use a divisor of {num_devices}")
        run_values["devices"] = num_devices // num_processes
    else:
        run_values["devices"] = meta["run"]["devices"]
    config_values = rundir.config_values(meta["config"])  # a field the run predates: what it ran with
    return ResumeArgs([agent, *values_to_argv(run_values), *values_to_argv(config_values)], str(run_dir))


def _process_flags(argv: list[str]) -> tuple[dict, list[str]]:
    """The multi-process flags in ``argv`` as ``{field: value}``, and the arguments left over."""
    import argparse

    from rlpar.run.runner import RunConfig

    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    cli.add_dataclass_flags(parser, RunConfig, "run")
    known = {cli.flag_name(name) for name in PROCESS_FIELDS}
    wanted, rest, i = [], [], 0
    while i < len(argv):
        flag = argv[i].split("=", 1)[0]
        takes = 1 if flag not in known else 1 if "=" in argv[i] else 2  # --flag=value, or --flag value
        (wanted if flag in known else rest).extend(argv[i:i + takes])
        i += takes
    try:
        args = parser.parse_args(wanted)
    except argparse.ArgumentError as err:
        raise ValueError(str(err)) from None
    values = {name: getattr(args, f"RunConfig.{name}") for name in PROCESS_FIELDS}
    return {name: value for name, value in values.items() if value is not None}, rest


def updates_done(run_dir: str | None) -> int:
    """Updates done by the newest complete checkpoint in ``run_dir`` (0 for none, or no run dir)."""
    from rlpar.run.checkpoint import Checkpoints

    if not run_dir:
        return 0
    return Checkpoints(Path(run_dir) / rundir.CHECKPOINTS).latest() or 0
