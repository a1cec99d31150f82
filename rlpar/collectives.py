"""Collectives over an optional device axis.

Per-device code calls these with the ``axis_name`` it was built with. ``axis_name=None`` means one device (no
collective), so the same function runs unmapped, under ``jax.pmap`` or under ``jax.shard_map``; which of those
provides the axis is decided only in ``rlpar/parallel.py``.
"""

from __future__ import annotations

import jax


def pmean(tree, axis_name: str | None):
    """Mean of every leaf over the device axis (identity without one)."""
    return tree if axis_name is None else jax.lax.pmean(tree, axis_name)


def psum(tree, axis_name: str | None):
    """Sum of every leaf over the device axis (identity without one)."""
    return tree if axis_name is None else jax.lax.psum(tree, axis_name)
