"""The one switch between the XLA:CPU fast paths and plain JAX/flax/optax code, and the engine's own fast path.

The switch (``cpu_fast_paths``) is here, in the engine, because the engine has a fast path of its own; the agents'
layers and optimizer read it through ``agents.platform``, which re-exports it and lists their tricks.

The engine's fast path: **threefry unrolled on XLA:CPU.** JAX lowers ``threefry2x32`` (every ``jax.random`` draw
and key split) on CPU as a ``fori_loop`` over its five key-schedule rounds, to keep compiled programs small. On
XLA:CPU each iteration of a loop costs a dispatch plus a copy of every loop-carried buffer (about ten copies per
round here), so one small draw costs tens of kernel calls. A collector draws inside every environment step (the
policy's sample, the environments' auto-reset), and with few environments per device that loop is a large part of
the whole update: PPO on CartPole with 8 environments ran about 1.15x faster with the rounds unrolled, bit-identical
(``docs/benchmarks.md``, "Where a PPO update's time went"). With the switch on, ``install()`` (called when ``rlpar``
builds a program, and on import of ``agents``) registers, for the CPU platform only, a lowering that emits the
unrolled threefry JAX uses on GPU without its custom kernel, as one outlined function per draw shape, written op by
op (``_unrolled_threefry``: JAX's own rule traces its Python rounds through ``jax.numpy`` for every shape, which made
a PPO chunk program's lowering 0.17 s longer than with the rolled loop); with the switch off it emits JAX's rolled
loop. The values are the same either way: threefry is the same function of its inputs (tested against JAX's draws).

How to ask, most specific first:

- ``set_fast_paths(False)`` or ``with fast_paths(False): ...`` in code (``True`` forces the fast paths anywhere);
- the environment variable ``RLPAR_PLAIN_LAYERS=1`` (``0`` or unset: decide by platform);
- otherwise: fast paths on ``jax.default_backend() == "cpu"``, plain code elsewhere.

The switch is read when a function is traced and lowered, never at import, so importing this module starts no JAX
backend. A function already compiled keeps the path it was compiled with.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
from typing import Iterator

import jax
import numpy as np

PLAIN_LAYERS_ENV = "RLPAR_PLAIN_LAYERS"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")

_override: bool | None = None  # set_fast_paths / fast_paths; None: decide by environment variable and platform


def forced() -> bool | None:
    """What ``set_fast_paths``/``fast_paths`` asked for (``None``: nothing; the environment and platform decide)."""
    return _override


def set_fast_paths(enabled: bool | None) -> None:
    """Force the fast paths on (``True``) or off (``False``) for everything traced from now on; ``None`` undoes it."""
    global _override
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(f"set_fast_paths takes True, False or None, got {enabled!r}")
    _override = enabled


@contextlib.contextmanager
def fast_paths(enabled: bool | None) -> Iterator[None]:
    """``set_fast_paths(enabled)`` inside the ``with`` block, the previous setting restored after it."""
    previous = _override
    set_fast_paths(enabled)
    try:
        yield
    finally:
        set_fast_paths(previous)


def plain_layers_requested() -> bool:
    """Whether ``$RLPAR_PLAIN_LAYERS`` asks for the plain code; ``ValueError`` for a value that is not a boolean."""
    value = os.environ.get(PLAIN_LAYERS_ENV, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(
        f"{PLAIN_LAYERS_ENV}={os.environ[PLAIN_LAYERS_ENV]!r}: expected one of 1/0, true/false, yes/no, on/off"
    )


def cpu_fast_paths(platform: str | None = None) -> bool:
    """Whether to use the XLA:CPU fast paths for code that runs on ``platform`` (default ``jax.default_backend()``).

    ``set_fast_paths``/``fast_paths`` win when set; then ``$RLPAR_PLAIN_LAYERS`` turns the fast paths off; otherwise
    they are on exactly when the platform is ``"cpu"``.
    """
    if _override is not None:
        return _override
    if plain_layers_requested():
        return False
    if platform is None:
        platform = jax.default_backend()
    return platform == "cpu"


def resolve(fast: bool | None, platform: str | None = None) -> bool:
    """A module's ``fast`` field resolved: itself when given, else ``cpu_fast_paths(platform)``."""
    return cpu_fast_paths(platform) if fast is None else fast


def xla_cpu_avx512() -> bool:
    """Whether XLA:CPU emits AVX-512 code on this host: the CPU has ``avx512f`` (``/proc/cpuinfo``; False where
    there is none) and ``XLA_FLAGS`` does not cap the instruction set below it (``--xla_cpu_max_isa=AVX2``)."""
    capped = re.search(r"--xla_cpu_max_isa=(\S+)", os.environ.get("XLA_FLAGS", ""))
    if capped and not capped.group(1).upper().startswith("AVX512"):
        return False
    return "avx512f" in _cpu_flags()


@functools.cache
def _cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                field, _, value = line.partition(":")
                if field.strip() == "flags":
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


_installed = False
_thread = threading.local()  # .rolled: this thread lowers threefry rolled whatever the switch says


@contextlib.contextmanager
def rolled_threefry() -> Iterator[None]:
    """Inside the block, in this thread only, threefry is lowered as JAX's rolled loop whatever the switch says: for
    a program that runs once, whose compilation the unrolled rounds lengthen more than they shorten its run (PPO's
    init on CartPole: 2.0 s of compile CPU unrolled, 1.25 s rolled). Thread-local because the runner lowers the init
    in a thread of its own while the main thread may be lowering or compiling another program. Same values either
    way."""
    previous = getattr(_thread, "rolled", False)
    _thread.rolled = True
    try:
        yield
    finally:
        _thread.rolled = previous


def install() -> bool:
    """Register the CPU lowering of ``threefry2x32`` that follows the switch (once per process; later calls do
    nothing). Returns whether it is registered: ``False`` when this JAX lacks the internals it replaces (then JAX's
    own lowering stays, and nothing changes but speed)."""
    global _installed
    if _installed:
        return True
    try:
        from jax._src.interpreters import mlir
        from jax._src.lib.mlir.dialects import hlo
        from jax._src.random import threefry2x32 as threefry

        rolled, primitive = threefry._threefry2x32_cpu_lowering_rule, threefry.threefry2x32_p
        unrolled = _unrolled_threefry(mlir, hlo.add, hlo.xor, hlo.or_, hlo.shift_left, hlo.shift_right_logical)
    except (ImportError, AttributeError):
        return False

    def lowering(ctx, *args, **params):
        fast = cpu_fast_paths("cpu") and not getattr(_thread, "rolled", False)
        return (unrolled if fast else rolled)(ctx, *args, **params)

    mlir.register_lowering(primitive, lowering, platform="cpu", inline=False)
    _installed = True
    return True


_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))  # Threefry-2x32's rotation distances, alternating by group of rounds
_KEY_PARITY = 0x1BD11BDA  # the third key word is key1 ^ key2 ^ this


def _unrolled_threefry(mlir, add, xor, or_, shift_left, shift_right_logical):
    """``threefry2x32``'s twenty rounds and five key injections, emitted as StableHLO ops one by one: the same
    computation as JAX's unrolled lowering (``jax._src.random.threefry2x32``, with ``use_rolled_loops=False``), which
    traces that Python function through ``jax.numpy`` once per draw shape instead, about 25 ms each; a PPO chunk
    program has seven shapes. The four inputs are broadcast to the output's shape first, as JAX's GPU lowering does."""

    def lowering(ctx, k1, k2, x1, x2):
        aval = ctx.avals_out[0]
        rank = len(aval.shape)

        def broadcast(value, value_aval):
            return mlir.broadcast_in_dim(ctx, value, aval, broadcast_dimensions=range(rank - len(value_aval.shape),
                                                                                      rank))

        def const(value):
            return mlir.full_like_aval(ctx, np.uint32(value), aval)

        k1, k2, x1, x2 = (broadcast(v, a) for v, a in zip((k1, k2, x1, x2), ctx.avals_in))
        ks = (k1, k2, xor(xor(k1, k2), const(_KEY_PARITY)))
        x = [add(x1, ks[0]), add(x2, ks[1])]
        for group in range(5):
            for r in _ROTATIONS[group % 2]:
                x[0] = add(x[0], x[1])
                rotated = or_(shift_left(x[1], const(r)), shift_right_logical(x[1], const(32 - r)))
                x[1] = xor(x[0], rotated)
            x[0] = add(x[0], ks[(group + 1) % 3])
            x[1] = add(add(x[1], ks[(group + 2) % 3]), const(group + 1))
        return x

    return lowering
