"""The host loop: validate, build the mapped program, compile it once, run chunks of updates, log between them.

Between calls the host only reads small per-update metrics (and, after an evaluation, the evaluation episodes'
returns); environments, acting, learning and evaluating stay on the devices. One program serves every chunk of the
run (``program.make_chunk``): each call is told how many updates to run and whether to evaluate afterwards (the
evaluation a branch of it, or on accelerators a program of its own: ``platform.evaluation_in_chunk``).
``run`` goes through named phases, each in a module of its own that imports only the ones before it:
``prepare.prepare_run`` (check everything, before any compile; the settings are ``config.RunConfig``),
``_open_run_dir`` (``state``: checkpoints, the restored state, the logger), ``build.build_programs`` (the chunk program
and the init beside it), ``chunks.train_chunks`` (chunks, logs, evaluations, checkpoints; each record from ``records``).
This module only runs them in order; nothing below it imports it. Of what it imports it re-exports ``RunConfig``
and ``Hooks``, the types of ``run``'s arguments; everything else is imported from the module it lives in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax

from rlpar.core import hosts, parallel, program
from rlpar.core.agent import AgentSpec
from rlpar.run import build, chunks, compiling, preemption, rundir
from rlpar.run.chunks import Hooks, Outputs, Schedule, chunk_lengths, chunks_done
from rlpar.run.config import RunConfig
from rlpar.run.prepare import Prepared, prepare_run
from rlpar.run.state import check_every_process_sees, open_checkpoints, open_logger, previous_records, restore

__all__ = ["Hooks", "RunConfig", "TrainResult", "make_train", "run", "train"]  # RunConfig, Hooks: run's arguments

class TrainResult(NamedTuple):
    params: Any  # final parameters, device 0's copy as host numpy (identical on every device); [S, ...] with slots
    metrics: list[dict]  # one dict per logged chunk of updates, as in metrics.jsonl (plus timing)
    state: program.TrainState  # final per-device training state (on the devices), every leaf [D, ...]
    compile_s: float  # seconds spent compiling (or loading) the update program, and the init beside it


def train(spec: AgentSpec, config, env="CartPole-v1", *, on_log=None, **run_options) -> TrainResult:
    """``run`` for Python users: ``env`` is an id or a gymnax-API env instance (or ``(env, env_params)``);
    ``run_options`` are ``RunConfig`` fields (``devices``, ``run_dir``, ``log_every``, ``num_seeds``, ...)."""
    env_id = env if isinstance(env, str) else _instance_name(env)
    run_config = RunConfig(env=env_id, **run_options)
    return run(spec, config, run_config, hooks=Hooks(on_log=on_log), env=None if isinstance(env, str) else env)


def make_train(spec: AgentSpec, default_env: str) -> Callable[..., Any]:
    """The library entry point every agent package exports as ``train``:
    ``train(config=None, env=default_env, **run_options) -> TrainResult``. ``config=None`` takes the env's preset
    where the config has presets (``config_cls.for_env(env)``, as the command line does), else the config's
    defaults; a config you pass is used as it is. ``env`` is an id (``"CartPole-v1"``, a registered id,
    ``"package.module:factory"``) or a gymnax-API environment instance (or ``(env, env_params)``). ``run_options``
    are ``RunConfig`` fields (``devices``, ``run_dir``, ``log_every``, ``num_seeds``, ``sweep``,
    ``checkpoint_every``, ...) and ``on_log`` (called with each logged record). Bad settings raise a one-line
    ``ValueError`` before anything compiles."""

    def train_agent(config=None, env=default_env, **run_options):
        if config is None:
            for_env = getattr(spec.config_cls, "for_env", None)
            config = for_env(env if isinstance(env, str) else "") if for_env else spec.config_cls()
        return train(spec, config, env, **run_options)

    train_agent.__doc__ = (f"Train {spec.name} from Python (default env {default_env!r}); see "
                           "``rlpar.agent.make_train``.")
    train_agent.__name__ = train_agent.__qualname__ = "train"
    return train_agent


def _instance_name(env) -> str:
    inner = env[0] if isinstance(env, tuple) else env
    return f"<instance of {type(inner).__name__}>"


def run(agent: AgentSpec, config, run_config: RunConfig = RunConfig(), *, hooks: Hooks = Hooks(),
        on_log: Callable[[dict], None] | None = None, env: Any = None, env_kwargs: dict | None = None,
        resume: bool = False) -> TrainResult:
    """Train ``agent`` with ``config`` on ``run_config.env`` (or ``env``, an instance); returns final params and
    per-chunk metrics.

    With ``run_config.run_dir`` it writes config.json, metrics.jsonl, timing.jsonl and checkpoints there (see
    ``rlpar.run.rundir``). ``resume=True`` continues the run in ``run_dir`` from its newest complete checkpoint instead
    (``config`` and ``run_config`` must match it); the metrics and parameters it ends with are bit-identical to an
    uninterrupted run's. Raises ``ValueError`` (``CheckpointError``) for bad settings or a bad run dir before
    compiling, ``guard.NonFiniteError`` if the loss or parameters stop being finite, ``Interrupted`` on Ctrl-C, and
    ``preemption.Preempted`` after SIGTERM or SIGUSR1 (the chunk in progress finished, a checkpoint saved with a run
    dir; ``run_config.preemption_grace_s``).
    """
    if on_log is not None:
        hooks = hooks._replace(on_log=on_log)
    with preemption.Watch(run_config.preemption_grace_s) as watch:
        return _run(agent, config, run_config, hooks, env, env_kwargs, resume, watch)


def _run(agent: AgentSpec, config, run_config: RunConfig, hooks: Hooks, env: Any, env_kwargs: dict | None,
         resume: bool, watch: preemption.Watch) -> TrainResult:
    prepared = prepare_run(agent, config, run_config, env, env_kwargs)
    if resume and hooks.on_status:
        hooks.on_status("restoring", {"run_dir": run_config.run_dir})
    checkpoints, restored, logger = _open_run_dir(prepared, config, run_config, resume)
    done = restored.position.updates_done if restored is not None else 0
    if restored is not None and hooks.on_status:
        hooks.on_status("resumed", {"update": done, "checkpoint": str(checkpoints.path(done))})
    lengths = chunk_lengths(config.num_updates, run_config.log_every)
    lengths = lengths[chunks_done(lengths, done):]  # a resumed run continues after its checkpoint
    schedule = Schedule(lengths, done, run_config.eval_interval(config.num_updates), config.seed)
    max_updates = min(run_config.log_every, config.num_updates)
    try:
        with build.building(agent, run_config), _compiles(watch, hooks, run_config, checkpoints, done) as compiles:
            compiled, compile_s, state = build.build_programs(prepared, config, run_config, restored, schedule,
                                                              max_updates, hooks, compiles)
        records = [] if restored is None else previous_records(logger, run_config, restored)
        outputs = Outputs(checkpoints, logger, hooks, prepared.meta, prepared.devices, watch,
                          run_config.population_devices)
        state = chunks.train_chunks(compiled, state, schedule, records, outputs, config, run_config, prepared.slots)
    finally:
        if logger is not None:
            logger.close()
    params = getattr(state.agent, "params", state.agent)
    return TrainResult(parallel.first_replica(params, run_config.population_devices), records, state, compile_s)


def _compiles(watch: preemption.Watch, hooks: Hooks, run_config: RunConfig, checkpoints, done: int):
    """How the main thread waits while the run compiles (``rlpar.run.compiling``): a signal stops a single-process run
    there with ``Preempted`` (nothing new to save: its newest checkpoint, if any, is the one it started from). A
    multi-process run's processes stop together after their first chunk instead (``chunks.train_chunks``)."""

    def stop(signal_name: str) -> preemption.Preempted:
        latest = checkpoints.latest() if checkpoints is not None else None
        return preemption.Preempted(done, latest, run_config.run_dir, signal_name, compiling=True)

    return compiling.Compiles(watch, stop if jax.process_count() == 1 else None, hooks.on_status)


def _open_run_dir(prepared: Prepared, config, run_config: RunConfig, resume: bool):
    """``(checkpoints, restored, logger)``; everything that can reject the run dir (no or a corrupt checkpoint,
    other settings) happens here, before compiling. Only the primary process writes files."""
    checkpoints = open_checkpoints(run_config, resume)
    restored = None
    if resume:
        abstract = parallel.state_shapes(lambda ax: prepared.make_program(ax).init, prepared.devices,
                                         *jax.random.split(jax.random.PRNGKey(config.seed)),
                                         groups=run_config.population_devices)
        restored = restore(checkpoints, prepared.meta, abstract)
    run_dir = Path(run_config.run_dir) if run_config.run_dir and hosts.is_primary() else None
    logger = open_logger(run_dir, run_config, prepared.meta, restored)
    if checkpoints is not None and restored is None:
        check_every_process_sees(Path(run_config.run_dir) / rundir.CONFIG)
    return checkpoints, restored, logger
