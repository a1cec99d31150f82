"""A run's greedy policy, read back from its run dir, and whole episodes of it on one device.

``load_policy`` rebuilds the agent from ``config.json`` (through the agent registry), restores the newest complete
checkpoint and returns the agent's policy export (``Agent.policy(state, deterministic=True)``) for one slot;
``make_episodes`` steps ``N`` environments with it in one ``lax.scan`` until every first episode has ended, and can
record each step (for a GIF). ``rlpar.tools.evaluate`` and ``rlpar.tools.gif`` are built on these.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np

from rlpar.run import rundir


class Policy(NamedTuple):
    """A trained policy as read back from a run dir."""

    fn: Callable  # (carry, obs [N, ...], key) -> (action [N, ...], carry): the agent's greedy policy export
    initial_carry: Callable[[int], Any]  # num_envs -> carry [N, ...]
    env_id: str
    update: int  # the checkpoint's update number
    slot: int  # which slot of a multi-seed / sweep run


def num_slots(meta: dict) -> int:
    return len(meta.get("slots", [])) or 1


def quiet(message: str) -> None:
    pass


def is_population(meta: dict) -> bool:
    """A run of members searched or trained with PBT (``--search``): its members are compared, not pooled."""
    return bool(meta["run"].get("search"))


def resolve_slot(run_dir: str | Path, meta: dict, slot: int | str | None) -> int:
    """``slot`` as an index: ``"best"`` is the fittest member at the end (``rlpar.core.population.best_member``: the
    best ranked at the last PBT round, else by the last evaluation or training return); ``None`` is ``"best"`` for a
    population run and 0 otherwise. ``ValueError`` naming a slot the run does not have."""
    from rlpar.core import population

    if slot is None:
        slot = "best" if is_population(meta) else 0
    if slot == "best":
        path = Path(run_dir) / rundir.METRICS
        records = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
        best = population.best_member(records)
        if best is None:
            raise ValueError(f"slot='best': the run in {run_dir} logged no members to rank (a run of one slot, or "
                             "no chunk logged yet): give --slot I")
        return best
    if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < num_slots(meta):
        raise ValueError(f"slot={slot!r}: the run in {run_dir} has {num_slots(meta)} slot(s): "
                         f"use 0..{num_slots(meta) - 1}, or best")
    return slot


def load_policy(run_dir: str | Path, num_envs: int = 1, slot: int | str | None = None,
                say: Callable[[str], None] = quiet) -> Policy:
    """The greedy policy of ``run_dir``'s newest complete checkpoint: slot ``slot`` of a multi-seed, sweep or
    population run (``"best"``: its fittest member; default: ``"best"`` for a population run, else slot 0), with the
    hyperparameters that member had in the checkpoint; ``say`` is told when the checkpoint is read."""
    import jax

    from rlpar.core import collectives, parallel, seeds
    from rlpar.run import checkpoint, prepare
    from rlpar.tools import registry

    meta = rundir.read_meta(run_dir)
    slot = resolve_slot(run_dir, meta, slot)
    spec = registry.from_meta(meta)
    config = rundir.build_config(spec.config_cls, meta["config"])
    env, env_params = make_env(meta)
    run = meta["run"]
    slots = seeds.make_slots(run.get("num_seeds", 1), run.get("sweep", ""), spec.config_cls,
                             search=run.get("search", ""), population=run.get("population", 0), seed=config.seed)
    groups = run.get("population_devices", 1)  # checkpoints hold [devices / groups, slots, ...] whatever the groups
    make = prepare.make_program_factory(spec, config, slots, env, env_params,
                                       config.num_envs * groups // meta["num_devices"],
                                       members=collectives.MemberGroups(groups))
    devices = range(meta["num_devices"])  # only the count matters for the shapes
    abstract = parallel.state_shapes(lambda ax: make(ax).init, devices, *jax.random.split(jax.random.PRNGKey(0)),
                                     groups=groups)
    checkpoints = checkpoint.Checkpoints(Path(run_dir) / rundir.CHECKPOINTS)
    step = checkpoints.latest()
    if step is None:
        raise checkpoint.CheckpointError(f"no complete checkpoint in {checkpoints.directory}: nothing to evaluate")
    template = jax.tree.map(lambda a: np.zeros(a.shape, a.dtype), abstract)
    say(f"restoring the checkpoint at update {step} from {checkpoints.path(step)} ...")
    start = time.perf_counter()
    state = jax.tree.map(lambda x: np.asarray(x)[0], checkpoints.restore(step, template).state)  # device 0's row
    say(f"restored in {time.perf_counter() - start:.1f}s")
    agent_state = state.agent
    if state.population is not None:  # the member's values as they were at the checkpoint (PBT may have moved them)
        agent_state = jax.tree.map(lambda x: x[slot], agent_state)
        config = config.replace(**{name: float(v[slot]) for name, v in state.population.hparams.items()})
    agent = spec.make(config, env, env_params, num_envs, None)
    return Policy(agent.policy(agent_state, True), agent.initial_carry, meta["run"]["env"], step, slot)


def make_env(meta: dict):
    import envs

    env_id = meta["run"]["env"]
    if env_id.startswith("<instance"):
        raise ValueError(f"the run trained on an environment instance ({env_id}), which a run dir cannot rebuild: "
                         "evaluate it from Python, or train with an env id (envs.register)")
    return envs.make(env_id)


class Step(NamedTuple):
    """One recorded step of ``make_episodes``; leaves ``[T, N, ...]`` when stacked."""

    state: Any  # the engine env's state the action was taken in
    reward: Any  # [N] or [N, A] the step's reward
    action: Any  # [N, ...] the greedy action
    key: Any  # [N] the key each env's step was given (a replay of the step needs it: JaxMARL's SMAX renderer)


def make_episodes(policy: Policy, env, env_params, num_episodes: int, max_steps: int, record: bool = True):
    """``episodes(key) -> (returns [N], lengths [N], done [N], Step [T, N, ...])``: ``N`` greedy episodes stepped
    ``T = max_steps`` times in one ``lax.scan``; each env's first episode counts (later ones, after the auto-reset,
    are ignored). ``Step.state[t]`` is the state the action of step ``t`` was taken in. With
    ``record=False`` the last output is ``None`` (no ``[T, N]`` copy of the states, which for Craftax's 10,000-step
    limit would not fit in memory)."""
    import jax
    import jax.numpy as jnp

    from envs.wrappers import own_reward
    from rlpar.core.episodes import team_reward

    step_envs = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def step(carry, _):
        obs, state, agent_carry, key, done, ret, length = carry
        key, key_act, key_step = jax.random.split(key, 3)
        action, agent_carry = policy.fn(agent_carry, obs, key_act)
        keys_step = jax.random.split(key_step, num_episodes)
        next_obs, next_state, reward, terminated, truncated, info = step_envs(keys_step, state, action, env_params)
        reward = own_reward(reward, info)
        running = jnp.logical_not(done)
        ret = ret + jnp.where(running, team_reward(reward), 0.0)  # a team env's [N, A]: the team's sum
        length = length + running.astype(jnp.int32)
        done = done | terminated | truncated
        recorded = Step(state, reward, action, keys_step) if record else None
        return (next_obs, next_state, agent_carry, key, done, ret, length), recorded

    def episodes(key):
        key, key_reset = jax.random.split(key)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key_reset, num_episodes), env_params)
        zeros = jnp.zeros(num_episodes)
        init = (obs, state, policy.initial_carry(num_episodes), key, zeros.astype(bool), zeros,
                zeros.astype(jnp.int32))
        (*_, done, ret, length), trajectory = jax.lax.scan(step, init, None, length=max_steps)
        return ret, length, done, trajectory

    return jax.jit(episodes)


def episode_limit(env, env_params, default: int = 10_000) -> int:
    """The env's step limit (``default`` when it has none): how long an evaluation episode may last."""
    from envs.adapters import time_limit

    limit = time_limit(env, env_params)
    return default if limit is None else limit
