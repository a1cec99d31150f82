"""The per-device training program the engine runs for any agent: collect, count episodes, learn; evaluate.

``make_program(agent, ...)`` returns ``Program(init, update, evaluate)``, pure functions of one device that take the
device axis as ``axis_name`` like everything per-device; ``rlpar.core.parallel`` maps them over devices,
``rlpar.core.seeds`` over seeds and swept hyperparameters. ``make_chunk`` turns them into the program a run calls
once per logged chunk (``rlpar.run.runner``): up to ``log_every`` updates in a loop whose count is an argument, then,
when asked, a greedy evaluation, a branch of the same program or (``make_evaluation``) a program of its own.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from rlpar.core import cpu_paths, episodes, rollout
from rlpar.core.agent import Agent
from rlpar.core.collectives import axis_index
from rlpar.core.rollout import Experience, RolloutState


@struct.dataclass
class TrainState:
    """Per-device state of a run: the agent's own state and the collector's (environments, observations, carry,
    acting key). Every leaf has this device's values; the agent's parameters are identical on every device. A run of
    several slots adds ``population`` (``rlpar.core.population.Members``: each slot's hyperparameters, PBT's
    counters)."""

    agent: Any
    rollout: RolloutState
    population: Any = None


class Program(NamedTuple):
    init: Callable[[jax.Array, jax.Array], TrainState]  # (key_params shared by devices, key_device) -> state
    update: Callable[[TrainState], tuple[TrainState, dict]]  # one collect + learn; metrics reduced over devices
    # (state, key the same on every device) -> greedy-episode metrics, the same on every device; None: no evaluation
    evaluate: Callable[[TrainState, jax.Array], dict] | None = None


def make_program(agent: Agent, env, env_params, num_envs: int, num_steps: int, axis_name: str | None,
                 eval_episodes: int = 0, eval_steps: int | None = None, collector_unroll: int = 0) -> Program:
    """The training program of ``agent`` on ``num_envs`` environments of this device, ``num_steps`` steps each per
    update. ``update``'s metrics are the agent's plus ``episode/count``, ``episode/return_sum`` and
    ``episode/length_sum`` over the episodes that ended during the collect, summed over devices.

    With ``eval_episodes > 0``, ``evaluate(state, key)`` runs that many episodes per device of the agent's
    deterministic policy export (``agent.policy(state, True)``, carry from ``agent.initial_carry``) on environments
    of its own, each to its end or ``eval_steps`` steps (default: ``episodes.max_steps(env_params)``), and returns
    every device's episodes (``episodes.RETURNS``, ``episodes.LENGTHS``: ``[devices * eval_episodes]``). Device
    ``i`` draws its episodes from ``fold_in(key, i)``; the training state is only read. ``collector_unroll``: the
    collect's environment steps per loop iteration (``AgentConfig.collector_unroll``; 0: the backend's choice).
    """
    cpu_paths.install()  # threefry unrolled on XLA:CPU as rlpar.core.platform.threefry_unrolled decides
    collect = rollout.make_collector(env, env_params, agent.act, num_steps, bootstrap=agent.bootstrap,
                                     initial_carry=agent.initial_carry, unroll=collector_unroll)

    def init(key_params: jax.Array, key_device: jax.Array) -> TrainState:
        key_env, key_agent = jax.random.split(key_device)
        agent_state = agent.init(key_params, key_agent)
        return TrainState(agent_state, rollout.reset(env, env_params, key_env, num_envs, agent.initial_carry(num_envs)))

    def update(state: TrainState) -> tuple[TrainState, dict]:
        end, traj = collect(state.agent, state.rollout)
        agent_state, metrics = agent.learn(state.agent, Experience(traj, state.rollout, end))
        return TrainState(agent_state, end), {**metrics, **rollout.episode_metrics(traj, axis_name)}

    if not eval_episodes:
        return Program(init, update)
    run_episodes = episodes.make_episodes(env, env_params, agent.initial_carry, eval_episodes,
                                          eval_steps or episodes.max_steps(env_params))

    def evaluate(state: TrainState, key: jax.Array) -> dict:
        key_device = jax.random.fold_in(key, axis_index(axis_name))
        return episodes.gather(run_episodes(agent.policy(state.agent, True), key_device), axis_name)

    return Program(init, update, evaluate)


@struct.dataclass
class ChunkControl:
    """What the host tells one call of the chunk program; replicated: every device receives the same values."""

    updates: jax.Array  # int32 scalar: updates to run in this call, 1..max_updates
    evaluate: jax.Array  # bool scalar: evaluate the policy after them
    updates_done: jax.Array  # int32 scalar: updates the run had done before this call
    seed: jax.Array  # uint32 scalar, the run's seed: the evaluation after update u draws from
    # fold_in(eval_key(seed), u)


EVAL_STREAM = int.from_bytes(b"eval", "big")  # evaluation keys: fold_in(PRNGKey(seed), EVAL_STREAM), then the update


def eval_key(seed) -> jax.Array:
    """The run's evaluation key, a stream of its own (the training keys come from ``split(PRNGKey(seed))``); derived
    inside the chunk program, so a run starts without compiling anything for its keys."""
    return jax.random.fold_in(jax.random.PRNGKey(seed), EVAL_STREAM)


def make_chunk(program: Program, max_updates: int) -> Callable[[TrainState, ChunkControl], tuple[TrainState, dict]]:
    """``chunk(state, control) -> (state, metrics)``: ``control.updates`` updates in one loop, then, if
    ``control.evaluate``, ``program.evaluate`` of the state they end with.

    The update count is a traced argument, so one compiled program serves every chunk of a run (a last, shorter one
    included), and evaluation is a ``lax.cond`` branch of the same program (give a ``program`` without ``evaluate``
    to leave it out, and evaluate with ``make_evaluation``'s program: ``rlpar.core.platform.evaluation_in_chunk``
    says where which is faster). ``metrics``: each update's, stacked ``[max_updates, ...]`` (rows from
    ``control.updates`` on are zeros; the host drops them), and the evaluation's (zeros when it did not run; absent
    when ``program.evaluate`` is ``None``). The evaluation key depends only on ``control``, never on the training
    keys, so evaluating leaves training exactly as it would be without.
    """

    update = jax.jit(program.update)  # traced once: for the metrics' shapes, then reused inside the loop
    evaluate = None if program.evaluate is None else make_evaluation(program)

    def run_updates(state: TrainState, count: jax.Array):
        shapes = jax.eval_shape(update, state)[1]
        stacked = jax.tree.map(lambda s: jnp.zeros((max_updates,) + s.shape, s.dtype), shapes)

        def one(i, carry):
            state, stacked = carry
            state, metrics = update(state)
            return state, jax.tree.map(lambda rows, m: rows.at[i].set(m), stacked, metrics)

        return jax.lax.fori_loop(0, count, one, (state, stacked))

    def chunk(state: TrainState, control: ChunkControl) -> tuple[TrainState, dict]:
        state, metrics = run_updates(state, control.updates)
        if evaluate is None:
            return state, metrics
        shapes = jax.eval_shape(evaluate, state, control)
        skip = lambda: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
        return state, {**metrics, **jax.lax.cond(control.evaluate, lambda: evaluate(state, control), skip)}

    return chunk


def make_evaluation(program: Program) -> Callable[[TrainState, ChunkControl], dict]:
    """``evaluation(state, control) -> metrics``: ``program.evaluate`` of the state a chunk ended with, on the key
    of the update it ended at (``fold_in(eval_key(control.seed), control.updates_done + control.updates)``): what
    ``make_chunk`` runs when ``control.evaluate``, as a function of its own (a program of its own where that is
    faster; ``control.evaluate`` is not read)."""
    evaluate = jax.jit(program.evaluate)  # traced once: for the shapes, then the call

    def evaluation(state: TrainState, control: ChunkControl) -> dict:
        return evaluate(state, jax.random.fold_in(eval_key(control.seed), control.updates_done + control.updates))

    return evaluation
