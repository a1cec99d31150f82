"""Stop a run whose loss or parameters stop being finite, naming the update, before anything bad is saved.

The check is cheap: each update reduces its parameters and float metrics to one boolean on the device
(``with_finite_flag``); the host only reads that ``[length]`` vector of a chunk with the other metrics
(``first_nonfinite_update``). A chunk containing a non-finite update is neither logged nor checkpointed.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

FINITE_KEY = "guard/finite"  # per-update metric: True while loss metrics and parameters are all finite


class NonFiniteError(RuntimeError):
    """Training produced a non-finite loss or parameter; the run stopped before logging or saving it."""


OWN_REDUCTION = 1 << 16  # elements from which a leaf is reduced on its own (all_finite)


def all_finite(tree: Any) -> jax.Array:
    """``True`` (a scalar bool array) when every inexact leaf of ``tree`` is finite; integer leaves are ignored.

    Leaves of fewer than ``OWN_REDUCTION`` elements (parameters, optimizer statistics, metrics) are raveled and
    concatenated by dtype into one reduction, which XLA compiles as one kernel; larger ones (a replay buffer's) keep a
    reduction each, which reads them faster. One reduction per leaf made SAC's chunk program (70 float leaves)
    markedly longer to compile (docs/benchmarks.md, "The NaN guard compiled a reduction per leaf")."""
    small: dict[Any, list[jax.Array]] = {}
    flags = []
    for x in jax.tree.leaves(tree):
        x = jnp.asarray(x)
        if not jnp.issubdtype(x.dtype, jnp.inexact):
            continue
        if x.size >= OWN_REDUCTION:
            flags.append(jnp.all(jnp.isfinite(x)))
        else:
            small.setdefault(x.dtype, []).append(jnp.ravel(x))
    flags += [jnp.all(jnp.isfinite(jnp.concatenate(xs))) for xs in small.values()]
    return functools.reduce(jnp.logical_and, flags) if flags else jnp.bool_(True)


def with_finite_flag(update: Callable[[Any], tuple[Any, dict]],
                     axis_name: str | None = None) -> Callable[[Any], tuple[Any, dict]]:
    """Wrap a per-device ``update(state) -> (state, metrics)`` to add ``metrics[FINITE_KEY]``.

    The flag covers the new agent state (``state.agent``: parameters, optimizer state, statistics) and every metric.
    Both are identical on every device (parameters are updated with averaged gradients, metrics are reduced over the
    device axis), so the flag is too; it is still
    reduced over ``axis_name`` (one scalar all-reduce per update), because each device holds its own copy of the
    parameters and the shard_map backend only accepts metrics that are provably the same on every device.
    """

    def update_checked(state):
        state, metrics = update(state)
        finite = jnp.logical_and(all_finite(state.agent), all_finite(metrics))
        if axis_name is not None:  # finite on every device
            finite = jax.lax.psum(jnp.logical_not(finite).astype(jnp.int32), axis_name) == 0
        return state, {**metrics, FINITE_KEY: finite}

    return update_checked


def first_nonfinite_update(finite: np.ndarray, first_update: int) -> int | None:
    """The number of the first update whose flag is False, or ``None`` if all are finite.

    ``finite`` is a chunk's ``[length]`` flags; ``first_update`` the number (1-based, over the run) of its first
    update. E.g. flags ``[True, False, False]`` from update 11 -> 12.
    """
    bad = np.flatnonzero(~np.asarray(finite, dtype=bool))
    return int(first_update + bad[0]) if bad.size else None
