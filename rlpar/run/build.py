"""Compile the run's programs: the chunk program (``chunks.compile_programs``) with the init lowered and compiled beside
it in a thread, or the init alone; an error while they are traced becomes one ``BuildError`` line. Every compile is
waited for through ``rlpar.run.compiling``, so Ctrl-C and a scheduler's signal are taken while XLA compiles.

It imports ``prepare`` (the prepared run) and ``chunks`` (the chunk program's compile), never ``runner``.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable

import jax
import numpy as np

from rlpar.core import parallel, platform, program
from rlpar.core.agent import AgentSpec
from rlpar.run import checkpoint, chunks, compiling, preemption
from rlpar.run.config import RunConfig
from rlpar.run.prepare import Prepared


class BuildError(ValueError):
    """Tracing or compiling the run's programs failed: most often a user's env or agent code raising while traced."""


@contextlib.contextmanager
def building(agent: AgentSpec, run_config: RunConfig):
    """Turn an error raised while the run's programs are traced and compiled into one ``BuildError`` line naming the
    agent and env (the traceback stays attached: ``RLPAR_TRACEBACK=1``)."""
    from envs import errors

    try:
        yield
    except (KeyboardInterrupt, checkpoint.CheckpointError, preemption.Preempted):
        raise
    except Exception as err:  # noqa: BLE001
        raise BuildError(str(errors.from_user_code(f"building the programs of agent {agent.name!r} on env "
                                                   f"{run_config.env!r}", err))) from err


def build_programs(prepared: Prepared, config, run_config: RunConfig, restored, schedule: chunks.Schedule,
                   max_updates: int, hooks: chunks.Hooks, compiles: compiling.Compiles | None = None):
    """``(compiled programs (chunks._Programs), compile seconds, initial state)``; ``compiles``: how the main thread
    waits for them (``rlpar.run.compiling``)."""
    compiles = compiles if compiles is not None else compiling.Compiles()
    if restored is not None or jax.process_count() > 1:
        state = (initial_state(prepared, config, run_config, restored) if restored is not None else
                 compiles.call("init", lambda: initial_state(prepared, config, run_config, None)))
        compiled, compile_s = chunks.compile_programs(prepared, run_config, lambda: state, schedule, max_updates,
                                                      hooks, compiles=compiles)
        return compiled, compile_s, state
    # The init is traced here (the chunk program is lowered for its output shapes); its lowering and compile start in
    # a thread once the chunk program is lowered, and run beside the chunk's XLA compile, which holds no Python lock:
    # lowered beside the chunk's tracing instead, the two threads took turns with the GIL (docs/benchmarks.md,
    # "The init compiles beside the chunk program"). Tracing imports modules on first use, and two threads importing
    # one module can deadlock: those imports happen here, before the thread.
    compiling.import_before_threads(prepared.devices[0].platform)
    init = Init(prepared, config, run_config)
    pending = []  # the init's thread: on an error or Ctrl-C it is left to finish on its own

    def start_init():
        if not pending:
            pending.append(compiles.start("init", lambda: initial_state(prepared, config, run_config, None, init)))

    def wait_for_state():
        start_init()  # a no-op once started; compile_programs starts it unless it returns with nothing to build
        return compiles.wait(pending[0])

    compiled, compile_s = chunks.compile_programs(prepared, run_config, init.shapes, schedule, max_updates, hooks,
                                                  start_init, wait_for_state, compiles)
    return compiled, compile_s, wait_for_state()


def compile_init(lowered, backend: str):
    """``lowered.compile`` with the init's options for the ``backend`` platform (``init_compiler_options`` in
    ``rlpar.core.platform``, which says why), the next in turn where this XLA lacks one (``No such compile option``)."""
    *preferred, last = platform.init_compiler_options(backend)
    for options in preferred:
        try:
            return lowered.compile(options)
        except jax.errors.JaxRuntimeError as err:
            if "No such compile option" not in str(err):
                raise
    return lowered.compile(last)


class Init:
    """The run's init program (``seeded_init``, mapped by ``parallel.trace_init_at``), traced at most once, on first
    use, under a lock: the chunk program's lowering needs the state's shapes, which come from that trace (a separate
    ``jax.eval_shape`` of the init would trace it a second time on the main thread), and the init's thread lowers
    it."""

    def __init__(self, prepared: Prepared, config, run_config: RunConfig):
        devices, groups = prepared.devices, run_config.population_devices
        self.args = (parallel.replicate(np.uint32(config.seed), devices, groups),
                     parallel.device_positions(devices, groups))
        self._make_init = seeded_init(prepared.make_program, len(devices), groups)
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
        with platform.rolled_threefry():  # it runs once: the rolled loop compiles faster (rlpar.core.platform)
            lowered = self._trace()[0].lower()
        return compile_init(lowered, self._devices[0].platform)

    def shapes(self):
        """The initial state's shapes and shardings, for lowering the chunk program before the state exists."""
        return self._trace()[1]


def initial_state(prepared: Prepared, config, run_config: RunConfig, restored,
                  init: Init | None = None) -> program.TrainState:
    if restored is not None:
        return parallel.rows_from_host(restored.state, prepared.devices, run_config.population_devices)
    init = init or Init(prepared, config, run_config)
    return init.compile()(*init.args)


def seeded_init(make_program: Callable[[str | None], program.Program], num_devices: int, groups: int = 1):
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
