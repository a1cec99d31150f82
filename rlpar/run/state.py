"""The run dir's checkpoints and logs: open them (refusing to mix two runs), restore the newest checkpoint of a
resumed run and its records, save a checkpoint, and stop on a non-finite chunk naming the last good one.

It imports ``run_config`` (for the settings' type) and the engine's checkpoint, guard, logs, parallel and rundir.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np

from rlpar.core import hosts, parallel
from rlpar.run import checkpoint, guard, logs, rundir
from rlpar.run.config import RunConfig
from rlpar.run.logs import RunLogger


# Settings a resumed run must share with the checkpoint for the result to be bit-identical.
_RESUME_MUST_MATCH_RUN = ("env", "log_every", "backend", "num_seeds", "sweep", "eval_every", "eval_episodes", "search",
                          "population", "pbt", "pbt_interval", "pbt_quantile", "pbt_resample", "pbt_fitness",
                          "population_devices")


def open_checkpoints(run_config: RunConfig, resume: bool) -> checkpoint.Checkpoints | None:
    """The run's checkpoint directory, or ``None`` when it writes none; refuses to mix two runs in one directory.

    Every process of a multi-process run opens it (process 0 as the writer) and they check together that they see
    the same checkpoints, so that all of them resume the same one or all refuse with the same error.
    """
    checkpoints = checkpoints_found(run_config, resume)
    if checkpoints is None or (run_config.checkpoint_every == 0 and not resume):
        return None
    checkpoint.require_orbax()
    checkpoints.discard_uncommitted()  # orbax temporaries and unmarked steps of a killed run
    return checkpoints


def checkpoints_found(run_config: RunConfig, resume: bool) -> checkpoint.Checkpoints | None:
    """The run dir's checkpoints (``None`` without a run dir), read only: ``ValueError`` if a new run would mix with
    an earlier one's, or a resumed one has none to continue from."""
    if resume and not run_config.run_dir:
        raise ValueError("resume needs run_dir: the directory of the run to continue")
    if not run_config.run_dir:
        return None
    run_dir = Path(run_config.run_dir)
    checkpoints = checkpoint.Checkpoints(run_dir / rundir.CHECKPOINTS, writer=hosts.is_primary())
    steps = checkpoints.committed_steps()
    _check_processes_see_same(checkpoints, steps)
    if resume and not steps:
        found = ", ".join(p.name for p in checkpoints.uncommitted())
        raise checkpoint.CheckpointError(
            f"no complete checkpoint in {checkpoints.directory}" + (f" (incomplete: {found})" if found else "")
            + ": nothing to resume; start a new run without --resume"
        )
    if not resume and steps:
        raise ValueError(
            f"run dir {str(run_dir)!r} already holds checkpoints (updates {', '.join(map(str, steps))}) of an earlier "
            f"run: continue it with --resume {run_dir}, or choose another --run-dir"
        )
    return checkpoints


def _check_processes_see_same(checkpoints: checkpoint.Checkpoints, steps: list[int]) -> None:
    latest = hosts.all_processes_agree([steps[-1] if steps else -1, len(steps)])
    if any(seen != latest[0] for seen in latest):
        views = "; ".join(f"process {i}: " + (f"{n} checkpoint(s), newest update {last}" if n else "no checkpoints")
                          for i, (last, n) in enumerate(latest))
        raise checkpoint.CheckpointError(
            f"the processes see different checkpoints in {checkpoints.directory} ({views}): in a multi-process run "
            "the run dir must be on a filesystem every process sees, at the same path"
        )


def check_every_process_sees(config_file: Path) -> None:
    """Multi-process runs: ``CheckpointError`` in every process unless all of them see the ``config.json`` that
    process 0 has just written; a run dir on a disk of process 0's host alone could be saved to but not resumed."""
    if jax.process_count() == 1:
        return
    hosts.all_processes_agree([0])  # a barrier: process 0 has written the file
    seen = hosts.all_processes_agree([int(config_file.is_file())])
    blind = [i for i, (ok,) in enumerate(seen) if not ok]
    if blind:
        raise checkpoint.CheckpointError(
            f"process(es) {', '.join(map(str, blind))} cannot see {config_file}, which process 0 wrote: in a "
            "multi-process run the run dir must be on a filesystem every process sees, at the same path (or pass "
            "--checkpoint-every 0 to write no checkpoints)"
        )


def restore(checkpoints: checkpoint.Checkpoints, meta: dict, abstract_state: Any) -> checkpoint.Restored:
    """The newest complete checkpoint, read to host memory and checked to belong to a run like this one."""
    import json

    step = checkpoints.latest()
    current = json.loads(json.dumps(meta, default=rundir.json_default))
    saved = checkpoints.read_meta(step)  # settings first: another setting may change the state's shape
    pairs = [(name, saved.get(name), current[name]) for name in ("agent", "num_devices")]
    saved_config = rundir.config_values(saved.get("config", {}), current["config"])
    pairs += [(name, saved_config.get(name), value) for name, value in current["config"].items()]
    saved_run = {**rundir.RUN_FIELDS_ADDED, **saved.get("run", {})}
    pairs += [(name, saved_run.get(name), current["run"][name]) for name in _RESUME_MUST_MATCH_RUN]
    for name, was, now in pairs:
        if was != now:
            raise checkpoint.CheckpointError(
                f"checkpoint {checkpoints.path(step)} was written with {name}={was!r} but this run has {name}={now!r}: "
                "a resumed run must keep the settings of its checkpoint (python -m rlpar.train --resume RUN_DIR "
                "reads them from config.json)"
            )
    template = jax.tree.map(lambda a: np.zeros(a.shape, a.dtype), abstract_state)
    return checkpoints.restore(step, template)


def open_logger(run_dir: Path | None, run_config: RunConfig, meta: dict,
                restored: checkpoint.Restored | None) -> RunLogger | None:
    """A fresh run writes config.json and starts its logs; a resumed one cuts its logs back to the checkpoint."""
    if run_dir is None:
        return None
    run_dir.mkdir(parents=True, exist_ok=True)
    if restored is None:
        rundir.write_meta(run_dir, meta)
    return RunLogger(run_dir, tensorboard=run_config.tensorboard, wandb=run_config.wandb,
                     wandb_project=run_config.wandb_project, wandb_config=meta,
                     resume_at=restored.position if restored is not None else None)


def previous_records(logger: RunLogger | None, run_config: RunConfig, restored: checkpoint.Restored) -> list[dict]:
    """The records up to the checkpoint; processes other than 0 read them from process 0's files."""
    if logger is not None:
        return list(logger.previous_records)
    return logs.read_records(run_config.run_dir, restored.position)


def stop_if_nonfinite(finite: np.ndarray, first_update: int, checkpoints: checkpoint.Checkpoints | None) -> None:
    """Raise ``NonFiniteError`` naming the first update of the chunk whose loss or parameters are not finite."""
    bad = guard.first_nonfinite_update(finite, first_update)
    if bad is None:
        return
    last = checkpoints.latest() if checkpoints is not None else None
    where = (f"the last good checkpoint is {checkpoints.path(last)} (update {last})" if last is not None
             else "no checkpoint was written before it")
    raise guard.NonFiniteError(
        f"non-finite loss or parameters at update {bad}: training stopped, nothing from update {first_update} on "
        f"was logged or saved, and {where}. Try a lower --lr or --max-grad-norm, or check the env's rewards and "
        "observations"
    )


def save_checkpoint(checkpoints: checkpoint.Checkpoints, logger: RunLogger | None, state: Any, updates_done: int,
                    meta: dict, groups: int = 1) -> None:
    """Every process calls this at the same point; ``logger`` is ``None`` in all but the writing process."""
    rows = parallel.rows_to_host(state, groups)  # in a multi-process run: a collective gathering every process's rows
    position = None  # not the writer: it joins orbax's save, whose files (and position) only process 0 writes
    if logger is not None:
        logger.sync()  # the checkpoint records the log files' lengths: they must be on disk first
        position = logger.position(updates_done)
    checkpoints.save(updates_done, rows, position, meta)
