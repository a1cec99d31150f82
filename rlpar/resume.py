"""``python -m rlpar.train [AGENT] --resume RUN_DIR``: continue a run with the settings in its ``config.json``.

The resume flag is expanded into the command line that started the run (every run and agent flag, from
``config.json``, with ``--devices`` set to the device count the run used), so the usual flag parsing, device set-up
and validation apply unchanged; ``runner.run(..., resume=True)`` then restores the newest complete checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from rlpar import cli, rundir

FLAG = "--resume"


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
    name that is not the run's, and for any other flag (the settings come from ``config.json`` only).
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
    if rest:
        raise ValueError(f"{FLAG} takes every setting from {Path(run_dir) / rundir.CONFIG}; drop {' '.join(rest)}")
    # No agent or env import here: the device flags must be known before anything starts JAX's backends.
    run_values = {**meta["run"], "run_dir": str(run_dir), "devices": meta["num_devices"]}
    return ResumeArgs([agent, *values_to_argv(run_values), *values_to_argv(meta["config"])], str(run_dir))


def updates_done(run_dir: str | None) -> int:
    """Updates done by the newest complete checkpoint in ``run_dir`` (0 for none, or no run dir)."""
    from rlpar.checkpoint import Checkpoints

    if not run_dir:
        return 0
    return Checkpoints(Path(run_dir) / rundir.CHECKPOINTS).latest() or 0
