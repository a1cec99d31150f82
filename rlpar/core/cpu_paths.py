"""XLA:CPU's own mechanism: threefry lowered without its round loop (whether this host's XLA:CPU emits AVX-512
is ``rlpar.core.host_cpu``).

Which of them runs is decided in ``rlpar.core.platform`` (``threefry_unrolled``, ``dense_fast_path``), with the figures
that chose it; the switch (``cpu_fast_paths``, ``set_fast_paths``, ``fast_paths``, ``RLPAR_PLAIN_LAYERS``) and
``rolled_threefry`` are re-exported here from there.

Threefry unrolled: JAX lowers ``threefry2x32`` (every ``jax.random`` draw and key split) on CPU as a ``fori_loop``
over its five key-schedule rounds, to keep compiled programs small. ``install()`` (called when ``rlpar`` builds a
program, and on import of ``agents``) registers, for the CPU platform only, a lowering that asks
``rlpar.core.platform.threefry_unrolled`` per draw: yes emits the unrolled threefry JAX uses on GPU without its custom
kernel, as one outlined function per draw shape, written op by op (``_unrolled_threefry``: JAX's own rule traces its
Python rounds through ``jax.numpy`` for every shape, which made a PPO chunk program's lowering 0.17 s longer than
with the rolled loop); no emits JAX's rolled loop. The values are the same either way: threefry is the same function
of its inputs (tested against JAX's draws).

The lowering is chosen when a function is lowered, never at import, so importing this module starts no JAX backend.
A function already compiled keeps the lowering it was compiled with.
"""

from __future__ import annotations

import numpy as np

from rlpar.core.platform import (PLAIN_LAYERS_ENV, cpu_fast_paths, fast_paths, forced, plain_layers_requested, resolve,
                                 rolled_threefry, set_fast_paths, threefry_unrolled)

__all__ = ["PLAIN_LAYERS_ENV", "cpu_fast_paths", "fast_paths", "forced", "install", "plain_layers_requested",
           "resolve", "rolled_threefry", "set_fast_paths"]


_installed = False


def install() -> bool:
    """Register the CPU lowering of ``threefry2x32`` that follows ``rlpar.core.platform.threefry_unrolled`` (once per
    process; later calls do nothing). Returns whether it is registered: ``False`` when this JAX lacks the internals
    it replaces (then JAX's own lowering stays, and nothing changes but speed)."""
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
        return (unrolled if threefry_unrolled("cpu") else rolled)(ctx, *args, **params)

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
