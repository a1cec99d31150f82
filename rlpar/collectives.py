"""Collectives over an optional device axis.

Per-device code calls these with the ``axis_name`` it was built with. ``axis_name=None`` means one device (no
collective), so the same function runs unmapped, under ``jax.pmap`` or under ``jax.shard_map``; which of those
provides the axis is decided only in ``rlpar/parallel.py``.

A pytree is reduced in one collective per dtype, not one per leaf: its leaves are raveled into one vector, reduced,
and split back. The result is the same (the reduction is elementwise), but the device rendezvous happens once, which
on XLA:CPU is several times cheaper than meeting once per leaf (``benchmarks/collective_cost.py``; figures in
``docs/benchmarks.md``).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp


def _fused(reduce: Callable, tree, axis_name: str):
    leaves, treedef = jax.tree.flatten(tree)
    if len(leaves) <= 1:
        return jax.tree.unflatten(treedef, [reduce(x, axis_name) for x in leaves])
    leaves = [jnp.asarray(x) for x in leaves]
    out = [None] * len(leaves)
    for dtype in dict.fromkeys(x.dtype for x in leaves):  # one collective per dtype, in first-seen order
        group = [i for i, x in enumerate(leaves) if x.dtype == dtype]
        flat = reduce(jnp.concatenate([leaves[i].ravel() for i in group]), axis_name)
        start = 0
        for i in group:
            out[i] = flat[start:start + leaves[i].size].reshape(leaves[i].shape)
            start += leaves[i].size
    return jax.tree.unflatten(treedef, out)


def pmean(tree, axis_name: str | None):
    """Mean of every leaf over the device axis (identity without one), in one collective per dtype."""
    return tree if axis_name is None else _fused(jax.lax.pmean, tree, axis_name)


def psum(tree, axis_name: str | None):
    """Sum of every leaf over the device axis (identity without one), in one collective per dtype."""
    return tree if axis_name is None else _fused(jax.lax.psum, tree, axis_name)


def axis_index(axis_name: str | None) -> jax.Array:
    """This device's position along the device axis (0 without one): device ``i`` of the run's global device list
    gets ``i`` under either backend and in any number of processes."""
    return jnp.int32(0) if axis_name is None else jax.lax.axis_index(axis_name)
