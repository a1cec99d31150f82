"""A population of trainings in one program: each member's hyperparameters as state, and population-based training.

The slots of a run (``rlpar.core.seeds``) are its members. Each member's searched hyperparameters are leaves of the
training state (``Members.hparams``, ``[S]`` over the slots), not constants of the program, so one compiled program
serves every value and a value can change while the run goes on. Population-based training (Jaderberg et al. 2017;
the scheduler Ray Tune ships) changes them: every ``interval`` updates the members are ranked by fitness, the bottom
``quantile`` copy the agent state (parameters, optimizer state, statistics, replay buffer: everything the agent
holds; not the environments, which stay each member's own) and the hyperparameters of a member drawn from the top
``quantile`` (``exploit``), then perturb each copied hyperparameter (``explore``): times 0.8 or 1.2, or, with
probability ``resample``, drawn afresh from its search space; clipped to the space.

``exploit`` and ``explore`` are pure functions of arrays with a leading member axis; ``make_round`` puts them in the
per-device update, so a round runs on the devices between two updates of the chunk program, and its lineage (who
copied whom, each member's fitness and new values) comes back as per-update metrics the host logs.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from rlpar.core import collectives, episodes

PBT_STREAM = int.from_bytes(b"pbt ", "big")  # PBT's keys: fold_in(key_params, PBT_STREAM), then the update number
PERTURB_FACTORS = (0.8, 1.2)  # explore multiplies a copied value by one of these
FITNESS = ("train", "eval")  # fitness: mean training return since the last round, or a greedy evaluation's
METRIC_PREFIX = "population/"  # per-update metrics of the members ([S] each): their values and the round's lineage
ROUND, PARENT, FITNESS_KEY, SCORED = LINEAGE = tuple(METRIC_PREFIX + name for name in ("round", "parent", "fitness",
                                                                                       "scored"))


@struct.dataclass
class Members:
    """What the population adds to the training state; every leaf has the slot axis ``[S]`` in front."""

    hparams: dict  # field -> [S] float32: each member's current value
    return_sum: jax.Array  # [S] float32: returns of the training episodes finished since the last round
    episodes: jax.Array  # [S] float32: how many finished
    updates: jax.Array  # [S] int32: updates done (the same in every slot)
    key: jax.Array  # [S, 2] uint32: PBT's key (the same in every slot); a round's is fold_in(key, updates)


class PBT(NamedTuple):
    """Population-based training's settings (``RunConfig``'s ``pbt_*``)."""

    interval: int  # updates between rounds; rounds fall on its multiples before the run's last update
    quantile: float  # fraction of members replaced each round (and of members they copy from)
    resample: float  # probability that explore draws a copied value afresh instead of perturbing it
    fitness: str  # one of FITNESS
    num_updates: int  # the run's updates: no round after the last


def start(hparams: dict, key_params: jax.Array, count: int) -> Members:
    """The members at the start of a run: ``hparams`` field -> ``[S]`` values; accumulators zero."""
    zeros = jnp.zeros((count,), jnp.float32)
    key = jnp.broadcast_to(jax.random.fold_in(key_params, PBT_STREAM), (count, 2))
    return Members(hparams, zeros, zeros, jnp.zeros((count,), jnp.int32), key)


def replaced_count(num_members: int, quantile: float) -> int:
    """How many members a round replaces: ``ceil(num_members * quantile)``, at most half of them (the bottom and the
    top quantile never overlap). E.g. 4 members, 0.25 -> 1; 8, 0.25 -> 2; 2, 0.25 -> 1; 4, 0.9 -> 2."""
    return min(num_members // 2, math.ceil(num_members * quantile))


def exploit(members: Any, fitness: jax.Array, key: jax.Array, quantile: float) -> tuple[Any, jax.Array]:
    """Truncation selection. ``members``: any pytree whose leaves are ``[S, ...]``; ``fitness``: ``[S]`` (NaN, a
    member with no score yet, ranks lowest and is copied by none; equal fitness: the lower index ranks lower). The
    ``replaced_count(S, quantile)`` lowest-ranked members each copy every leaf of a member drawn uniformly from as
    many highest-ranked ones (a draw that falls on an unscored member copies nothing).

    Returns ``(members, parent)``: ``parent[i]`` is the member ``i`` copied, ``i`` itself when it was kept. E.g.
    fitness ``[3, 1, 4, 2]`` with quantile 0.25: member 1 (fitness 1) copies member 2 (fitness 4), ``parent`` is
    ``[0, 2, 2, 3]``."""
    if fitness.ndim != 1:
        raise ValueError(f"fitness must be [S], got shape {fitness.shape}")
    count = fitness.shape[0]
    n = replaced_count(count, quantile)
    order = jnp.argsort(jnp.where(jnp.isnan(fitness), -jnp.inf, fitness), stable=True)  # lowest first
    donors = order[count - n:][jax.random.randint(key, (n,), 0, n)]
    donors = jnp.where(jnp.isnan(fitness[donors]), order[:n], donors)  # an unscored member is copied by none
    parent = jnp.arange(count, dtype=jnp.int32).at[order[:n]].set(donors.astype(jnp.int32))
    return jax.tree.map(lambda x: x[parent], members), parent


def draw(space, key: jax.Array, count: int) -> jax.Array:
    """``count`` values of a ``seeds.Space`` drawn on the device: a list's values uniformly, a range uniformly, a log
    range log-uniformly; ``[count]`` float32."""
    if space.kind == "list":
        return jnp.asarray(space.values, jnp.float32)[jax.random.randint(key, (count,), 0, len(space.values))]
    if space.kind == "log":
        return jnp.exp(jax.random.uniform(key, (count,), jnp.float32, math.log(space.low), math.log(space.high)))
    return jax.random.uniform(key, (count,), jnp.float32, space.low, space.high)


def explore(hparams: dict, parent: jax.Array, key: jax.Array, spaces: dict, resample: float) -> dict:
    """Perturb the hyperparameters of the members that copied another (``parent[i] != i``), after ``exploit``
    copied them: each field's value times 0.8 or 1.2 (even odds), or with probability ``resample`` a fresh draw
    from ``spaces[field]`` (``seeds.Space``), then clipped to the space's ``[low, high]``. Members that kept their
    own state keep their values. ``hparams``: field -> ``[S]``; returns the same."""
    copied = parent != jnp.arange(parent.shape[0])
    out = {}
    for i, (name, values) in enumerate(hparams.items()):
        key_up, key_resample, key_draw = jax.random.split(jax.random.fold_in(key, i), 3)
        space = spaces[name]
        up = jax.random.bernoulli(key_up, 0.5, values.shape)
        perturbed = values * jnp.where(up, jnp.float32(PERTURB_FACTORS[1]), jnp.float32(PERTURB_FACTORS[0]))
        fresh = draw(space, key_draw, values.shape[0])
        new = jnp.where(jax.random.bernoulli(key_resample, resample, values.shape), fresh, perturbed)
        new = jnp.clip(new, jnp.float32(space.low), jnp.float32(space.high))
        out[name] = jnp.where(copied, new, values)
    return out


def fitness_of(members: Members) -> jax.Array:
    """Mean training return per member since the last round; NaN where none finished an episode."""
    return jnp.where(members.episodes > 0, members.return_sum / jnp.maximum(members.episodes, 1.0), jnp.nan)


def count_episodes(members: Members, metrics: dict) -> Members:
    """Add one update's finished training episodes (``metrics``: the engine's ``episode/*``, ``[S]``)."""
    return members.replace(return_sum=members.return_sum + metrics["episode/return_sum"],
                           episodes=members.episodes + metrics["episode/count"], updates=members.updates + 1)


def make_round(pbt: PBT, spaces: dict, evaluate: Callable | None,
               layout: collectives.MemberGroups = collectives.MemberGroups()) -> Callable[[Any], tuple[Any, dict]]:
    """``round(state) -> (state, metrics)`` on a state whose ``population`` is ``Members``: a PBT round when the
    update count is a multiple of ``pbt.interval`` below ``pbt.num_updates``, else nothing; ``metrics`` (``[S]``
    each): whether a round ran, the parents, the fitness it ranked (``scored``: False where a member had none) and
    every member's values after it. ``evaluate(state, key)``: the population's greedy evaluation (every member's),
    for ``pbt.fitness == "eval"``. ``layout``: where the members sit (``rlpar.core.collectives.MemberGroups``); with
    several device groups the state holds this group's members, and a round gathers every member's fitness, agent state
    and values (``layout.gather``), ranks and copies on the whole population alike in every group, and keeps its own."""

    def ranked_fitness(state, key):
        if pbt.fitness == "eval":
            return jnp.mean(evaluate(state, key)[episodes.RETURNS], axis=-1)
        return layout.gather(fitness_of(state.population))

    def do_round(state):
        members = state.population
        key = jax.random.fold_in(members.key[0], members.updates[0])
        key_eval, key_exploit, key_explore = jax.random.split(key, 3)
        fitness = ranked_fitness(state, key_eval)
        everyone = layout.gather((state.agent, members.hparams))
        (agent, hparams), parent = exploit(everyone, fitness, key_exploit, pbt.quantile)
        hparams = explore(hparams, parent, key_explore, spaces, pbt.resample)
        agent, hparams = layout.own((agent, hparams))
        zeros = jnp.zeros_like(members.episodes)
        state = state.replace(agent=agent, population=members.replace(hparams=hparams, return_sum=zeros,
                                                                      episodes=zeros))
        return state, *_typed_as_state((parent, fitness), members)

    def no_round(state):
        count = state.population.episodes.shape[0] * layout.groups
        idle = (jnp.arange(count, dtype=jnp.int32), jnp.full((count,), jnp.nan, jnp.float32))
        return state, *_typed_as_state(idle, state.population)

    def one_round(state):
        updates = state.population.updates[0]
        due = (updates % pbt.interval == 0) & (updates < pbt.num_updates)
        state, parent, fitness = jax.lax.cond(due, do_round, no_round, state)
        scored = ~jnp.isnan(fitness)
        metrics = {ROUND: jnp.broadcast_to(due, parent.shape), PARENT: parent,
                   FITNESS_KEY: jnp.where(scored, fitness, 0.0), SCORED: scored & due}
        return state, metrics

    return one_round


def _typed_as_state(values: tuple, members: Members) -> tuple:
    """``values`` with the per-device type of the state (under ``shard_map``, whether a value may differ between
    devices is part of its type, and both branches of a ``lax.cond`` must agree): plus a zero taken from it."""
    zero = jnp.zeros_like(members.updates[0])
    return tuple(v + zero.astype(v.dtype) for v in values)


def value_metrics(members: Members) -> dict:
    """Each member's current hyperparameter values as per-update metrics (``population/FIELD``, ``[S]``)."""
    return {METRIC_PREFIX + name: values for name, values in members.hparams.items()}


# ---- host side: what the logs say about the members ----

def rounds_of(records: list[dict]) -> list[dict]:
    """The PBT rounds logged in ``records`` (``record["pbt"]``, see ``rlpar.run.records.add_members``), in order."""
    return [r for record in records for r in record.get("pbt", [])]


def population_lines(record: dict) -> list[dict]:
    """A record's PBT rounds as ``population.jsonl`` lines: per round its update, env steps and one entry per member
    (its index, the member it copied, its fitness (``None``: none) and its values after the round)."""
    lines = []
    for r in record.get("pbt", []):
        members = [{"member": i, "parent": parent, "fitness": r["fitness"][i],
                    **{name: values[i] for name, values in r["hparams"].items()}}
                   for i, parent in enumerate(r["parent"])]
        steps_per_update = record["env_steps"] // record["update"] if record["update"] else 0
        lines.append({"update": r["update"], "env_steps": r["update"] * steps_per_update, "members": members})
    return lines


def best_member(records: list[dict]) -> int | None:
    """The fittest member at the end of a population run: the best ranked at the last PBT round; without PBT, the one
    with the best last greedy evaluation, or else the best training return over the last five logged chunks (a member
    that finished no episode ranks last). ``None`` when ``records`` hold no members."""
    if not records or not records[-1].get("slots"):
        return None
    rounds = rounds_of(records)
    if rounds:
        scores = rounds[-1]["fitness"]
    else:
        evaluated = [r for r in records if r["slots"] and EVAL_RETURN in r["slots"][0]]
        if evaluated:
            scores = [slot[EVAL_RETURN] for slot in evaluated[-1]["slots"]]
        else:
            scores = []
            for i in range(len(records[-1]["slots"])):
                recent = [r["slots"][i] for r in records if r["slots"][i].get("episode_return") is not None][-5:]
                count = sum(s["episodes"] for s in recent)
                scores.append(sum(s["episode_return"] * s["episodes"] for s in recent) / count if count else None)
    ranked = [-math.inf if score is None else score for score in scores]
    return max(range(len(ranked)), key=lambda i: (ranked[i], -i))


EVAL_RETURN = "eval/episode_return"
