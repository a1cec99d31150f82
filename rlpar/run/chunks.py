"""The chunk loop: compile the run's chunk program (and its evaluation's, where that is a program of its own), then
run it chunk after chunk, logging each, evaluating and checkpointing when due, stopping on Ctrl-C (``Interrupted``)
or a scheduler's signal (``preemption.Preempted``).

It imports ``prepare`` (the prepared run's type), ``records`` (each chunk's record) and ``state`` (saving a
checkpoint, the non-finite stop), never ``build`` or ``runner``.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import numpy as np

from rlpar.core import episodes, hosts, parallel, platform, population, program, seeds
from rlpar.run import checkpoint, compile_cache, compiling, guard, preemption
from rlpar.run.config import RunConfig
from rlpar.run.logs import RunLogger
from rlpar.run.prepare import Prepared
from rlpar.run.records import add_members, summarize
from rlpar.run.state import save_checkpoint, stop_if_nonfinite


class Interrupted(Exception):
    """Ctrl-C during training: the run stopped at ``update``; ``checkpoint`` is the newest one saved (or None)."""

    def __init__(self, update: int, checkpoint_update: int | None, run_dir: str):
        super().__init__(f"interrupted at update {update}")
        self.update, self.checkpoint_update, self.run_dir = update, checkpoint_update, run_dir


class Hooks(NamedTuple):
    """What the host loop reports while it runs (all optional): the CLI's progress display listens. With
    ``started_at`` (a ``time.time()`` of the process start) the first chunk's record gets ``startup_s``."""

    on_log: Callable[[dict], None] | None = None  # each chunk's record
    on_status: Callable[[str, dict], None] | None = None  # ("compiling", {}), ("still compiling", {"programs",
    # "seconds"}) (rlpar.run.compiling), ("compiled", {"seconds"}), ("restoring", {"run_dir"}), ("resumed",
    # {"update", "checkpoint"})
    started_at: float | None = None


class Schedule(NamedTuple):
    """The chunks still to run and when to evaluate."""

    lengths: list[int]  # updates per chunk
    done: int  # updates done before the first of them
    eval_every: int  # evaluate after the chunk reaching each multiple of this, and at the end; 0: never
    seed: int  # the run's seed (evaluation keys: program.eval_key)


def chunk_control(schedule: Schedule, length: int, done: int, evaluate: bool) -> program.ChunkControl:
    return program.ChunkControl(updates=np.int32(length), evaluate=np.bool_(evaluate), updates_done=np.int32(done),
                                seed=np.uint32(schedule.seed))


class _Programs(NamedTuple):
    """The run's compiled programs: ``chunk(state, control) -> (state, metrics)``, and, where the evaluation is a
    program of its own (``platform.evaluation_in_chunk``) and the run evaluates, ``evaluation(state, control) ->
    ((), metrics)`` (else ``None``: the chunk evaluates when ``control.evaluate``)."""

    chunk: Callable
    evaluation: Callable | None = None

    def __call__(self, state, control, evaluate: bool):
        """One chunk, then its evaluation when ``evaluate``: ``(state, metrics)``, both still on the devices."""
        state, metrics = self.chunk(state, control)
        if evaluate and self.evaluation is not None:
            metrics = {**metrics, **self.evaluation(state, control)[1]}
        return state, metrics


def make_steps(prepared: Prepared, run_config: RunConfig, max_updates: int, evaluation_inside: bool):
    """``(make_chunk_step, make_evaluation_step)``, each ``axis_name -> per-device step`` as ``parallel.compile_step``
    takes it; the second ``None`` where the evaluation is a branch of the chunk."""

    def make_chunk_step(axis_name):
        built = prepared.make_program(axis_name)
        checked = guard.with_finite_flag(built.update, run_config.member_groups.axes(axis_name))
        built = built._replace(update=checked)
        return program.make_chunk(built if evaluation_inside else built._replace(evaluate=None), max_updates)

    def make_evaluation_step(axis_name):
        built = prepared.make_program(axis_name)
        if built.evaluate is None:
            return lambda state, control: ((), {})
        evaluation = program.make_evaluation(built)
        return lambda state, control: ((), evaluation(state, control))  # no state out: nothing copied or donated

    return make_chunk_step, None if evaluation_inside else make_evaluation_step


def bytes_per_device(state: Any, num_devices: int) -> int:
    """The bytes of one device's rows of ``state`` (arrays or ``jax.ShapeDtypeStruct`` leaves, ``[D, ...]``)."""
    total = sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(state))
    return total // num_devices


def compile_programs(prepared: Prepared, run_config: RunConfig, state: Callable[[], Any], schedule: Schedule,
                     max_updates: int, hooks: Hooks, lowered: Callable[[], None] | None = None,
                     wait: Callable[[], Any] | None = None, compiles: compiling.Compiles | None = None):
    """``(_Programs, compile seconds)``: the run's chunk program (``program.make_chunk``: any chunk length up to
    ``max_updates``; the state donated where ``platform.donate_state`` says so), the evaluation a branch of it or,
    where ``platform.evaluation_in_chunk`` says so and the run evaluates, a program of its own compiled in a thread
    beside it.
    ``state()``: the state they run on, or its shapes and shardings (called only when a program is compiled);
    ``lowered()``: called once the chunk is lowered, before XLA compiles it; ``wait()``:
    what else the first update waits for (the init compiling beside it), inside the compile seconds reported. A
    program traced in a thread of its own (the evaluation here, the init in ``rlpar.run.build``) is traced outside
    the JAX configuration contexts of the calling thread (``with jax.default_matmul_precision(...)``): set such
    options with ``jax.config.update`` for them to reach every program. The chunk program is traced and lowered on
    the calling thread; XLA's compile of it, and every other wait, go through ``compiles`` (``rlpar.run.compiling``:
    signals and Ctrl-C are taken while XLA compiles)."""
    if not schedule.lengths:  # a finished run resumed: nothing to compile
        return None, 0.0
    compiles = compiles if compiles is not None else compiling.Compiles()
    if hooks.on_status:
        hooks.on_status("compiling", {})
    start, hits = time.perf_counter(), compile_cache.hits()

    groups = run_config.population_devices
    inside = platform.evaluation_in_chunk(prepared.devices[0].platform)
    make_step, make_evaluation_step = make_steps(prepared, run_config, max_updates, inside)
    example = parallel.replicate(chunk_control(schedule, max_updates, 0, False), prepared.devices, groups)

    def compile_evaluation():
        before = compile_cache.hits()  # counted per thread: this one's
        compiled = parallel.compile_step(make_evaluation_step, prepared.devices, state(), shared=example,
                                         backend=run_config.device_backend, groups=groups, donate=False)
        return compiled, compile_cache.hits() > before

    separate = make_evaluation_step is not None and bool(schedule.eval_every)
    if separate:  # before a second thread traces: two threads importing one module can deadlock (rlpar.run.build)
        compiling.import_before_threads(prepared.devices[0].platform)
    pending, evaluation, evaluation_cached = [], None, False

    def start_evaluation():
        if separate and not pending:
            pending.append(compiles.start("evaluation", compile_evaluation))

    def on_lowered():
        # The evaluation is traced, lowered and compiled in a thread once the chunk program is lowered: beside the
        # chunk's XLA compile, which holds no Python lock (as the init is, rlpar.run.build): one after the other they
        # added the evaluation's whole compile to the start (docs/accelerators.md, the Breakout-MinAtar preset).
        if lowered is not None:
            lowered()
        start_evaluation()

    def compile_chunk():
        given = state()
        donate = platform.donate_state(bytes_per_device(given, len(prepared.devices)), prepared.devices[0].platform)
        return parallel.compile_step(make_step, prepared.devices, given, shared=example, donate=donate,
                                     backend=run_config.device_backend, groups=groups, lowered=on_lowered,
                                     run=lambda compile: compiles.call("chunk", compile))

    # on an error or Ctrl-C, an evaluation not started yet never starts; one started is left to finish on its own
    with compiles.compiling("chunk"):
        compiled = compile_chunk()
    if separate:
        start_evaluation()  # a no-op: the chunk program's lowering started it
        evaluation, evaluation_cached = compiles.wait(pending[0])
    if wait is not None:
        wait()
    compile_s = time.perf_counter() - start
    if hooks.on_status:  # cached: from JAX's persistent compilation cache
        cached = evaluation_cached or compile_cache.hits() > hits
        hooks.on_status("compiled", {"seconds": compile_s, "cached": cached})
    return _Programs(compiled, evaluation), compile_s


class Outputs(NamedTuple):
    checkpoints: checkpoint.Checkpoints | None
    logger: RunLogger | None
    hooks: Hooks
    meta: dict
    devices: list  # for their memory statistics
    watch: preemption.Watch | None = None  # SIGTERM / SIGUSR1 seen: stop after the chunk
    groups: int = 1  # the slots' device groups (RunConfig.population_devices)


def train_chunks(compiled: _Programs, state, schedule: Schedule, records: list[dict], out: Outputs, config,
                 run_config: RunConfig, slots: seeds.Slots):
    """Run the chunks; log each one, evaluate and checkpoint when due. Ctrl-C raises ``Interrupted`` (nothing of
    the interrupted chunk is logged or saved, so the run dir stays resumable)."""
    startup_s = time.time() - out.hooks.started_at if out.hooks.started_at is not None else None
    done = schedule.done
    try:
        _stop_if_preempted(out, run_config, done)  # asked while compiling: nothing new to save
        for i, length in enumerate(schedule.lengths):
            evaluate = bool(schedule.eval_every) and _due(done, done + length, schedule.eval_every,
                                                          config.num_updates)
            control = parallel.replicate(chunk_control(schedule, length, done, evaluate), out.devices, out.groups)
            start = time.perf_counter()
            with _profiling(run_config.profile if i == min(1, len(schedule.lengths) - 1) else ""):  # one warm chunk
                new_state, raw = compiled(state, control, evaluate)
                raw = parallel.to_host(raw)  # waits for the devices
            seconds = time.perf_counter() - start
            evaluation = {k: raw.pop(k) for k in (episodes.RETURNS, episodes.LENGTHS) if k in raw}
            raw = {k: v[:length] for k, v in raw.items()}  # the rows of the updates that ran
            stop_if_nonfinite(raw.pop(guard.FINITE_KEY), done + 1, out.checkpoints)
            members = {k: raw.pop(k) for k in list(raw) if k.startswith(population.METRIC_PREFIX)}
            state, before, done = new_state, done, done + length
            record = summarize(raw, update=done, env_steps=done * config.batch_size, seconds=seconds,
                               steps_in_chunk=length * config.batch_size * slots.count,  # sps: every slot's steps
                               evaluation=evaluation if evaluate else None)
            if members:
                add_members(record, members, before)
            if startup_s is not None:
                record["startup_s"], startup_s = round(startup_s, 3), None
            memory = hosts.memory_stats(out.devices)
            if memory is not None:
                record["memory"] = memory
            finish_chunk(record, records, out)
            saved = out.checkpoints is not None and _due(before, done, run_config.checkpoint_every,
                                                         config.num_updates)
            if saved:
                save_checkpoint(out.checkpoints, out.logger, state, done, out.meta, out.groups)
            if done < config.num_updates:
                _stop_if_preempted(out, run_config, done, state, saved)
    except KeyboardInterrupt:
        latest = out.checkpoints.latest() if out.checkpoints is not None else None
        raise Interrupted(done, latest, run_config.run_dir) from None
    return state


def _stop_if_preempted(out: Outputs, run_config: RunConfig, done: int, state: Any = None,
                       saved: bool = False) -> None:
    """Raise ``preemption.Preempted`` if any process was sent SIGTERM or SIGUSR1, after saving a checkpoint of
    ``state`` at ``done`` unless it was just ``saved`` (``state=None``: before the first chunk, nothing new to save).
    Every process calls this after every chunk: in a multi-process run it is a collective, so all of them stop after
    the same update."""
    if not preemption.agreed(out.watch):
        return
    latest = None
    if out.checkpoints is not None and state is not None:
        if not saved:
            save_checkpoint(out.checkpoints, out.logger, state, done, out.meta, out.groups)
        latest = done  # known here: a process other than 0 may return from the save before 0 commits it
    elif out.checkpoints is not None:
        latest = out.checkpoints.latest()
    raise preemption.Preempted(done, latest, run_config.run_dir, out.watch.requested or "a signal to another process",
                               compiling=state is None)


@contextlib.contextmanager
def _profiling(directory: str):
    """A ``jax.profiler`` trace of what runs inside, into ``directory`` (nothing when empty); TensorBoard's profile
    plugin opens the ``.xplane.pb``, Perfetto (ui.perfetto.dev) the ``.trace.json.gz``."""
    if not directory or not hosts.is_primary():
        yield
        return
    jax.profiler.start_trace(str(Path(directory).absolute()), create_perfetto_trace=True)
    try:
        yield
    finally:
        jax.profiler.stop_trace()


def finish_chunk(record: dict, records: list[dict], out: Outputs) -> None:
    """Keep, write and report a chunk's record (before its checkpoint, if one is due)."""
    records.append(record)
    if out.logger is not None:
        out.logger.write(record)
    if out.hooks.on_log is not None:
        out.hooks.on_log(record)


def chunk_lengths(num_updates: int, log_every: int) -> list[int]:
    """Updates per call of the compiled program: ``log_every`` each, then the remainder; e.g. (25, 10) ->
    [10, 10, 5]."""
    lengths = [log_every] * (num_updates // log_every)
    if num_updates % log_every:
        lengths.append(num_updates % log_every)
    return lengths


def chunks_done(lengths: list[int], updates_done: int) -> int:
    """How many of ``lengths`` a run ``updates_done`` updates in has finished (it must sit on a chunk boundary)."""
    ends = [0] + [int(e) for e in np.cumsum(lengths)]
    if updates_done not in ends:
        raise checkpoint.CheckpointError(f"update {updates_done} is not a chunk boundary of this run's log_every")
    return ends.index(updates_done)


def _due(before: int, after: int, every: int, num_updates: int) -> bool:
    """Checkpoint (or evaluate) after the chunk of updates ``(before, after]`` if it reached a multiple of ``every``
    or ended the run."""
    return after == num_updates or (every > 0 and after // every > before // every)
