"""A chunk's log record: per-update metrics, evaluation episodes and population values summarised on the host.

Plain numpy over what the devices returned; it imports no other module of the host loop.
"""

from __future__ import annotations

import math

import numpy as np

from rlpar.core import episodes, population, rollout


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


def mean_recent_return(records: list[dict], last: int = 5) -> float:
    """Mean episode return over the last ``last`` logged chunks that finished an episode (weighted by episodes)."""
    recent = [r for r in records if r["episode_return"] is not None][-last:]
    episodes = sum(r["episodes"] for r in recent)
    if not episodes:
        return math.nan
    return sum(r["episode_return"] * r["episodes"] for r in recent) / episodes
