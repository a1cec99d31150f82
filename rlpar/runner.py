"""The host loop: validate, build the mapped program, compile once, run chunks of updates, log between them.

Between calls the host only reads small per-update metrics; environments, acting and learning stay on the devices.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import numpy as np

from rlpar import checkpoint, guard, logs, parallel, rundir, seeds
from rlpar.logs import RunLogger

RUN_FORMAT_VERSION = 1


def _f(default, help: str):  # noqa: A002
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class RunConfig:
    """Where and how a run executes (not what it learns). Each field is a CLI flag too."""

    env: str = _f("CartPole-v1", "environment id (gymnax id or probe id)")
    devices: int = _f(0, "local devices to use; 0 = all. On a CPU-only host the CLI creates this many CPU devices")
    run_dir: str = _f("", "directory for config.json and metrics.jsonl; empty = write nothing")
    log_every: int = _f(10, "updates per compiled call; one log line and metrics.jsonl record per call")
    checkpoint_every: int = _f(100, "with --run-dir: save a checkpoint after the chunk that reaches each multiple "
                                    "of this many updates, and at the end; 0 = no checkpoints")
    tensorboard: bool = _f(False, "with --run-dir: also write TensorBoard event files to RUN_DIR/tensorboard")
    num_seeds: int = _f(1, "independent trainings (seeds) vmapped in one compiled program; metrics keep each one")
    sweep: str = _f("", "vmap over a hyperparameter too: FIELD=V1,V2,... (FIELD: " + ", ".join(seeds.SWEEPABLE)
                        + "); runs num_seeds x values slots")
    backend: str = _f("pmap", "device backend: pmap, or shard_map (jax.jit over jax.shard_map on a 1-D device mesh)")
    # Multi-process runs (see README "Past one machine"); every process gets the same flags except process_id.
    coordinator: str = _f("", "multi-process: HOST:PORT of process 0's coordinator; 'auto' = read the cluster's "
                              "environment (SLURM, Open MPI, JAX_COORDINATOR_ADDRESS); empty = single process")
    num_processes: int = _f(1, "multi-process: processes in the run (ignored with --coordinator auto)")
    process_id: int = _f(0, "multi-process: this process's rank, 0..num_processes-1 (ignored with --coordinator auto)")
    init_timeout_s: int = _f(300, "multi-process: seconds to wait for every process to join")
    heartbeat_timeout_s: int = _f(100, "multi-process: seconds of silence after which a process is declared dead "
                                       "and the others exit with an error")

    def validate(self) -> "RunConfig":
        if not isinstance(self.devices, int) or self.devices < 0:
            raise ValueError(f"devices={self.devices!r}: must be a positive integer, or 0 for all local devices")
        if not isinstance(self.log_every, int) or self.log_every <= 0:
            raise ValueError(f"log_every={self.log_every!r}: must be a positive integer")
        if not isinstance(self.checkpoint_every, int) or isinstance(self.checkpoint_every, bool) \
                or self.checkpoint_every < 0:
            raise ValueError(f"checkpoint_every={self.checkpoint_every!r}: must be a positive integer "
                             "(updates between checkpoints), or 0 for no checkpoints")
        seeds.make_slots(self.num_seeds, self.sweep)  # raises ValueError naming a bad num_seeds or sweep
        if self.backend not in parallel.BACKENDS:
            raise ValueError(f"backend={self.backend!r}: must be one of {', '.join(parallel.BACKENDS)}")
        for name in ("num_processes", "init_timeout_s", "heartbeat_timeout_s"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name}={value!r}: must be a positive integer")
        if not isinstance(self.process_id, int) or not 0 <= self.process_id < self.num_processes:
            raise ValueError(f"process_id={self.process_id!r}: must be in 0..{self.num_processes - 1} "
                             f"(num_processes={self.num_processes})")
        if self.num_processes > 1 and not self.coordinator:
            raise ValueError(f"num_processes={self.num_processes} needs --coordinator HOST:PORT (or auto)")
        return self


class AgentSpec(NamedTuple):
    """What the runner needs from an agent family."""

    name: str
    config_cls: type
    # make(config, env, env_params, num_local_envs, axis_name) -> object with .init(key_params, key_device) and
    # .update(state) -> (state, metrics)
    make: Callable[..., Any]


class TrainResult(NamedTuple):
    params: Any  # final parameters (host numpy pytree; identical on every device)
    metrics: list[dict]  # one dict per logged chunk of updates, as in metrics.jsonl
    state: Any  # final per-device training state (on the devices)
    compile_s: float  # seconds spent compiling the update program


def _chunk(update: Callable, length: int) -> Callable:
    """``length`` updates in one ``lax.scan``; per-update metrics stacked ``[length]``."""

    def run(state):
        return jax.lax.scan(lambda s, _: update(s), state, None, length=length)

    return run


def _episode_and_loss_stats(raw: dict) -> dict:
    """Episode means (weighted by episodes finished) and loss means over everything in ``raw``."""
    count = float(np.sum(raw["episode/count"]))
    stats = {
        "episodes": int(count),
        "episode_return": float(np.sum(raw["episode/return_sum"]) / count) if count else None,
        "episode_length": float(np.sum(raw["episode/length_sum"]) / count) if count else None,
    }
    for name, values in raw.items():
        if not name.startswith("episode/"):
            stats[name] = float(np.mean(values))
    return stats


def summarize(raw: dict, *, update: int, env_steps: int, seconds: float, steps_in_chunk: int) -> dict:
    """Turn a chunk's stacked per-update metrics (``[length]``, or ``[length, S]`` with ``S`` vmapped slots) into
    one log record. With slots, the top-level values pool all slots and ``"slots"`` lists each slot's own."""
    record = {
        "update": update,
        "env_steps": env_steps,
        "time_s": round(seconds, 4),
        "sps": steps_in_chunk / seconds if seconds > 0 else float("nan"),
    }
    record.update(_episode_and_loss_stats(raw))
    if np.ndim(raw["episode/count"]) == 2:
        num_slots = np.shape(raw["episode/count"])[1]
        record["slots"] = [_episode_and_loss_stats({k: np.asarray(v)[:, i] for k, v in raw.items()})
                           for i in range(num_slots)]
    return record


def format_record(record: dict, num_updates: int) -> str:
    ret = record["episode_return"]
    ret_s = f"{ret:9.2f}" if ret is not None else "      n/a"
    return (
        f"update {record['update']:>6}/{num_updates}  steps {record['env_steps']:>11,}  "
        f"sps {record['sps']:>10,.0f}  return {ret_s}  "
        f"loss {record.get('loss/total', float('nan')):8.4f}"
    )


def run(
    agent: AgentSpec,
    config,
    run_config: RunConfig = RunConfig(),
    *,
    on_log: Callable[[dict], None] | None = None,
    env_kwargs: dict | None = None,
    resume: bool = False,
) -> TrainResult:
    """Train ``agent`` with ``config`` on ``run_config.env``; returns final params and per-chunk metrics.

    With ``run_config.run_dir`` it writes config.json, metrics.jsonl, timing.jsonl and checkpoints there (see
    ``rlpar.rundir``). ``resume=True`` continues the run in ``run_dir`` from its newest complete checkpoint instead
    (``config`` and ``run_config`` must match it, see ``_restore``); the metrics and parameters it ends with are
    bit-identical to an uninterrupted run's. Raises ``ValueError`` (``CheckpointError``) for a bad run dir before
    compiling, and ``guard.NonFiniteError`` if the loss or parameters stop being finite.
    """
    import envs

    run_config.validate()
    parallel.init_distributed(
        run_config.coordinator, run_config.num_processes, run_config.process_id,
        init_timeout_s=run_config.init_timeout_s, heartbeat_timeout_s=run_config.heartbeat_timeout_s,
    )
    devices = parallel.select_devices(run_config.devices)  # in a multi-process run: every process's devices
    num_devices = len(devices)
    config.validate(num_devices)
    slots = seeds.make_slots(run_config.num_seeds, run_config.sweep)
    if slots.field is not None:
        seeds.validate_slots(config, slots, num_devices)
    make = agent.make if slots.count == 1 and slots.field is None else seeds.vmap_slots(agent.make, slots)
    env, env_params = envs.make(run_config.env, **(env_kwargs or {}))
    num_local_envs = config.num_envs // num_devices
    num_updates = config.num_updates

    def make_init(axis_name):
        return make(config, env, env_params, num_local_envs, axis_name).init

    def make_step(length):
        return lambda axis_name: _chunk(
            guard.with_finite_flag(make(config, env, env_params, num_local_envs, axis_name).update, axis_name),
            length,
        )

    # Only the primary process (process 0) writes files; the others compute the same records, and in a multi-process
    # run join every checkpoint save and restore (see rlpar.checkpoint).
    run_dir = Path(run_config.run_dir) if run_config.run_dir and parallel.is_primary() else None
    meta = rundir.make_meta(agent.name, config, run_config, devices, RUN_FORMAT_VERSION)
    if slots.count > 1:
        meta["slots"] = slots.describe()
    init = parallel.map_init(make_init, devices, run_config.backend)
    key = jax.random.PRNGKey(config.seed)
    key_params, key_devices = jax.random.split(key)

    # Everything that can reject the run dir (no or a corrupt checkpoint, other settings) happens before compiling.
    checkpoints = _open_checkpoints(run_config, resume)
    abstract_state = parallel.state_shapes(make_init, devices, key_params, key_devices) if resume else None
    restored = _restore(checkpoints, meta, abstract_state) if resume else None
    logger = _open_logger(run_dir, run_config, meta, restored)
    if checkpoints is not None and restored is None:
        _check_every_process_sees(Path(run_config.run_dir) / rundir.CONFIG)
    state = init(key_params, key_devices)
    if restored is not None:
        state = parallel.rows_from_host(restored.state, devices)

    # Compile once per distinct chunk length still to run (at most two: log_every and the remainder).
    done_updates = restored.position.updates_done if restored is not None else 0
    lengths = chunk_lengths(num_updates, run_config.log_every)
    lengths = lengths[_chunks_done(lengths, done_updates):]  # a resumed run continues after its checkpoint
    compiled, compile_s = {}, 0.0
    for length in sorted(set(lengths)):
        start = time.perf_counter()
        compiled[length] = parallel.compile_step(make_step(length), devices, state, backend=run_config.backend)
        compile_s += time.perf_counter() - start

    records = []
    if restored is not None:  # the records up to the checkpoint; other processes read them from process 0's files
        records = list(logger.previous_records) if logger is not None else logs.read_records(
            run_config.run_dir, restored.position)
    try:
        for length in lengths:
            start = time.perf_counter()
            state, raw = compiled[length](state)
            raw = parallel.to_host(raw)  # waits for the devices
            seconds = time.perf_counter() - start
            _stop_if_nonfinite(raw.pop(guard.FINITE_KEY), done_updates + 1, checkpoints)
            before, done_updates = done_updates, done_updates + length
            record = summarize(
                raw,
                update=done_updates,
                env_steps=done_updates * config.batch_size,
                seconds=seconds,
                steps_in_chunk=length * config.batch_size * slots.count,  # sps counts every slot's steps
            )
            records.append(record)
            if logger is not None:
                logger.write(record)
            if on_log is not None:
                on_log(record)
            checkpoint.kill_if_test_asks(done_updates)
            if checkpoints is not None and _checkpoint_due(before, done_updates, run_config.checkpoint_every,
                                                           num_updates):
                _save_checkpoint(checkpoints, logger, state, done_updates, meta)
    finally:
        if logger is not None:
            logger.close()
    return TrainResult(parallel.first_replica(state.params), records, state, compile_s)


def chunk_lengths(num_updates: int, log_every: int) -> list[int]:
    """Updates per compiled call: ``log_every`` each, then the remainder; e.g. (25, 10) -> [10, 10, 5]."""
    lengths = [log_every] * (num_updates // log_every)
    if num_updates % log_every:
        lengths.append(num_updates % log_every)
    return lengths


def _chunks_done(lengths: list[int], updates_done: int) -> int:
    """How many of ``lengths`` a run ``updates_done`` updates in has finished (it must sit on a chunk boundary)."""
    ends = [0] + [int(e) for e in np.cumsum(lengths)]
    if updates_done not in ends:
        raise checkpoint.CheckpointError(f"update {updates_done} is not a chunk boundary of this run's log_every")
    return ends.index(updates_done)


def _checkpoint_due(before: int, after: int, every: int, num_updates: int) -> bool:
    """Save after the chunk of updates ``(before, after]`` if it reached a multiple of ``every`` or ended the run."""
    return after == num_updates or (every > 0 and after // every > before // every)


# Settings a resumed run must share with the checkpoint for the result to be bit-identical.
_RESUME_MUST_MATCH_RUN = ("env", "log_every", "backend", "num_seeds", "sweep")


def _open_checkpoints(run_config: RunConfig, resume: bool) -> checkpoint.Checkpoints | None:
    """The run's checkpoint directory, or ``None`` when it writes none; refuses to mix two runs in one directory.

    Every process of a multi-process run opens it (process 0 as the writer) and they check together that they see
    the same checkpoints, so that all of them resume the same one or all refuse with the same error.
    """
    if resume and not run_config.run_dir:
        raise ValueError("resume needs run_dir: the directory of the run to continue")
    if not run_config.run_dir:
        return None
    run_dir = Path(run_config.run_dir)
    checkpoints = checkpoint.Checkpoints(run_dir / rundir.CHECKPOINTS, writer=parallel.is_primary())
    steps = checkpoints.committed_steps()
    latest = parallel.all_processes_agree([steps[-1] if steps else -1, len(steps)])
    if any(seen != latest[0] for seen in latest):
        views = "; ".join(f"process {i}: " + (f"{n} checkpoint(s), newest update {last}" if n else "no checkpoints")
                          for i, (last, n) in enumerate(latest))
        raise checkpoint.CheckpointError(
            f"the processes see different checkpoints in {checkpoints.directory} ({views}): in a multi-process run "
            "the run dir must be on a filesystem every process sees, at the same path"
        )
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
    if run_config.checkpoint_every == 0 and not resume:
        return None
    checkpoint.require_orbax()
    checkpoints.discard_uncommitted()  # orbax temporaries and unmarked steps of a killed run
    return checkpoints


def _check_every_process_sees(config_file: Path) -> None:
    """Multi-process runs: ``CheckpointError`` in every process unless all of them see the ``config.json`` that
    process 0 has just written; a run dir on a disk of process 0's host alone could be saved to but not resumed."""
    if jax.process_count() == 1:
        return
    parallel.all_processes_agree([0])  # a barrier: process 0 has written the file
    seen = parallel.all_processes_agree([int(config_file.is_file())])
    blind = [i for i, (ok,) in enumerate(seen) if not ok]
    if blind:
        raise checkpoint.CheckpointError(
            f"process(es) {', '.join(map(str, blind))} cannot see {config_file}, which process 0 wrote: in a "
            "multi-process run the run dir must be on a filesystem every process sees, at the same path (or pass "
            "--checkpoint-every 0 to write no checkpoints)"
        )


def _restore(checkpoints: checkpoint.Checkpoints, meta: dict, abstract_state: Any) -> checkpoint.Restored:
    """The newest complete checkpoint, read to host memory and checked to belong to a run like this one."""
    step = checkpoints.latest()
    template = jax.tree.map(lambda a: np.zeros(a.shape, a.dtype), abstract_state)
    restored = checkpoints.restore(step, template)
    current = json.loads(json.dumps(meta, default=rundir.json_default))
    saved = restored.meta
    pairs = [(name, saved.get(name), current[name]) for name in ("agent", "num_devices")]
    pairs += [(name, saved.get("config", {}).get(name), value) for name, value in current["config"].items()]
    pairs += [(name, saved.get("run", {}).get(name), current["run"][name]) for name in _RESUME_MUST_MATCH_RUN]
    for name, was, now in pairs:
        if was != now:
            raise checkpoint.CheckpointError(
                f"checkpoint {checkpoints.path(step)} was written with {name}={was!r} but this run has {name}={now!r}: "
                "a resumed run must keep the settings of its checkpoint (python -m rlpar.train --resume RUN_DIR "
                "reads them from config.json)"
            )
    return restored


def _open_logger(run_dir: Path | None, run_config: RunConfig, meta: dict,
                 restored: checkpoint.Restored | None) -> RunLogger | None:
    """A fresh run writes config.json and starts its logs; a resumed one cuts its logs back to the checkpoint."""
    if run_dir is None:
        return None
    run_dir.mkdir(parents=True, exist_ok=True)
    if restored is None:
        rundir.write_meta(run_dir, meta)
    return RunLogger(run_dir, tensorboard=run_config.tensorboard,
                     resume_at=restored.position if restored is not None else None)


def _stop_if_nonfinite(finite: np.ndarray, first_update: int, checkpoints: checkpoint.Checkpoints | None) -> None:
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


def _save_checkpoint(checkpoints: checkpoint.Checkpoints, logger: RunLogger | None, state: Any, updates_done: int,
                     meta: dict) -> None:
    """Every process calls this at the same point; ``logger`` is ``None`` in all but the writing process."""
    rows = parallel.rows_to_host(state)  # in a multi-process run: a collective gathering every process's rows
    position = None  # not the writer: it joins orbax's save, whose files (and position) only process 0 writes
    if logger is not None:
        logger.sync()  # the checkpoint records the log files' lengths: they must be on disk first
        position = logger.position(updates_done)
    checkpoints.save(updates_done, rows, position, meta)


def mean_recent_return(records: list[dict], last: int = 5) -> float:
    """Mean episode return over the last ``last`` logged chunks that finished an episode (weighted by episodes)."""
    recent = [r for r in records if r["episode_return"] is not None][-last:]
    episodes = sum(r["episodes"] for r in recent)
    if not episodes:
        return math.nan
    return sum(r["episode_return"] * r["episodes"] for r in recent) / episodes
