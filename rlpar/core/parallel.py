"""The one module that knows how a per-device program is mapped over devices (pmap or shard_map).

Per-device programs elsewhere are pure functions built by factories that take ``axis_name`` (``None`` for no
axis). This module turns them into multi-device programs over the named axis ``AXIS_NAME``, with one of two
backends that run the same per-device code:

- ``"pmap"``: ``jax.pmap`` (the default);
- ``"shard_map"``: ``jax.jit`` over ``jax.shard_map`` on a 1-D mesh of the selected devices.

Either way the per-device state is a pytree of global arrays whose leaves have a leading device axis ``[D, ...]``
sharded one row per device (``P(AXIS_NAME)``), parameters included: every device keeps its own copy of the
parameters, exactly as under pmap, so the per-device code sees the same values and the same (varying) types under
both backends and its ``pmean`` of gradients means the same thing.

A population of trainings (``rlpar.core.seeds``: seeds, swept and searched members, a slot each) may be spread over the
devices too (``groups`` > 1, ``--population-devices``): the devices form a 2-D mesh ``POPULATION_AXIS`` x
``AXIS_NAME`` (``M x D/M``), each group of ``D/M`` devices holds ``S/M`` of the ``S`` slots and trains them on all of
their environments, so a gradient's all-reduce spans only the group (none when ``D/M = 1``). The per-device code
still reduces over ``AXIS_NAME`` alone; what crosses groups goes through ``rlpar.core.collectives.MemberGroups`` (a slot
table's own rows, all members gathered). State leaves stay ``[D, ...]``, row ``p`` on device ``p`` (group ``p //
(D/M)``); on the host (``rows_to_host``, checkpoints) they read ``[D/M, S, ...]``, the layout of a one-group run, so a
checkpoint names slots the same way whatever the groups. Only the shard_map backend builds the 2-D mesh.

Multi-process runs (``rlpar.core.hosts.init_distributed``) use JAX's distributed runtime: ``D`` counts the devices of
every process; each process builds the rows of its own devices and steps its own devices' environments, and collectives
span all processes. Outputs are read back via ``out_axes`` and ``addressable_shards`` (this process's rows), never by
indexing a global array.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rlpar.core import cpu_paths
from rlpar.core.collectives import POPULATION_AXIS

AXIS_NAME = "devices"
BACKENDS = ("pmap", "shard_map")  # how the device axis is provided; see the module docstring


def local_positions(devices: Sequence) -> list[int]:
    """Positions in ``devices`` (a global list) of this process's devices; all of them in a single-process run."""
    me = jax.process_index()
    return [i for i, d in enumerate(devices) if d.process_index == me]


def device_keys(key: jax.Array, devices: Sequence) -> jax.Array:
    """One independent key per device of ``devices`` (all processes'), stacked ``[D, ...]`` along the mapped axis.

    Device ``i`` of the global list gets row ``i`` whichever process owns it, so a run on 2 processes x 2 devices
    draws the same keys as a single-process run on 4 devices.
    """
    return jax.random.split(key, len(devices))


def device_key(key: jax.Array, position: jax.Array, count: int, groups: int = 1) -> jax.Array:
    """Row ``position`` of ``device_keys(key, devices)`` for ``count`` devices, computed inside a program (e.g. an
    init mapped by ``trace_init_at``): the same key, bit for bit. With ``groups``, the key of the device's position in
    its group among ``count / groups``: each group draws as a run on that many devices would, so a member trained
    by a group of ``K`` devices gets the keys it would get in a ``K``-device run of its own."""
    size = count // groups
    return jax.random.split(key, size)[position % size]


def device_positions(devices: Sequence, groups: int = 1) -> jax.Array:
    """``[D]`` int32, row ``i`` on ``devices[i]`` holding ``i``: the second argument of a ``trace_init_at`` init."""
    return _shard_rows(np.arange(len(devices), dtype=np.int32), devices, groups)


def check_groups(num_devices: int, groups: int) -> None:
    """``ValueError`` unless ``groups`` (``--population-devices``) is a positive divisor of ``num_devices``."""
    if isinstance(groups, bool) or not isinstance(groups, int) or groups <= 0 or num_devices % groups:
        divisors = [m for m in range(1, num_devices + 1) if num_devices % m == 0]
        raise ValueError(f"population_devices={groups!r}: must divide the {num_devices} device(s) into equal groups: "
                         f"use one of {', '.join(map(str, divisors))}")


def make_mesh(devices: Sequence, groups: int = 1) -> Mesh:
    """The 1-D mesh over ``devices`` with the one axis ``AXIS_NAME`` (the mesh ``jax.pmap`` builds too); with
    ``groups`` > 1 the 2-D mesh ``POPULATION_AXIS`` x ``AXIS_NAME``, ``groups`` rows of consecutive devices."""
    if groups == 1:
        return Mesh(np.asarray(devices), (AXIS_NAME,))
    check_groups(len(devices), groups)
    return Mesh(np.asarray(devices).reshape(groups, -1), (POPULATION_AXIS, AXIS_NAME))


def _row_spec(groups: int) -> PartitionSpec:
    """A state's leading device axis ``[D, ...]``: one row per device, over both axes of a 2-D mesh."""
    return PartitionSpec(AXIS_NAME) if groups == 1 else PartitionSpec((POPULATION_AXIS, AXIS_NAME))


def _check_backend_groups(backend: str, groups: int) -> None:
    _check_backend(backend)
    if groups != 1 and backend != "shard_map":
        raise ValueError(f"backend={backend!r} maps one device axis; population_devices={groups} needs the 2-D "
                         "device mesh of backend shard_map (jax.jit over jax.shard_map)")


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: must be one of {', '.join(BACKENDS)}")


def _rows_to_global(rows: Any, devices: Sequence) -> Any:
    """This process's rows ``[D_local, ...]`` (each already on its device, as pmap returns them) as global arrays
    ``[D, ...]`` sharded one row per device over ``devices``. Moves no data."""
    if jax.process_count() == 1:
        return rows  # pmap's output already is the global array
    sharding = NamedSharding(make_mesh(devices), PartitionSpec(AXIS_NAME))

    def to_global(x):
        blocks = [s.data for s in x.addressable_shards]
        return jax.make_array_from_single_device_arrays((len(devices),) + x.shape[1:], sharding, blocks)

    return jax.tree.map(to_global, rows)


def _shard_rows(table: jax.Array, devices: Sequence, groups: int = 1) -> jax.Array:
    """A table ``[D, ...]`` that every process can compute whole (e.g. ``device_keys``) as a global array with row
    ``i`` on ``devices[i]``; each process places only its own rows."""
    table = np.asarray(table)
    sharding = NamedSharding(make_mesh(devices, groups), _row_spec(groups))
    return jax.make_array_from_callback(table.shape, sharding, lambda index: table[index])


def _leading_axis(tree: Any) -> Any:
    return jax.tree.map(lambda x: x[None], tree)


def _without_leading_axis(tree: Any) -> Any:
    return jax.tree.map(lambda x: x[0], tree)


def _shard_map_init(init: Callable, devices: Sequence, groups: int = 1, check_vma: bool = True) -> Callable:
    """``init(shared, row)`` as ``jit(shard_map)``: ``shared`` replicated, per-device rows ``[D, ...]`` (keys, or
    positions) -> state ``[D, ...]``. ``check_vma=False``: without shard_map's per-device type checks, as
    ``jax.pmap`` maps (some environments' code, JaxMARL's SMAX, fails them)."""

    def per_device(shared, row_block):  # [1, ...]: this device's row
        return _leading_axis(init(shared, _without_leading_axis(row_block)))

    spec = _row_spec(groups)
    return jax.jit(jax.shard_map(per_device, mesh=make_mesh(devices, groups), in_specs=(PartitionSpec(), spec),
                                 out_specs=spec, check_vma=check_vma))


def _shard_map_step(step: Callable, devices: Sequence, donate: bool, shared: bool, groups: int = 1) -> Callable:
    """``step(state[, shared]) -> (state, metrics)`` as ``jit(shard_map)``: state ``[D, ...]`` in and out, ``shared``
    and metrics replicated.

    ``check_vma`` stays on: it proves at trace time that the metrics are reduced over the axis (a metric that still
    varies per device is an error for ``out_specs=P()``) instead of silently returning device 0's value.
    """

    def per_device(state_block, *shared_args):  # every state leaf [1, ...], this device's row
        state, metrics = step(_without_leading_axis(state_block), *shared_args)
        return _leading_axis(state), metrics

    spec = _row_spec(groups)
    in_specs = (spec, PartitionSpec()) if shared else (spec,)
    mapped = jax.shard_map(per_device, mesh=make_mesh(devices, groups), in_specs=in_specs,
                           out_specs=(spec, PartitionSpec()))
    return jax.jit(mapped, donate_argnums=(0,) if donate else ())


def map_init(make_init: Callable[[str | None], Callable], devices: Sequence, backend: str = "pmap") -> Callable:
    """``init(shared, key)`` -> per-device state, mapped over ``devices``; every leaf ``[D, ...]``, one row per device.

    ``make_init(axis_name)`` returns ``init(shared_arg, key_device)``; ``shared_arg`` (e.g. the parameter key) is
    broadcast to all devices, and this wrapper splits ``key`` into one key per device (``device_keys``). In a
    multi-process run every process calls it with the same arguments and gets the global state, of which it holds
    (and computed) its own devices' rows.
    """
    _check_backend(backend)
    if backend == "shard_map":
        mapped = _shard_map_init(make_init(AXIS_NAME), devices)
        return lambda shared, key: mapped(shared, _shard_rows(device_keys(key, devices), devices))

    mapped = jax.pmap(make_init(AXIS_NAME), axis_name=AXIS_NAME, in_axes=(None, 0), devices=devices)

    def init(shared, key):
        own_keys = device_keys(key, devices)[np.asarray(local_positions(devices))]
        return _rows_to_global(mapped(shared, own_keys), devices)

    return init


def trace_init_at(make_init: Callable[[str | None], Callable], devices: Sequence, shared: Any, positions: Any,
                  groups: int = 1, backend: str = "pmap") -> tuple[Any, Any]:
    """An init that derives its per-device values itself, mapped over ``devices`` and traced once for these arguments:
    ``make_init(axis_name)`` returns ``init(shared, position)``, called on each device with ``shared`` whole and
    ``position`` its index in ``devices`` (``positions = device_positions(devices, groups)``). Returns ``(traced,
    shapes)``: ``traced.lower().compile()`` is the init program, to call with ``shared`` and ``positions`` (then
    nothing but that one program runs, which a cached start needs, in any number of processes: it takes and returns
    global arrays); ``shapes`` is the state it returns, ``jax.ShapeDtypeStruct`` leaves ``[D, ...]`` with their
    sharding (one row per device), from the same trace: what lowering a step for that state needs before the state
    exists. ``groups``: see ``MemberGroups``.

    The init is ``jit(shard_map)`` whatever the step's backend: it is what ``jax.pmap`` is in the JAX versions this
    project supports (``compile_step``), the state comes out laid out as either backend's step takes it, and unlike
    ``jax.pmap`` it has ``trace()``. With ``backend="pmap"`` it skips shard_map's per-device type checks, as
    ``jax.pmap`` does, so an init that runs under one runs under the other.
    """
    _check_backend_groups(backend, groups)
    traced = _shard_map_init(make_init(AXIS_NAME), devices, groups, check_vma=backend == "shard_map").trace(
        shared, positions)
    sharding = NamedSharding(make_mesh(devices, groups), _row_spec(groups))
    shapes = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding), traced.out_info)
    return traced, shapes


def _vmapped_devices(init: Callable, num_devices: int, groups: int) -> Callable:
    """``init(shared, rows [D, ...])`` over every device at once, ``vmap`` over the same named axes standing in for
    the devices (both mesh axes with ``groups`` > 1); leaves ``[D, ...]`` in device order."""
    per_device = jax.vmap(init, in_axes=(None, 0), axis_name=AXIS_NAME)
    if groups == 1:
        return per_device
    per_group = jax.vmap(per_device, in_axes=(None, 0), axis_name=POPULATION_AXIS)

    def all_devices(shared, rows):
        out = per_group(shared, jax.tree.map(lambda x: x.reshape((groups, num_devices // groups) + x.shape[1:]), rows))
        return jax.tree.map(lambda x: x.reshape((num_devices,) + x.shape[2:]), out)

    return all_devices


def state_shapes(make_init: Callable[[str | None], Callable], devices: Sequence, shared: Any, key: jax.Array,
                 groups: int = 1) -> Any:
    """Shapes and dtypes (``jax.ShapeDtypeStruct``) of the state ``map_init(make_init, devices)(shared, key)`` would
    return as the host reads it (``rows_to_host``, a checkpoint): every leaf ``[D, ...]``, or ``[D/groups, S, ...]``
    with ``groups``; computed without running or compiling it, for any backend and process count."""
    per_device = _vmapped_devices(make_init(AXIS_NAME), len(devices), groups)
    shapes = jax.eval_shape(per_device, shared, device_keys(key, devices))
    return jax.eval_shape(lambda tree: _host_layout(tree, groups), shapes)


def _host_layout(tree: Any, groups: int) -> Any:
    """Device rows ``[D, S/M, ...]`` (``M = groups``; row ``g * D/M + k`` on device ``k`` of group ``g``) as
    ``[D/M, S, ...]``: row ``k`` holds every slot, slot ``g * S/M + j`` from group ``g``'s slot ``j``; what a
    one-group run has. numpy or jax arrays."""
    if groups == 1:
        return tree

    def relaid(x):
        size = x.shape[0] // groups
        x = x.reshape((groups, size) + x.shape[1:]).swapaxes(0, 1)
        return x.reshape((size, groups * x.shape[2]) + x.shape[3:])

    return jax.tree.map(relaid, tree)


def _device_layout(tree: Any, groups: int) -> Any:
    """The inverse of ``_host_layout``: host rows ``[D/M, S, ...]`` as device rows ``[D, S/M, ...]``."""
    if groups == 1:
        return tree

    def relaid(x):
        size, slots = x.shape[0], x.shape[1] // groups
        x = x.reshape((size, groups, slots) + x.shape[2:]).swapaxes(0, 1)
        return x.reshape((groups * size, slots) + x.shape[3:])

    return jax.tree.map(relaid, tree)


def map_step(make_step: Callable[[str | None], Callable], devices: Sequence, donate: bool = True,
             backend: str = "pmap", *, shared: bool = False, groups: int = 1):
    """``step(state) -> (state, metrics)`` mapped over ``devices``.

    ``make_step(axis_name)`` returns the pure per-device step. Its metrics must already be reduced over the axis
    (identical on every device); they come back unmapped (``out_axes=None`` / ``P()``). The state stays on the
    devices. With ``shared=True`` the step is ``step(state, shared)``: ``shared`` is a pytree that every device
    receives whole (``in_axes=None`` / ``P()``), e.g. how many updates to run; place it with ``replicate``.
    Returns the mapped function; ``.lower(state).compile()`` works on it for ahead-of-time compilation (use
    ``compile_step``, which a multi-process run needs). ``groups``: see ``MemberGroups``; the metrics must then be the
    same over both mesh axes.
    """
    _check_backend_groups(backend, groups)
    if backend == "shard_map":
        return _shard_map_step(make_step(AXIS_NAME), devices, donate, shared, groups)
    return jax.pmap(
        make_step(AXIS_NAME),
        axis_name=AXIS_NAME,
        in_axes=(0, None) if shared else 0,
        out_axes=(0, None),
        devices=devices,
        donate_argnums=(0,) if donate else (),
    )


def replicate(tree: Any, devices: Sequence, groups: int = 1) -> Any:
    """Host values (the same in every process) as global arrays with a whole copy on each of ``devices``: how a
    step's ``shared`` argument is passed, under either backend and in any number of processes."""
    sharding = NamedSharding(make_mesh(devices, groups), PartitionSpec())

    def place(x):
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

    return jax.tree.map(place, tree)


def compile_step(make_step: Callable[[str | None], Callable], devices: Sequence, state: Any, *, shared: Any = None,
                 backend: str = "pmap", donate: bool = True, groups: int = 1,
                 lowered: Callable[[], None] | None = None,
                 run: Callable[[Callable[[], Any]], Any] | None = None) -> Callable:
    """``map_step`` compiled ahead of time for ``state`` (as ``map_init`` returns it) and, if given, an example
    ``shared`` argument (as ``replicate`` places it): ``step(state[, shared]) -> (state, metrics)`` on global
    arrays, for either backend and any number of processes. ``lowered()``, if given, is called between lowering
    and XLA's compile (which holds no Python lock: the runner starts the init's lowering there); ``run``, if given,
    runs that compile (``run(compile) -> compiled``: the runner waits for it in a thread, ``rlpar.run.compiling``).

    In a multi-process run this is how to run a step. A plain call of a multi-process ``jax.pmap`` expects and
    returns only this process's rows; its compiled program (pmap is ``jit`` over ``shard_map`` in the JAX versions
    this project supports, ``jax/_src/pmap.py``) takes the global arrays as they are, like the shard_map backend's.
    """
    mapped = map_step(make_step, devices, donate=donate, backend=backend, shared=shared is not None, groups=groups)
    with cpu_paths.lowering():  # rlpar's own program: threefry as rlpar.core.platform decides
        program = mapped.lower(state) if shared is None else mapped.lower(state, shared)
    if lowered is not None:
        lowered()
    return program.compile() if run is None else run(program.compile)


def replicas(tree: Any) -> list[Any]:
    """The per-device copies of a mapped pytree held by this process, as host numpy pytrees, in device order."""
    leaves, treedef = jax.tree.flatten(tree)
    per_leaf = [[np.asarray(s.data)[0] for s in sorted(x.addressable_shards, key=lambda s: s.index[0].start or 0)]
                for x in leaves]
    return [jax.tree.unflatten(treedef, [shards[i] for shards in per_leaf]) for i in range(len(per_leaf[0]))]


def first_replica(tree: Any, groups: int = 1) -> Any:
    """The copy held by the first addressable device, as a host numpy pytree (for replicated values). With
    ``groups``, each group's first device's slots together, ``[S, ...]`` (a collective: every process calls it)."""
    if groups != 1:
        return jax.tree.map(lambda x: x[0], rows_to_host(tree, groups))

    def read(x):
        shard = min(x.addressable_shards, key=lambda s: s.device.id)
        return np.asarray(shard.data)[0]

    return jax.tree.map(read, tree)


def to_host(tree: Any) -> Any:
    """Unmapped (``out_axes=None``) outputs as host numpy."""
    return jax.tree.map(np.asarray, tree)


def rows_to_host(tree: Any, groups: int = 1) -> Any:
    """A per-device state ``[D, ...]`` as one host numpy pytree of every row, in device order: what a checkpoint
    saves. In a multi-process run each process holds only its own rows, so this gathers the others' over the
    distributed runtime: a collective that every process must call at the same point. With ``groups``, laid out
    ``[D/groups, S, ...]`` (see the module docstring)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        rows = jax.tree.map(np.asarray, multihost_utils.process_allgather(tree, tiled=True))
        return _host_layout(rows, groups)

    def read(x):
        shards = sorted(x.addressable_shards, key=lambda s: s.index[0].start or 0)
        return np.concatenate([np.asarray(s.data) for s in shards])

    return _host_layout(jax.tree.map(read, tree), groups)


def rows_from_host(tree: Any, devices: Sequence, groups: int = 1) -> Any:
    """The inverse of ``rows_to_host``: host rows placed one per device, as ``map_init`` lays out a state (what
    resuming from a checkpoint needs). Every process passes all rows and places only its own, so a checkpoint can be
    resumed by any number of processes with the same global device count."""
    return jax.tree.map(lambda x: _shard_rows(x, devices, groups), _device_layout(tree, groups))
