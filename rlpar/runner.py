"""The host loop: validate, build the mapped program, compile it once, run chunks of updates, log between them.

Between calls the host only reads small per-update metrics (and, after an evaluation, the evaluation episodes'
returns); environments, acting, learning and evaluating stay on the devices. One program serves the whole run
(``program.make_chunk``): each call is told how many updates to run and whether to evaluate afterwards.
``run`` goes through named phases: ``_prepare`` (check everything, before any compile), ``_open_run_dir``
(checkpoints, the restored state, the logger), ``_compile``, ``_train`` (chunks, logs, evaluations, checkpoints).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import math
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import numpy as np

from rlpar import (checkpoint, compile_cache, episodes, guard, logs, parallel, platform, population, preemption,
                   program, program_cache, rollout, rundir, seeds)
from rlpar.agent import AgentSpec
from rlpar.logs import RunLogger


def _f(default, help: str, repeatable: bool = False):  # noqa: A002
    """A ``RunConfig`` field: its default and its flag's help; ``repeatable``: the flag may be given several times,
    each value adding fields to the space-separated string (``rlpar.cli.Fields``)."""
    return field(default=default, metadata={"help": help, **({"repeatable": True} if repeatable else {})})


@dataclass(frozen=True)
class RunConfig:
    """Where and how a run executes (not what it learns). Each field is a CLI flag too."""

    env: str = _f("CartPole-v1", "environment id: a gymnax id, a probe id, an id added with envs.register, or "
                                 "package.module:factory")
    devices: int = _f(0, "local devices to use; 0 = all local devices (on a CPU-only host that is 1). On a "
                         "CPU-only host N > 1 creates N CPU devices (at most max(8, cores))")
    run_dir: str = _f("", "directory for config.json, metrics.jsonl and checkpoints; empty = write nothing")
    log_every: int = _f(10, "updates per call of the compiled program (one program whatever the chunk lengths); "
                            "one log line and metrics.jsonl record per call")
    checkpoint_every: int = _f(100, "with --run-dir: save a checkpoint after the chunk that reaches each multiple "
                                    "of this many updates, and at the end; 0 = no checkpoints")
    eval_every: int = _f(-1, "greedy evaluation during training: after the chunk that reaches each multiple of this "
                             "many updates, and at the end; -1 = about ten per run (every ceil(updates / 10)); "
                             "0 = none. Each episode runs to its end: the env's time limit "
                             f"(max_steps_in_episode), or {episodes.STEP_CAP} steps for an env without one")
    eval_episodes: int = _f(64, "episodes per evaluation, on environments of their own, split evenly over the "
                                "devices (a multiple of the device count)")
    tensorboard: bool = _f(False, "with --run-dir: also write TensorBoard event files to RUN_DIR/tensorboard")
    wandb: bool = _f(False, "with --run-dir: also log to Weights & Biases (the same scalars as --tensorboard, "
                            "config.json as the run's config); --resume continues the same wandb run. "
                            "WANDB_MODE=offline keeps it on disk for wandb sync")
    wandb_project: str = _f("", "with --wandb: the wandb project; empty = $WANDB_PROJECT, or rlpar")
    num_seeds: int = _f(1, "independent trainings (seeds) vmapped in one compiled program; metrics keep each one")
    sweep: str = _f("", "vmap over hyperparameters too: FIELD=V1,V2,... (FIELD: one the agent's config declares "
                        "sweepable, e.g. lr); several fields, separated by spaces in one value or given by repeating "
                        "--sweep, sweep their grid; runs num_seeds x grid slots", repeatable=True)
    search: str = _f("", "search several sweepable fields: FIELD=V1,V2 (a list), FIELD=LOW..HIGH (uniform) or "
                         "FIELD=log:LOW..HIGH (log-uniform), separated by spaces in one value or given by repeating "
                         "--search; without --population the grid of the lists, with it that many seeded draws. Each "
                         "member's values live in its training state: one compile serves them all", repeatable=True)
    population: int = _f(0, "members drawn from --search (each trained num_seeds times); 0 = the grid of --search")
    pbt: bool = _f(False, "population-based training: every --pbt-interval updates the bottom --pbt-quantile of the "
                          "members copy the agent state of a top one and perturb its --search values (x0.8 or x1.2, "
                          "or redrawn with probability --pbt-resample), all inside the compiled program")
    pbt_interval: int = _f(0, "updates between PBT rounds; 0 = about ten rounds per run (ceil(updates / 10))")
    pbt_quantile: float = _f(0.25, "fraction of members replaced each PBT round (0 < Q <= 0.5), and of the best "
                                   "members they copy from")
    pbt_resample: float = _f(0.25, "probability that PBT's explore redraws a copied value from --search instead of "
                                   "multiplying it by 0.8 or 1.2")
    pbt_fitness: str = _f("train", "how PBT ranks members: train (mean training return since the last round) or "
                                   "eval (a greedy evaluation of --eval-episodes at each round)")
    population_devices: int = _f(1, "spread the slots (members x seeds) over this many groups of devices: a 2-D "
                                    "mesh, groups x devices-per-group; each group trains its own members on all of "
                                    "their environments, so a gradient's all-reduce spans only its group (none with "
                                    "one device per group). Must divide the device count and the slot count; 1 = "
                                    "every device trains every slot on its share of the environments")
    backend: str = _f("auto", "device backend: pmap, or shard_map (jax.jit over jax.shard_map on a device mesh); "
                              "auto = pmap, or shard_map with --population-devices > 1 (a 2-D mesh, which pmap "
                              "cannot map)")
    profile: str = _f("", "write a jax.profiler trace of one chunk of updates (the second: compiled and warm) to "
                          "this directory, for TensorBoard's profile plugin or Perfetto; empty = none")
    compile_cache: str = _f("", "directory of the compilation caches (JAX's persistent cache, and rlpar's saved "
                                "programs in DIR/programs), so an identical run loads its programs instead of "
                                "compiling them; empty = $RLPAR_CACHE_DIR or ~/.cache/rlpar/jax; off (or "
                                "--no-compile-cache) = none")
    # Multi-process runs (see README "Past one machine"); every process gets the same flags except process_id.
    coordinator: str = _f("", "multi-process: HOST:PORT of process 0's coordinator; 'auto' = read the cluster's "
                              "environment (SLURM, Open MPI, JAX_COORDINATOR_ADDRESS); empty = single process")
    num_processes: int = _f(1, "multi-process: processes in the run (ignored with --coordinator auto)")
    process_id: int = _f(0, "multi-process: this process's rank, 0..num_processes-1 (ignored with --coordinator auto)")
    init_timeout_s: int = _f(300, "multi-process: seconds to wait for every process to join")
    heartbeat_timeout_s: int = _f(100, "multi-process: seconds of silence after which a process is declared dead "
                                       "and the others exit with an error")
    preemption_grace_s: int = _f(preemption.GRACE_S, "on SIGTERM or SIGUSR1 (a scheduler's notice): finish the "
                                                     "chunk in progress, save a checkpoint and stop (exit "
                                                     f"{preemption.EXIT_CODE}); after this many seconds, or a second "
                                                     "signal, stop at once. 0 = leave those signals alone")

    def validate(self) -> "RunConfig":
        for name in ("devices", "checkpoint_every", "preemption_grace_s"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name}={value!r}: must be a positive integer, or 0 (see --help)")
        if not isinstance(self.eval_every, int) or isinstance(self.eval_every, bool) or self.eval_every < -1:
            raise ValueError(f"eval_every={self.eval_every!r}: must be a positive integer, 0 (no evaluation) or -1 "
                             "(about ten evaluations per run)")
        for name in ("log_every", "eval_episodes", "num_processes", "init_timeout_s", "heartbeat_timeout_s"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name}={value!r}: must be a positive integer")
        # a ValueError naming a bad num_seeds, sweep or search syntax
        slots = seeds.make_slots(self.num_seeds, self.sweep, search=self.search, population=self.population)
        self._validate_pbt(slots.count)
        if self.backend not in ("auto", *parallel.BACKENDS):
            raise ValueError(f"backend={self.backend!r}: must be one of auto, {', '.join(parallel.BACKENDS)}")
        self._validate_groups(slots.count)
        if not isinstance(self.process_id, int) or not 0 <= self.process_id < self.num_processes:
            raise ValueError(f"process_id={self.process_id!r}: must be in 0..{self.num_processes - 1} "
                             f"(num_processes={self.num_processes})")
        if self.num_processes > 1 and not self.coordinator:
            raise ValueError(f"num_processes={self.num_processes} needs --coordinator HOST:PORT (or auto)")
        _check_run_dir_options(self)
        return self

    def _validate_groups(self, num_slots: int) -> None:
        groups = self.population_devices
        if isinstance(groups, bool) or not isinstance(groups, int) or groups <= 0:
            raise ValueError(f"population_devices={groups!r}: must be a positive integer (1 = no population groups)")
        if groups == 1:
            return
        if self.backend == "pmap":
            raise ValueError(f"backend='pmap' maps one device axis; population_devices={groups} needs a 2-D device "
                             "mesh: use --backend shard_map (or auto, the default)")
        if num_slots % groups:
            raise ValueError(f"population_devices={groups}: the run's {num_slots} slot(s) (members x --num-seeds) do "
                             f"not split evenly into {groups} device groups: use a --population (times --num-seeds) "
                             f"divisible by {groups}")

    @property
    def device_backend(self) -> str:
        """The backend that maps the devices: ``backend``, with ``auto`` resolved."""
        if self.backend != "auto":
            return self.backend
        return "shard_map" if self.population_devices > 1 else "pmap"

    @property
    def member_groups(self) -> parallel.MemberGroups:
        """How the slots sit on the device groups (``rlpar.parallel.MemberGroups``)."""
        return parallel.MemberGroups(self.population_devices)

    def _validate_pbt(self, num_slots: int) -> None:
        if not isinstance(self.pbt_interval, int) or isinstance(self.pbt_interval, bool) or self.pbt_interval < 0:
            raise ValueError(f"pbt_interval={self.pbt_interval!r}: must be a positive integer, or 0 (about ten "
                             "rounds per run)")
        if not isinstance(self.pbt_quantile, (int, float)) or not 0 < self.pbt_quantile <= 0.5:
            raise ValueError(f"pbt_quantile={self.pbt_quantile!r}: must be in (0, 0.5]")
        if not isinstance(self.pbt_resample, (int, float)) or not 0 <= self.pbt_resample <= 1:
            raise ValueError(f"pbt_resample={self.pbt_resample!r}: must be in [0, 1]")
        if self.pbt_fitness not in population.FITNESS:
            raise ValueError(f"pbt_fitness={self.pbt_fitness!r}: must be one of {', '.join(population.FITNESS)}")
        if not self.pbt:
            return
        if not self.search:
            raise ValueError("pbt needs --search: the fields and spaces its explore perturbs, e.g. --search "
                             "'lr=log:1e-4..1e-2' --population 8")
        if num_slots < 2:
            raise ValueError(f"pbt with {num_slots} member: a population needs at least 2 (--population N, or more "
                             "values in --search)")
        if self.pbt_fitness == "eval" and self.eval_every == 0:
            raise ValueError("pbt_fitness='eval' evaluates at each PBT round: give --eval-every -1 or N (not 0)")

    def pbt_settings(self, num_updates: int) -> population.PBT | None:
        """PBT's settings for a run of ``num_updates``; ``None`` without ``--pbt``. ``ValueError`` for an interval
        that leaves no round."""
        if not self.pbt:
            return None
        interval = self.pbt_interval or -(-num_updates // 10)
        if interval >= num_updates:
            raise ValueError(f"pbt_interval={interval} is not shorter than the run ({num_updates} updates): no PBT "
                             f"round would happen; use at most {max(1, num_updates - 1)}")
        return population.PBT(interval, float(self.pbt_quantile), float(self.pbt_resample), self.pbt_fitness,
                              num_updates)

    def validate_devices(self, num_devices: int) -> "RunConfig":
        """What depends on the device count: evaluation episodes split evenly over the devices."""
        if self.eval_every != 0 and self.eval_episodes % num_devices:
            raise ValueError(
                f"eval_episodes={self.eval_episodes} is not divisible by the device count {num_devices}: use a "
                f"multiple of {num_devices} (e.g. {num_devices * -(-self.eval_episodes // num_devices)}), or "
                "eval_every=0 for no evaluation"
            )
        return self

    def eval_interval(self, num_updates: int) -> int:
        """Updates between evaluations for a run of ``num_updates`` (``eval_every``, or ``ceil(num_updates / 10)``
        for -1); 0: no evaluation."""
        return -(-num_updates // 10) if self.eval_every == -1 else self.eval_every


def _check_run_dir_options(run_config: RunConfig) -> None:
    """A run dir that is a file or cannot be created, TensorBoard or wandb without their package, wandb without a
    run dir: refused before anything runs."""
    if run_config.run_dir and Path(run_config.run_dir).exists() and not Path(run_config.run_dir).is_dir():
        raise ValueError(f"run_dir={run_config.run_dir!r} is a file, not a directory: give a directory path "
                         "(it is created if missing)")
    if run_config.run_dir:
        check_creatable(run_config.run_dir, "run_dir", "give a directory path that can be written")
    if run_config.tensorboard:
        import importlib.util

        if importlib.util.find_spec("tensorboardX") is None:
            raise ValueError("--tensorboard needs the tensorboardX package: pip install -e \".[extras]\" "
                             "(or pip install tensorboardX)")
    if run_config.wandb:
        import importlib.util

        if not run_config.run_dir:
            raise ValueError("--wandb needs --run-dir DIR: the wandb run's id is kept there, so that --resume "
                             "continues the same wandb run")
        if importlib.util.find_spec("wandb") is None:
            raise ValueError("--wandb needs the wandb package: pip install -e \".[wandb]\" (or pip install wandb)")


def check_creatable(path: str | Path, name: str, fix: str) -> None:
    """``ValueError`` naming ``name`` unless ``path`` is a directory, or its nearest existing parent is a directory
    this process may write into (where it would be created); nothing is created."""
    target = Path(path).expanduser().absolute()
    existing = next(p for p in (target, *target.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        what = "a file" if not existing.is_dir() else "not writable"
        where = "it" if existing == target else f"{str(existing)!r}"
        raise ValueError(f"{name}={str(path)!r} cannot be written: {where} is {what}; {fix}")


class TrainResult(NamedTuple):
    params: Any  # final parameters, device 0's copy as host numpy (identical on every device); [S, ...] with slots
    metrics: list[dict]  # one dict per logged chunk of updates, as in metrics.jsonl (plus timing)
    state: program.TrainState  # final per-device training state (on the devices), every leaf [D, ...]
    compile_s: float  # seconds spent compiling (or loading) the update program, and the init beside it


class Interrupted(Exception):
    """Ctrl-C during training: the run stopped at ``update``; ``checkpoint`` is the newest one saved (or None)."""

    def __init__(self, update: int, checkpoint_update: int | None, run_dir: str):
        super().__init__(f"interrupted at update {update}")
        self.update, self.checkpoint_update, self.run_dir = update, checkpoint_update, run_dir


class Hooks(NamedTuple):
    """What the host loop reports while it runs (all optional): the CLI's progress display listens. With
    ``started_at`` (a ``time.time()`` of the process start) the first chunk's record gets ``startup_s``."""

    on_log: Callable[[dict], None] | None = None  # each chunk's record
    on_status: Callable[[str, dict], None] | None = None  # ("compiling", {}), ("compiled", {"seconds"}),
    # ("restoring", {"run_dir"}), ("resumed", {"update", "checkpoint"})
    started_at: float | None = None


class _Prepared(NamedTuple):
    """Everything ``_prepare`` checked and built, before anything compiles."""

    devices: list
    slots: seeds.Slots
    env: Any
    env_params: Any
    make_program: Callable[[str | None], program.Program]  # axis_name -> this run's per-device program
    meta: dict
    programs: program_cache.Snapshot | None  # what the programs are made from; None: not kept in rlpar.program_cache


def train(spec: AgentSpec, config, env="CartPole-v1", *, on_log=None, **run_options) -> TrainResult:
    """``run`` for Python users: ``env`` is an id or a gymnax-API env instance (or ``(env, env_params)``);
    ``run_options`` are ``RunConfig`` fields (``devices``, ``run_dir``, ``log_every``, ``num_seeds``, ...)."""
    env_id = env if isinstance(env, str) else _instance_name(env)
    run_config = RunConfig(env=env_id, **run_options)
    return run(spec, config, run_config, hooks=Hooks(on_log=on_log), env=None if isinstance(env, str) else env)


def _instance_name(env) -> str:
    inner = env[0] if isinstance(env, tuple) else env
    return f"<instance of {type(inner).__name__}>"


def run(agent: AgentSpec, config, run_config: RunConfig = RunConfig(), *, hooks: Hooks = Hooks(),
        on_log: Callable[[dict], None] | None = None, env: Any = None, env_kwargs: dict | None = None,
        resume: bool = False) -> TrainResult:
    """Train ``agent`` with ``config`` on ``run_config.env`` (or ``env``, an instance); returns final params and
    per-chunk metrics.

    With ``run_config.run_dir`` it writes config.json, metrics.jsonl, timing.jsonl and checkpoints there (see
    ``rlpar.rundir``). ``resume=True`` continues the run in ``run_dir`` from its newest complete checkpoint instead
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
    prepared = _prepare(agent, config, run_config, env, env_kwargs)
    if resume and hooks.on_status:
        hooks.on_status("restoring", {"run_dir": run_config.run_dir})
    checkpoints, restored, logger = _open_run_dir(prepared, config, run_config, resume)
    done = restored.position.updates_done if restored is not None else 0
    if restored is not None and hooks.on_status:
        hooks.on_status("resumed", {"update": done, "checkpoint": str(checkpoints.path(done))})
    lengths = chunk_lengths(config.num_updates, run_config.log_every)
    lengths = lengths[_chunks_done(lengths, done):]  # a resumed run continues after its checkpoint
    schedule = _Schedule(lengths, done, run_config.eval_interval(config.num_updates), config.seed)
    max_updates = min(run_config.log_every, config.num_updates)
    try:
        with _building(agent, run_config):
            compiled, compile_s, state = _build(prepared, config, run_config, restored, schedule, max_updates, hooks)
        records = [] if restored is None else _previous_records(logger, run_config, restored)
        outputs = _Outputs(checkpoints, logger, hooks, prepared.meta, prepared.devices, watch,
                           run_config.population_devices)
        state = _train(compiled, state, schedule, records, outputs, config, run_config, prepared.slots)
    finally:
        if logger is not None:
            logger.close()
    params = getattr(state.agent, "params", state.agent)
    return TrainResult(parallel.first_replica(params, run_config.population_devices), records, state, compile_s)


def _build(prepared: _Prepared, config, run_config: RunConfig, restored, schedule: "_Schedule", max_updates: int,
           hooks: Hooks):
    """``(compiled chunk program, compile seconds, initial state)``."""
    if restored is not None or jax.process_count() > 1:
        state = _initial_state(prepared, config, run_config, restored)
        compiled, compile_s = _compile(prepared, run_config, lambda: state, schedule, max_updates, hooks)
        return compiled, compile_s, state
    # The init is traced here (the chunk program is lowered for its output shapes); its lowering and compile start in
    # a thread once the chunk program is lowered, and run beside the chunk's XLA compile, which holds no Python lock:
    # lowered beside the chunk's tracing instead, the two threads took turns with the GIL (docs/benchmarks.md,
    # 2026-12-05). Tracing imports modules on first use, and two threads importing one module can deadlock: Python's
    # import locks raised _DeadlockError on scipy.linalg.cython_blas (imported when the CPU LAPACK kernels are first set
    # up, for the orthogonal initialiser's QR) on a loaded 2-core host. So that import happens here, before the thread.
    program_cache.initialize_lapack()
    init = _Init(prepared, config, run_config)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rlpar-init") as pool:
        pending = []

        def start_init():
            if not pending:
                pending.append(pool.submit(_initial_state, prepared, config, run_config, None, init))

        def initial_state():
            start_init()  # a no-op once started; _compile starts it unless it returns with nothing to build
            return pending[0].result()

        compiled, compile_s = _compile(prepared, run_config, init.shapes, schedule, max_updates, hooks, start_init,
                                       initial_state)
        return compiled, compile_s, initial_state()


def _prepare(agent: AgentSpec, config, run_config: RunConfig, env: Any, env_kwargs: dict | None,
             join: bool = True) -> _Prepared:
    """Check the settings, join a multi-process run, choose the devices, build the env; nothing compiles. With
    ``join=False`` (a dry run) neither the compilation cache nor a multi-process run is set up: this process's
    devices stand for the run's."""
    import envs

    run_config.validate()
    parallel.request_cpu_devices(run_config.devices)  # takes effect only if no JAX backend has started yet
    if join:
        compile_cache.enable(run_config.compile_cache)
        parallel.init_distributed(
            run_config.coordinator, run_config.num_processes, run_config.process_id,
            init_timeout_s=run_config.init_timeout_s, heartbeat_timeout_s=run_config.heartbeat_timeout_s,
        )
    elif compile_cache.resolve(run_config.compile_cache) is not None:
        check_creatable(compile_cache.resolve(run_config.compile_cache), "compile_cache",
                        "give a writable directory with --compile-cache DIR, or --no-compile-cache")
    devices = parallel.select_devices(run_config.devices)  # in a multi-process run: every process's devices
    parallel.check_groups(len(devices), run_config.population_devices)
    group_size = len(devices) // run_config.population_devices  # the devices that train one member
    config.validate(group_size)
    run_config.validate_devices(group_size)
    slots = make_slots(run_config, config, group_size)
    pbt = run_config.pbt_settings(config.num_updates)
    from_id = env is None
    env_kwargs = {**config_env_kwargs(config), **(env_kwargs or {})}
    if env is None:
        env, env_params = envs.make(run_config.env, **env_kwargs)
    else:
        env, env_params = envs.make(env[0], env_params=env[1]) if isinstance(env, tuple) else envs.make(env)
    eval_episodes = run_config.eval_episodes // group_size if run_config.eval_interval(config.num_updates) else 0
    make = make_program_factory(agent, config, slots, env, env_params, config.num_envs // group_size, eval_episodes,
                                pbt, run_config.member_groups)
    check_agent(agent, config, env, env_params, config.num_envs // group_size)  # before the run dir is touched
    meta = rundir.make_meta(agent.name, config, run_config, devices,
                            agent_module=getattr(agent.make, "__module__", None))
    if slots.count > 1 or slots.hparams:
        meta["slots"] = slots.describe()
    description = _describe(agent, config, run_config, env_params, env_kwargs) if from_id else None
    return _Prepared(devices, slots, env, env_params, make, meta, program_cache.snapshot(description, devices))


class Plan(NamedTuple):
    """What a run would do, from ``check``."""

    devices: list  # this process's devices that would train
    slots: seeds.Slots
    pbt: population.PBT | None
    resume_from: int | None  # the checkpoint a resumed run would continue from (its update)


def check(agent: AgentSpec, config, run_config: RunConfig = RunConfig(), *, resume: bool = False) -> Plan:
    """Everything ``run`` checks before it compiles (the settings, the devices and their layout, the env and the
    agent's own checks of it, each member's config and the search space's ends, the run dir and the compilation
    cache's directory), with nothing compiled, written, or joined: a multi-process run's settings are checked on
    this process's devices. ``ValueError`` naming what would be refused."""
    prepared = _prepare(agent, config, run_config, None, None, join=False)
    checkpoints = _checkpoints_found(run_config, resume)
    if checkpoints is not None and (run_config.checkpoint_every or resume):
        try:
            checkpoint.require_orbax()
        except ImportError as err:
            raise ValueError(str(err)) from None
    latest = checkpoints.latest() if checkpoints is not None and resume else None
    return Plan(prepared.devices, prepared.slots, run_config.pbt_settings(config.num_updates), latest)


def config_env_kwargs(config) -> dict:
    """The keyword arguments an agent's config asks its env id to be made with (its ``env_kwargs()``, if it has one:
    the team agents' reward shaping); ``{}`` otherwise."""
    method = getattr(config, "env_kwargs", None)
    return dict(method()) if callable(method) else {}


def make_slots(run_config: RunConfig, config, num_devices: int) -> seeds.Slots:
    """The run's slots (``seeds.make_slots`` from its seeds, sweep, search and population, draws seeded by
    ``config.seed``), each member's config checked on ``num_devices`` devices, and every searched field's space at
    its ends (``ValueError`` naming the value)."""
    slots = seeds.make_slots(run_config.num_seeds, run_config.sweep, type(config), search=run_config.search,
                             population=run_config.population, seed=config.seed)
    seeds.validate_slots(config, slots, num_devices)
    return slots


def check_agent(agent: AgentSpec, config, env, env_params, num_envs: int) -> None:
    """Build the agent once, untraced, for its own checks of the env (e.g. ``agents.spaces``: an action space it
    cannot take): a ``ValueError`` it raises stays as it is; anything else it raises, or a result that is no
    ``rlpar.agent.Agent``, becomes a one-line ``ValueError`` naming the agent."""
    from rlpar import errors
    from rlpar.agent import Agent

    try:
        made = agent.make(config, env, env_params, num_envs, None)
    except ValueError:
        raise
    except Exception as err:  # noqa: BLE001 -- a user's agent failed
        raise errors.from_user_code(f"agent {agent.name!r}: make(config, env, ...)", err) from err
    if not isinstance(made, Agent):
        raise ValueError(f"agent {agent.name!r}: make returned {type(made).__name__}, not an rlpar.agent.Agent "
                         "(init, initial_carry, act, bootstrap, learn, policy; rlpar.agent.AgentFunctions has them)")


class BuildError(ValueError):
    """Tracing or compiling the run's programs failed: most often a user's env or agent code raising while traced."""


@contextlib.contextmanager
def _building(agent: AgentSpec, run_config: RunConfig):
    """Turn an error raised while the run's programs are traced and compiled into one ``BuildError`` line naming the
    agent and env (the traceback stays attached: ``RLPAR_TRACEBACK=1``)."""
    from rlpar import errors

    try:
        yield
    except (KeyboardInterrupt, checkpoint.CheckpointError):
        raise
    except Exception as err:  # noqa: BLE001
        raise BuildError(str(errors.from_user_code(f"building the programs of agent {agent.name!r} on env "
                                                   f"{run_config.env!r}", err))) from err


# RunConfig fields that do not change the compiled programs: left out of their cache key
_NOT_IN_PROGRAM = ("run_dir", "checkpoint_every", "tensorboard", "wandb", "wandb_project", "profile", "compile_cache",
                   "coordinator", "num_processes", "process_id", "init_timeout_s", "heartbeat_timeout_s",
                   "preemption_grace_s")


def _describe(agent: AgentSpec, config, run_config: RunConfig, env_params, env_kwargs: dict | None) -> dict | None:
    """The settings the run's programs are made from (``rlpar.program_cache`` adds the code, versions and devices);
    ``None`` unless the agent is one of rlpar's own and the env a built-in id (the code the cache's key covers, see
    there), and for a multi-process run."""
    import envs

    module = sys.modules.get(getattr(agent.make, "__module__", None) or "")
    module_file = vars(module).get("__file__") if module is not None else None
    if jax.process_count() > 1 or not isinstance(module_file, str) or not program_cache.covered([module_file]) \
            or not envs.registry.built_in(run_config.env):
        return None
    leaves, treedef = jax.tree.flatten(env_params)
    return {
        "agent": [agent.name, agent.make.__module__, agent.make.__qualname__],
        "config": [type(config).__module__, type(config).__qualname__, repr(config)],
        "run": {k: v for k, v in dataclasses.asdict(run_config).items() if k not in _NOT_IN_PROGRAM},
        "env_kwargs": repr(sorted((env_kwargs or {}).items())),
        "env_params": [str(treedef)] + [hashlib.sha256(np.asarray(x).tobytes()).hexdigest() + str(np.shape(x))
                                         + str(np.asarray(x).dtype) for x in leaves],
    }


def make_program_factory(agent: AgentSpec, config, slots: seeds.Slots, env, env_params, num_envs: int,
                         eval_episodes: int = 0, pbt: population.PBT | None = None,
                         members: parallel.MemberGroups = parallel.MemberGroups()
                         ) -> Callable[[str | None], program.Program]:
    """``axis_name -> Program``: the run's per-device program on ``num_envs`` envs, every slot vmapped; with
    ``eval_episodes`` (per device) its ``evaluate`` too; with ``pbt``, PBT rounds in its update; ``members``: the
    slots spread over device groups (each device then holds its group's)."""

    def make_program(axis_name):
        def one(cfg):
            agent_fns = agent.make(cfg, env, env_params, num_envs, axis_name)
            return program.make_program(agent_fns, env, env_params, num_envs, cfg.num_steps, axis_name,
                                        eval_episodes=eval_episodes)

        if slots.count == 1 and not slots.hparams:
            return one(config)
        return seeds.vmap_slots(one, config, slots, axis_name, pbt, members)

    return make_program


def _open_run_dir(prepared: _Prepared, config, run_config: RunConfig, resume: bool):
    """``(checkpoints, restored, logger)``; everything that can reject the run dir (no or a corrupt checkpoint,
    other settings) happens here, before compiling. Only the primary process writes files."""
    checkpoints = _open_checkpoints(run_config, resume)
    restored = None
    if resume:
        abstract = parallel.state_shapes(lambda ax: prepared.make_program(ax).init, prepared.devices,
                                         *jax.random.split(jax.random.PRNGKey(config.seed)),
                                         groups=run_config.population_devices)
        restored = _restore(checkpoints, prepared.meta, abstract)
    run_dir = Path(run_config.run_dir) if run_config.run_dir and parallel.is_primary() else None
    logger = _open_logger(run_dir, run_config, prepared.meta, restored)
    if checkpoints is not None and restored is None:
        _check_every_process_sees(Path(run_config.run_dir) / rundir.CONFIG)
    return checkpoints, restored, logger


INIT_COMPILER_OPTIONS = platform.INIT_COMPILER_OPTIONS
INIT_CPU_COMPILER_OPTIONS = platform.INIT_CPU_COMPILER_OPTIONS


def compile_init(lowered, backend: str):
    """``lowered.compile`` with the init's options for the ``backend`` platform (``init_compiler_options`` in
    ``rlpar.platform``, which says why), the next in turn where this XLA lacks one (``No such compile option``)."""
    *preferred, last = platform.init_compiler_options(backend)
    for options in preferred:
        try:
            return lowered.compile(options)
        except jax.errors.JaxRuntimeError as err:
            if "No such compile option" not in str(err):
                raise
    return lowered.compile(last)


class _Init:
    """The run's init program (``_seeded_init``, mapped by ``parallel.trace_init_at``), traced at most once, on first
    use, under a lock: the chunk program's lowering needs the state's shapes, which come from that trace (a separate
    ``jax.eval_shape`` of the init cost the main thread 0.3 s on PPO CartPole), and the init's thread lowers it."""

    def __init__(self, prepared: _Prepared, config, run_config: RunConfig):
        devices, groups = prepared.devices, run_config.population_devices
        self.args = (parallel.replicate(np.uint32(config.seed), devices, groups),
                     parallel.device_positions(devices, groups))
        self._make_init = _seeded_init(prepared.make_program, len(devices), groups)
        self._devices, self._groups, self._backend = devices, groups, run_config.device_backend
        self._lock = threading.Lock()
        self._traced = None

    def _trace(self):
        with self._lock:
            if self._traced is None:
                self._traced = parallel.trace_init_at(self._make_init, self._devices, *self.args, self._groups,
                                                      self._backend)
            return self._traced

    def compile(self):
        with platform.rolled_threefry():  # it runs once: the rolled loop compiles faster (rlpar.platform)
            lowered = self._trace()[0].lower()
        return compile_init(lowered, self._devices[0].platform)

    def shapes(self):
        """The initial state's shapes and shardings, for lowering the chunk program before the state exists."""
        return self._trace()[1]


def _initial_state(prepared: _Prepared, config, run_config: RunConfig, restored,
                   init: _Init | None = None) -> program.TrainState:
    if restored is not None:
        return parallel.rows_from_host(restored.state, prepared.devices, run_config.population_devices)
    init = init or _Init(prepared, config, run_config)
    compiled, _ = program_cache.load_or_compile("init", init.compile, prepared.programs)
    return compiled(*init.args)


def _seeded_init(make_program: Callable[[str | None], program.Program], num_devices: int, groups: int = 1):
    """``axis_name -> init(seed, position)``: the program's init with the run's keys derived inside it, as
    ``split(PRNGKey(seed))`` into the parameter key (shared) and the devices' key, split once more per device
    (``parallel.device_key``; with device groups, per device of a group): nothing runs for the keys outside the one
    compiled init."""

    def make_init(axis_name):
        init = make_program(axis_name).init

        def seeded(seed, position):
            key_params, key_devices = jax.random.split(jax.random.PRNGKey(seed))
            return init(key_params, parallel.device_key(key_devices, position, num_devices, groups))

        return seeded

    return make_init


class _Schedule(NamedTuple):
    """The chunks still to run and when to evaluate."""

    lengths: list[int]  # updates per chunk
    done: int  # updates done before the first of them
    eval_every: int  # evaluate after the chunk reaching each multiple of this, and at the end; 0: never
    seed: int  # the run's seed (evaluation keys: program.eval_key)


def _control(schedule: _Schedule, length: int, done: int, evaluate: bool) -> program.ChunkControl:
    return program.ChunkControl(updates=np.int32(length), evaluate=np.bool_(evaluate), updates_done=np.int32(done),
                                seed=np.uint32(schedule.seed))


def _compile(prepared: _Prepared, run_config: RunConfig, state: Callable[[], Any], schedule: _Schedule,
             max_updates: int, hooks: Hooks, lowered: Callable[[], None] | None = None,
             wait: Callable[[], Any] | None = None):
    """The run's one program (``program.make_chunk``): any chunk length up to ``max_updates``, evaluation in it.
    ``state()``: the state it runs on, or its shapes and shardings (called only when the program is compiled);
    ``lowered()``: called once it is lowered, before XLA compiles it, or before it is loaded whole; ``wait()``: what
    else the first update waits for (the init compiling beside it), inside the compile seconds reported."""
    if not schedule.lengths:  # a finished run resumed: nothing to compile
        return None, 0.0
    if hooks.on_status:
        hooks.on_status("compiling", {})
    start, hits = time.perf_counter(), compile_cache.hits()

    groups = run_config.population_devices

    def make_step(axis_name):
        built = prepared.make_program(axis_name)
        checked = guard.with_finite_flag(built.update, run_config.member_groups.axes(axis_name))
        return program.make_chunk(built._replace(update=checked), max_updates)

    example = parallel.replicate(_control(schedule, max_updates, 0, False), prepared.devices, groups)
    name = f"chunk of {max_updates}"
    if lowered is not None and program_cache.stored(name, prepared.programs):
        lowered()  # it will be loaded whole: what waits for its lowering (the init) starts beside the load
    compiled, loaded = program_cache.load_or_compile(
        name, lambda: parallel.compile_step(make_step, prepared.devices, state(), shared=example,
                                                                 backend=run_config.device_backend, groups=groups,
                                                                 lowered=lowered),
        prepared.programs)
    if wait is not None:
        wait()
    compile_s = time.perf_counter() - start
    if hooks.on_status:  # cached: from JAX's persistent compilation cache; saved: whole, from rlpar.program_cache
        hooks.on_status("compiled", {"seconds": compile_s, "cached": loaded or compile_cache.hits() > hits,
                                     "saved": loaded})
    return compiled, compile_s


class _Outputs(NamedTuple):
    checkpoints: checkpoint.Checkpoints | None
    logger: RunLogger | None
    hooks: Hooks
    meta: dict
    devices: list  # for their memory statistics
    watch: preemption.Watch | None = None  # SIGTERM / SIGUSR1 seen: stop after the chunk
    groups: int = 1  # the slots' device groups (RunConfig.population_devices)


def _train(compiled: Callable, state, schedule: _Schedule, records: list[dict], out: _Outputs, config,
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
            control = parallel.replicate(_control(schedule, length, done, evaluate), out.devices, out.groups)
            start = time.perf_counter()
            with _profiling(run_config.profile if i == min(1, len(schedule.lengths) - 1) else ""):  # one warm chunk
                new_state, raw = compiled(state, control)
                raw = parallel.to_host(raw)  # waits for the devices
            seconds = time.perf_counter() - start
            evaluation = {k: raw.pop(k) for k in (episodes.RETURNS, episodes.LENGTHS) if k in raw}
            raw = {k: v[:length] for k, v in raw.items()}  # the rows of the updates that ran
            _stop_if_nonfinite(raw.pop(guard.FINITE_KEY), done + 1, out.checkpoints)
            members = {k: raw.pop(k) for k in list(raw) if k.startswith(population.METRIC_PREFIX)}
            state, before, done = new_state, done, done + length
            record = summarize(raw, update=done, env_steps=done * config.batch_size, seconds=seconds,
                               steps_in_chunk=length * config.batch_size * slots.count,  # sps: every slot's steps
                               evaluation=evaluation if evaluate else None)
            if members:
                add_members(record, members, before)
            if startup_s is not None:
                record["startup_s"], startup_s = round(startup_s, 3), None
            memory = parallel.memory_stats(out.devices)
            if memory is not None:
                record["memory"] = memory
            _finish_chunk(record, records, out)
            saved = out.checkpoints is not None and _due(before, done, run_config.checkpoint_every,
                                                         config.num_updates)
            if saved:
                _save_checkpoint(out.checkpoints, out.logger, state, done, out.meta, out.groups)
            if done < config.num_updates:
                _stop_if_preempted(out, run_config, done, state, saved)
    except KeyboardInterrupt:
        latest = out.checkpoints.latest() if out.checkpoints is not None else None
        raise Interrupted(done, latest, run_config.run_dir) from None
    return state


def _stop_if_preempted(out: _Outputs, run_config: RunConfig, done: int, state: Any = None,
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
            _save_checkpoint(out.checkpoints, out.logger, state, done, out.meta, out.groups)
        latest = done  # known here: a process other than 0 may return from the save before 0 commits it
    elif out.checkpoints is not None:
        latest = out.checkpoints.latest()
    raise preemption.Preempted(done, latest, run_config.run_dir, out.watch.requested or "a signal to another process")


@contextlib.contextmanager
def _profiling(directory: str):
    """A ``jax.profiler`` trace of what runs inside, into ``directory`` (nothing when empty); TensorBoard's profile
    plugin opens the ``.xplane.pb``, Perfetto (ui.perfetto.dev) the ``.trace.json.gz``."""
    if not directory or not parallel.is_primary():
        yield
        return
    jax.profiler.start_trace(str(Path(directory).absolute()), create_perfetto_trace=True)
    try:
        yield
    finally:
        jax.profiler.stop_trace()


def _finish_chunk(record: dict, records: list[dict], out: _Outputs) -> None:
    """Keep, write and report a chunk's record (before its checkpoint, if one is due)."""
    records.append(record)
    if out.logger is not None:
        out.logger.write(record)
    if out.hooks.on_log is not None:
        out.hooks.on_log(record)


def _episode_and_loss_stats(raw: dict) -> dict:
    """Episode means (weighted by episodes finished) and loss means over everything in ``raw``."""
    count = float(np.sum(raw["episode/count"]))
    stats = {
        "episodes": int(count),
        "episode_return": float(np.sum(raw["episode/return_sum"]) / count) if count else None,
        "episode_length": float(np.sum(raw["episode/length_sum"]) / count) if count else None,
    }
    for name, values in raw.items():
        if name.startswith(rollout.EPISODE_SUM_PREFIX):  # an env's own episode metric: its mean per episode
            stats["episode/" + name[len(rollout.EPISODE_SUM_PREFIX):]] = float(np.sum(values) / count) if count \
                else None
        elif not name.startswith("episode/"):
            stats[name] = float(np.mean(values))
    return stats


def evaluation_stats(returns: np.ndarray, lengths: np.ndarray) -> dict:
    """Mean, std, min and max of the evaluation episodes' returns and lengths (``[N]`` each), e.g. returns
    ``[1, 3]`` -> ``eval/episode_return`` 2, ``eval/episode_return_std`` 1, ``_min`` 1, ``_max`` 3."""
    stats = {}
    for name, values in (("eval/episode_return", returns), ("eval/episode_length", lengths)):
        values = np.asarray(values, np.float64)
        stats.update({name: float(np.mean(values)), f"{name}_std": float(np.std(values)),
                      f"{name}_min": float(np.min(values)), f"{name}_max": float(np.max(values))})
    return stats


def summarize(raw: dict, *, update: int, env_steps: int, seconds: float, steps_in_chunk: int,
              evaluation: dict | None = None) -> dict:
    """Turn a chunk's stacked per-update metrics (``[length]``, or ``[length, S]`` with ``S`` vmapped slots) into
    one log record. With slots, the top-level values pool all slots and ``"slots"`` lists each slot's own.
    ``evaluation``: the episodes of an evaluation after the chunk (``episodes.RETURNS`` and ``LENGTHS``, ``[N]`` or
    ``[S, N]``), summarised by ``evaluation_stats``."""
    record = {
        "update": update,
        "env_steps": env_steps,
        "time_s": round(seconds, 4),
        "sps": steps_in_chunk / seconds if seconds > 0 else float("nan"),
    }
    record.update(_episode_and_loss_stats(raw))
    if evaluation:
        returns, lengths = np.asarray(evaluation[episodes.RETURNS]), np.asarray(evaluation[episodes.LENGTHS])
        record.update(evaluation_stats(returns.ravel(), lengths.ravel()))
    if np.ndim(raw["episode/count"]) == 2:
        num_slots = np.shape(raw["episode/count"])[1]
        record["slots"] = [_episode_and_loss_stats({k: np.asarray(v)[:, i] for k, v in raw.items()})
                           for i in range(num_slots)]
        if evaluation:
            for slot, slot_returns, slot_lengths in zip(record["slots"], returns, lengths):
                slot.update(evaluation_stats(slot_returns, slot_lengths))
    return record


def add_members(record: dict, members: dict, before: int) -> None:
    """Put a chunk's population metrics (``population.METRIC_PREFIX``, ``[length, S]`` each, from update
    ``before + 1`` on) into its record: each slot's values at the chunk's end (``record["slots"][i]["hparams"]``),
    and each PBT round in it (``record["pbt"]``: the update after which it ran, and per member the member it copied,
    the fitness it was ranked by (``None``: it had none) and its values after the round)."""
    names = [k[len(population.METRIC_PREFIX):] for k in members if k not in population.LINEAGE]
    values = {name: np.asarray(members[population.METRIC_PREFIX + name]) for name in names}
    for i, slot in enumerate(record["slots"]):
        slot["hparams"] = {name: float(v[-1, i]) for name, v in values.items()}
    if population.ROUND not in members:
        return
    rounds = []
    for row in np.flatnonzero(np.asarray(members[population.ROUND])[:, 0]):
        scored, fitness = np.asarray(members[population.SCORED])[row], np.asarray(members[population.FITNESS_KEY])[row]
        rounds.append({
            "update": before + int(row) + 1,
            "parent": [int(p) for p in np.asarray(members[population.PARENT])[row]],
            "fitness": [float(f) if ok else None for f, ok in zip(fitness, scored)],
            "hparams": {name: [float(x) for x in v[row]] for name, v in values.items()},
        })
    record["pbt"] = rounds


def chunk_lengths(num_updates: int, log_every: int) -> list[int]:
    """Updates per call of the compiled program: ``log_every`` each, then the remainder; e.g. (25, 10) ->
    [10, 10, 5]."""
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


def _due(before: int, after: int, every: int, num_updates: int) -> bool:
    """Checkpoint (or evaluate) after the chunk of updates ``(before, after]`` if it reached a multiple of ``every``
    or ended the run."""
    return after == num_updates or (every > 0 and after // every > before // every)


# Settings a resumed run must share with the checkpoint for the result to be bit-identical.
_RESUME_MUST_MATCH_RUN = ("env", "log_every", "backend", "num_seeds", "sweep", "eval_every", "eval_episodes", "search",
                          "population", "pbt", "pbt_interval", "pbt_quantile", "pbt_resample", "pbt_fitness",
                          "population_devices")


def _open_checkpoints(run_config: RunConfig, resume: bool) -> checkpoint.Checkpoints | None:
    """The run's checkpoint directory, or ``None`` when it writes none; refuses to mix two runs in one directory.

    Every process of a multi-process run opens it (process 0 as the writer) and they check together that they see
    the same checkpoints, so that all of them resume the same one or all refuse with the same error.
    """
    checkpoints = _checkpoints_found(run_config, resume)
    if checkpoints is None or (run_config.checkpoint_every == 0 and not resume):
        return None
    checkpoint.require_orbax()
    checkpoints.discard_uncommitted()  # orbax temporaries and unmarked steps of a killed run
    return checkpoints


def _checkpoints_found(run_config: RunConfig, resume: bool) -> checkpoint.Checkpoints | None:
    """The run dir's checkpoints (``None`` without a run dir), read only: ``ValueError`` if a new run would mix with
    an earlier one's, or a resumed one has none to continue from."""
    if resume and not run_config.run_dir:
        raise ValueError("resume needs run_dir: the directory of the run to continue")
    if not run_config.run_dir:
        return None
    run_dir = Path(run_config.run_dir)
    checkpoints = checkpoint.Checkpoints(run_dir / rundir.CHECKPOINTS, writer=parallel.is_primary())
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
    latest = parallel.all_processes_agree([steps[-1] if steps else -1, len(steps)])
    if any(seen != latest[0] for seen in latest):
        views = "; ".join(f"process {i}: " + (f"{n} checkpoint(s), newest update {last}" if n else "no checkpoints")
                          for i, (last, n) in enumerate(latest))
        raise checkpoint.CheckpointError(
            f"the processes see different checkpoints in {checkpoints.directory} ({views}): in a multi-process run "
            "the run dir must be on a filesystem every process sees, at the same path"
        )


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
    import json

    step = checkpoints.latest()
    current = json.loads(json.dumps(meta, default=rundir.json_default))
    saved = checkpoints.read_meta(step)  # settings first: another setting may change the state's shape
    pairs = [(name, saved.get(name), current[name]) for name in ("agent", "num_devices")]
    pairs += [(name, saved.get("config", {}).get(name), value) for name, value in current["config"].items()]
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


def _open_logger(run_dir: Path | None, run_config: RunConfig, meta: dict,
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


def _previous_records(logger: RunLogger | None, run_config: RunConfig, restored: checkpoint.Restored) -> list[dict]:
    """The records up to the checkpoint; processes other than 0 read them from process 0's files."""
    if logger is not None:
        return list(logger.previous_records)
    return logs.read_records(run_config.run_dir, restored.position)


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
                     meta: dict, groups: int = 1) -> None:
    """Every process calls this at the same point; ``logger`` is ``None`` in all but the writing process."""
    rows = parallel.rows_to_host(state, groups)  # in a multi-process run: a collective gathering every process's rows
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
