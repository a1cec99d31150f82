"""Before anything compiles: check a run's settings, choose its devices, make its env and slots, and the factory of
its per-device program; ``check`` is all of that with nothing compiled, written or joined (a dry run).

It imports ``config`` and ``state`` (for the run dir's checkpoints that ``check`` reads), never the chunk loop
or the compile.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from rlpar.core import collectives, hosts, parallel, population, program, seeds
from rlpar.core.agent import AgentSpec
from rlpar.run import checkpoint, compile_cache, rundir
from rlpar.run.config import RunConfig, check_creatable
from rlpar.run.state import checkpoints_found


class Prepared(NamedTuple):
    """Everything ``prepare_run`` checked and built, before anything compiles."""

    devices: list
    slots: seeds.Slots
    env: Any
    env_params: Any
    make_program: Callable[[str | None], program.Program]  # axis_name -> this run's per-device program
    meta: dict


def prepare_run(agent: AgentSpec, config, run_config: RunConfig, env: Any, env_kwargs: dict | None,
                join: bool = True) -> Prepared:
    """Check the settings, join a multi-process run, choose the devices, build the env; nothing compiles. With
    ``join=False`` (a dry run) neither the compilation cache nor a multi-process run is set up: this process's
    devices stand for the run's."""
    import envs

    run_config.validate()
    hosts.request_cpu_devices(run_config.devices)  # takes effect only if no JAX backend has started yet
    if join:
        compile_cache.enable(run_config.compile_cache)
        hosts.init_distributed(
            run_config.coordinator, run_config.num_processes, run_config.process_id,
            init_timeout_s=run_config.init_timeout_s, heartbeat_timeout_s=run_config.heartbeat_timeout_s,
        )
    elif compile_cache.resolve(run_config.compile_cache) is not None:
        check_creatable(compile_cache.resolve(run_config.compile_cache), "compile_cache",
                        "give a writable directory with --compile-cache DIR, or --no-compile-cache")
    devices = hosts.select_devices(run_config.devices)  # in a multi-process run: every process's devices
    parallel.check_groups(len(devices), run_config.population_devices)
    group_size = len(devices) // run_config.population_devices  # the devices that train one member
    config.validate(group_size)
    run_config.validate_devices(group_size)
    slots = make_slots(run_config, config, group_size)
    pbt = run_config.pbt_settings(config.num_updates)
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
    return Prepared(devices, slots, env, env_params, make, meta)


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
    prepared = prepare_run(agent, config, run_config, None, None, join=False)
    checkpoints = checkpoints_found(run_config, resume)
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
    from envs import errors
    from rlpar.core.agent import Agent

    try:
        made = agent.make(config, env, env_params, num_envs, None)
    except ValueError:
        raise
    except Exception as err:  # noqa: BLE001 -- a user's agent failed
        raise errors.from_user_code(f"agent {agent.name!r}: make(config, env, ...)", err) from err
    if not isinstance(made, Agent):
        raise ValueError(f"agent {agent.name!r}: make returned {type(made).__name__}, not an rlpar.agent.Agent "
                         "(init, initial_carry, act, bootstrap, learn, policy; rlpar.agent.AgentFunctions has them)")


def make_program_factory(agent: AgentSpec, config, slots: seeds.Slots, env, env_params, num_envs: int,
                         eval_episodes: int = 0, pbt: population.PBT | None = None,
                         members: collectives.MemberGroups = collectives.MemberGroups()
                         ) -> Callable[[str | None], program.Program]:
    """``axis_name -> Program``: the run's per-device program on ``num_envs`` envs, every slot vmapped; with
    ``eval_episodes`` (per device) its ``evaluate`` too; with ``pbt``, PBT rounds in its update; ``members``: the
    slots spread over device groups (each device then holds its group's)."""

    def make_program(axis_name):
        def one(cfg):
            agent_fns = agent.make(cfg, env, env_params, num_envs, axis_name)
            return program.make_program(agent_fns, env, env_params, num_envs, cfg.num_steps, axis_name,
                                        eval_episodes=eval_episodes,
                                        collector_unroll=getattr(cfg, "collector_unroll", 0))

        if slots.count == 1 and not slots.hparams:
            return one(config)
        return seeds.vmap_slots(one, config, slots, axis_name, pbt, members)

    return make_program
