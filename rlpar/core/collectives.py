"""Collectives over an optional device axis, and over the groups of devices a population is spread on.

Per-device code calls these with the ``axis_name`` it was built with. ``axis_name=None`` means one device (no
collective), so the same function runs unmapped, under ``jax.pmap`` or under ``jax.shard_map``; which of those
provides the axis is decided only in ``rlpar/core/parallel.py``.

A pytree is reduced in one collective per dtype, not one per leaf: its leaves are raveled into one vector, reduced,
and split back. The result is the same (the reduction is elementwise), but the device rendezvous happens once, which
on XLA:CPU is several times cheaper than meeting once per leaf (``benchmarks/collective_cost.py``; figures in
``docs/benchmarks.md``).

``MemberGroups`` is how per-device code sees a population spread over groups of devices (``POPULATION_AXIS``): a
slot table's own rows, every member gathered; with one group it does nothing.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

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


POPULATION_AXIS = "population"  # the mesh's first axis when the slots are spread over device groups


class MemberGroups(NamedTuple):
    """How a run's slots (its population's members) sit on the devices, as the per-device code sees it: ``groups``
    device groups along ``POPULATION_AXIS``, each holding ``1/groups`` of the slots, in order (group ``g`` has
    slots ``g * S/groups ...``). With one group (the default) every device holds every slot and both methods are
    the identity. Use them only inside a program mapped with the same ``groups``."""

    groups: int = 1

    def own(self, table: Any) -> Any:
        """This group's rows ``[S/groups, ...]`` of a pytree of per-slot tables ``[S, ...]`` (e.g. each slot's seed
        index, or the members' values after a PBT round)."""
        if self.groups == 1:
            return table

        def rows(x):
            x = jnp.asarray(x)
            size = x.shape[0] // self.groups
            return jax.lax.dynamic_slice_in_dim(x, jax.lax.axis_index(POPULATION_AXIS) * size, size)

        return jax.tree.map(rows, table)

    def in_group(self, tree: Any) -> Any:
        """``tree`` (the same in every group, e.g. a key folded from the program's) typed as varying over the groups,
        like the group's own state: ``shard_map`` types a value computed from replicated inputs as the same on every
        device, and a loop mixing it with a group's state would not type-check. A select on the group's index
        (always true; XLA folds it away) does it, leaving the value as it is."""
        if self.groups == 1:
            return tree
        mine = jax.lax.axis_index(POPULATION_AXIS) >= 0
        return jax.tree.map(lambda x: jnp.where(mine, x, x), tree)

    def gather(self, tree: Any) -> Any:
        """Every slot's rows ``[S, ...]`` from each group's ``[S/groups, ...]``, the same in every group (one
        all-gather per leaf over ``POPULATION_AXIS``)."""
        if self.groups == 1:
            return tree
        return jax.tree.map(lambda x: jax.lax.all_gather(x, POPULATION_AXIS, tiled=True), tree)

    def gather_same(self, tree: Any) -> Any:
        """``gather`` for values already the same on every device of a group (metrics reduced over its devices):
        marked the same in every group too (a max over ``POPULATION_AXIS``; ``shard_map`` checks that a program's
        replicated outputs are), exact for equal values; booleans as int32 on the way."""
        if self.groups == 1:
            return tree

        def same(x):
            if x.dtype == jnp.bool_:
                return jax.lax.pmax(x.astype(jnp.int32), POPULATION_AXIS).astype(jnp.bool_)
            return jax.lax.pmax(x, POPULATION_AXIS)

        return jax.tree.map(same, self.gather(tree))

    def axes(self, axis_name: str | None) -> str | tuple[str, ...] | None:
        """Every mesh axis of the program: what a value must be reduced over to be the same on every device."""
        if self.groups == 1 or axis_name is None:
            return axis_name
        return (POPULATION_AXIS, axis_name)
