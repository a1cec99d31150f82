"""The processes and devices a run uses: joining a multi-process run, the CPU device count, selecting devices.

``init_distributed`` joins JAX's distributed runtime, ``request_cpu_devices`` splits a CPU host into devices before
JAX starts, ``select_devices`` picks the run's devices (every process's, in process order), ``is_primary`` says
which process writes the run's files, and ``all_processes_agree`` and ``memory_stats`` read small values from every
process and device. How a per-device program is mapped over these devices is ``rlpar.core.parallel``'s.
"""

from __future__ import annotations

import os
from typing import Sequence

import jax
import numpy as np


def init_distributed(
    coordinator: str,
    num_processes: int = 1,
    process_id: int = 0,
    *,
    init_timeout_s: int = 300,
    heartbeat_timeout_s: int = 100,
) -> bool:
    """Join a multi-process run on JAX's distributed runtime; returns whether this process is in one.

    Args:
      coordinator: ``HOST:PORT`` where process 0 runs the coordination service (every process passes the same);
        ``"auto"`` to let ``jax.distributed.initialize`` read the cluster's environment (SLURM, Open MPI, or
        ``JAX_COORDINATOR_ADDRESS`` with the scheduler's process count and rank); ``""`` for a single-process run
        (nothing happens).
      num_processes, process_id: the run's process count and this process's rank ``0..num_processes-1`` (ignored
        with ``"auto"``).
      init_timeout_s: how long to wait for every process to join; then JAX ends this process with an error
        (``DEADLINE_EXCEEDED``, from its C++ runtime: no Python exception to catch).
      heartbeat_timeout_s: a process silent for this long (it died, or its host did) is declared dead by the
        coordination service, and every other process then exits with an error saying so, instead of waiting
        forever in a collective.

    Call before the first JAX computation. Calling again once joined does nothing.
    """
    if not coordinator:
        return False
    if jax.distributed.is_initialized():
        return True
    # CPU devices in different processes exchange collectives through gloo (the default CPU collectives stay inside
    # one process); GPU and TPU devices use their own (NCCL, ICI) and ignore this setting.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    timeouts = dict(initialization_timeout=init_timeout_s, heartbeat_timeout_seconds=heartbeat_timeout_s)
    try:
        if coordinator == "auto":
            jax.distributed.initialize(**timeouts)
        else:
            jax.distributed.initialize(coordinator, num_processes, process_id, **timeouts)
    except RuntimeError as err:  # e.g. called after the first computation, or a coordinator address in use
        who = "auto-detected process" if coordinator == "auto" else f"process {process_id} of {num_processes}"
        raise RuntimeError(
            f"could not join the multi-process run at coordinator {coordinator!r} as {who} "
            f"(init timeout {init_timeout_s}s; every process must start with the same coordinator and process count, "
            f"and join before its first JAX computation): {err}"
        ) from err
    return True


def is_primary() -> bool:
    """Whether this process writes the run's files (log lines, config.json, metrics.jsonl, checkpoints).

    True for the only process of a single-process run and for process 0 of a multi-process run. The other
    processes compute the same values and skip the writes; every process may read the files afterwards.
    """
    return jax.process_index() == 0


MAX_CPU_DEVICES = max(8, os.cpu_count() or 1)  # see request_cpu_devices


def backends_started() -> bool:
    """Whether JAX has started its backends in this process (after which the CPU device count is fixed)."""
    from rlpar.core import jax_internals

    return jax_internals.backends_started()


def request_cpu_devices(n: int) -> None:
    """Ask XLA for ``n`` CPU devices. Call before the first JAX computation; on CPU-only hosts this is what lets
    ``--devices N`` split the host into N devices. Harmless where an accelerator is the default backend.

    At most ``MAX_CPU_DEVICES`` (8, or the core count if larger): a CPU device is a thread, and more of them than
    cores only share the cores, which is useful to test multi-device code but never faster. Once JAX's backends
    have started the count is fixed; ``select_devices`` then says what to do if it is too small."""
    if not isinstance(n, int) or n <= 1 or backends_started():
        return
    _check_cpu_bound(n)
    jax.config.update("jax_num_cpu_devices", n)


def _check_cpu_bound(n: int) -> None:
    if n > MAX_CPU_DEVICES:
        raise ValueError(f"devices={n}: at most {MAX_CPU_DEVICES} CPU devices on this host (8, or one per core if "
                         f"it has more than 8 cores: CPU devices are threads sharing {os.cpu_count()} cores, so more "
                         f"only time-slice the same cores); use 1..{MAX_CPU_DEVICES}")


def select_devices(num_devices: int | None = None) -> list:
    """The first ``num_devices`` local devices of every process (all of them when ``None`` or 0), process by process.

    In a single-process run these are this host's first ``num_devices`` devices. In a multi-process run every
    process gets the same global list ``[process 0's devices, process 1's devices, ...]``; its own devices sit at
    ``local_positions(devices)``. Raises ``ValueError`` naming the count asked for and what this host has.
    """
    available = jax.local_devices()
    if num_devices in (None, 0):
        num_devices = len(available)
    if not isinstance(num_devices, int) or num_devices < 0:
        raise ValueError(f"devices={num_devices!r}: must be a positive integer, or 0 for all local devices")
    if num_devices > len(available):
        kind = available[0].platform
        if kind == "cpu":
            _check_cpu_bound(num_devices)
            raise ValueError(
                f"devices={num_devices}: JAX's CPU backend already started in this process with {len(available)} "
                "device(s), and the count is fixed once it starts: ask first, before any JAX work (train(..., "
                f"devices={num_devices}) as the first JAX call, or rlpar.core.hosts.request_cpu_devices({num_devices}) "
                f"at the top of the script, or JAX_NUM_CPU_DEVICES={num_devices} in the environment)"
            )
        raise ValueError(
            f"devices={num_devices}: this host has only {len(available)} {kind} device(s) ({available}); "
            f"use 1..{len(available)}"
        )
    if jax.process_count() == 1:
        return available[:num_devices]
    return [d for p in range(jax.process_count()) for d in jax.local_devices(process_index=p)[:num_devices]]


def memory_stats(devices: Sequence) -> list[dict] | None:
    """Bytes in use and the peak so far on each of this process's ``devices``, where the backend reports them
    (GPU, TPU: ``device.memory_stats()``); ``None`` where it does not (XLA:CPU)."""
    stats = []
    for device in devices:
        if device.process_index != jax.process_index():
            continue
        raw = device.memory_stats() if hasattr(device, "memory_stats") else None
        if not raw or "bytes_in_use" not in raw:
            return None
        stats.append({"device": device.id, "bytes_in_use": int(raw["bytes_in_use"]),
                      "peak_bytes_in_use": int(raw.get("peak_bytes_in_use", raw["bytes_in_use"]))})
    return stats or None


def all_processes_agree(values: Sequence[int]) -> list[list[int]]:
    """Every process's ``values`` (small integers, same length everywhere), in process order; a collective.

    For checks that must come out the same in every process (e.g. which checkpoint to resume) so that all raise the
    same error together instead of one exiting while the others wait in the next collective.
    """
    local = np.asarray(values, dtype=np.int32)
    if jax.process_count() == 1:
        return [local.tolist()]
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(local)).reshape(jax.process_count(), -1).tolist()
