"""The one module that knows about devices.

Per-device programs elsewhere are pure functions built by factories that take ``axis_name`` (``None`` for no
axis). This module turns them into multi-device programs with ``jax.pmap`` over a named axis, places their
inputs, and reads their outputs back (via ``out_axes`` and ``addressable_shards``, never by indexing a global array).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import numpy as np

AXIS_NAME = "devices"


def request_cpu_devices(n: int) -> None:
    """Ask XLA for ``n`` CPU devices. Call before the first JAX computation; on CPU-only hosts this is what lets
    ``--devices N`` split the host into N devices. Harmless where an accelerator is the default backend."""
    if n > 1:
        try:
            jax.config.update("jax_num_cpu_devices", n)
        except RuntimeError:
            pass  # backends already started (e.g. inside a test process); select_devices() reports a shortfall


def select_devices(num_devices: int | None = None) -> list:
    """The first ``num_devices`` local devices (all of them when ``None`` or 0).

    Raises ``ValueError`` naming the count asked for and what this host has.
    """
    available = jax.local_devices()
    if num_devices in (None, 0):
        return available
    if not isinstance(num_devices, int) or num_devices < 0:
        raise ValueError(f"devices={num_devices!r}: must be a positive integer, or 0 for all local devices")
    if num_devices > len(available):
        kind = available[0].platform
        raise ValueError(
            f"devices={num_devices}: this host has only {len(available)} {kind} device(s) ({available}); "
            f"use 1..{len(available)}"
        )
    return available[:num_devices]


def device_keys(key: jax.Array, devices: Sequence) -> jax.Array:
    """One independent key per device, stacked ``[D, ...]`` along the mapped axis."""
    return jax.random.split(key, len(devices))


def map_init(make_init: Callable[[str | None], Callable], devices: Sequence) -> Callable:
    """``init(shared, key)`` -> per-device state, mapped over ``devices``.

    ``make_init(axis_name)`` returns ``init(shared_arg, key_device)``; ``shared_arg`` (e.g. the parameter key) is
    broadcast to all devices, and this wrapper splits ``key`` into one key per device.
    """
    mapped = jax.pmap(make_init(AXIS_NAME), axis_name=AXIS_NAME, in_axes=(None, 0), devices=devices)

    def init(shared, key):
        return mapped(shared, device_keys(key, devices))

    return init


def map_step(make_step: Callable[[str | None], Callable], devices: Sequence, donate: bool = True):
    """``step(state) -> (state, metrics)`` mapped over ``devices``.

    ``make_step(axis_name)`` returns the pure per-device step. Its metrics must already be reduced over the axis
    (identical on every device); they come back unmapped (``out_axes=None``). The state stays on the devices.
    Returns the mapped function; ``.lower(state).compile()`` works on it for ahead-of-time compilation.
    """
    return jax.pmap(
        make_step(AXIS_NAME),
        axis_name=AXIS_NAME,
        out_axes=(0, None),
        devices=devices,
        donate_argnums=(0,) if donate else (),
    )


def replicas(tree: Any) -> list[Any]:
    """The per-device copies of a mapped pytree, as host numpy pytrees, in device order."""
    leaves, treedef = jax.tree.flatten(tree)
    per_leaf = [[np.asarray(s.data)[0] for s in sorted(x.addressable_shards, key=lambda s: s.index[0].start or 0)] for x in leaves]
    return [jax.tree.unflatten(treedef, [shards[i] for shards in per_leaf]) for i in range(len(per_leaf[0]))]


def first_replica(tree: Any) -> Any:
    """The copy held by the first addressable device, as a host numpy pytree (for replicated values)."""

    def read(x):
        shard = min(x.addressable_shards, key=lambda s: s.device.id)
        return np.asarray(shard.data)[0]

    return jax.tree.map(read, tree)


def to_host(tree: Any) -> Any:
    """Unmapped (``out_axes=None``) outputs as host numpy."""
    return jax.tree.map(np.asarray, tree)
