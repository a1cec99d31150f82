"""XLA:CPU's own mechanism: ``jax.random``'s threefry hash lowered without its round loop, in rlpar's programs only.

JAX lowers ``threefry2x32`` (every ``jax.random`` draw and key split) on CPU as a loop over its five key-schedule
rounds, to keep compiled programs small; on XLA:CPU each iteration of such a loop costs a dispatch and a copy of the
buffers it carries, and a collector draws in every environment step. ``install()`` registers, for the CPU platform,
a lowering that emits the rounds one after another (``_unrolled_threefry``) inside ``lowering()`` blocks, when
``rlpar.core.platform.threefry_unrolled`` says so, and JAX's own lowering everywhere else: rlpar enters the block
around the lowering of its own programs (``rlpar.core.parallel.compile_step``), so a user's other programs in the
same process are lowered as JAX lowers them. The values are the same either way: threefry is the same function of
its inputs (tested against JAX's draws).

The rounds are emitted with JAX's public MLIR API (``jax.interpreters.mlir``, ``jax.extend``); the rule it falls
back to is JAX's private one, so ``install()`` registers nothing on a JAX outside
``rlpar.core.jax_internals.CHECKED``. From JAX 0.11 an optimization barrier after each group of four rounds keeps
every fused kernel to one group: the loop vectorizer of the LLVM in jaxlib 0.11 walks a kernel's chain of values in
time exponential in its depth, and a greedy evaluation's kernel of all twenty rounds never finished compiling. On
0.10 the rounds stay in one kernel, as they were measured there.

Registered when ``rlpar`` builds a program, never at import, so importing rlpar changes nothing in JAX. A function
already compiled keeps the lowering it was compiled with.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

import numpy as np

from rlpar.core import jax_internals
from rlpar.core.platform import (PLAIN_LAYERS_ENV, cpu_fast_paths, fast_paths, forced, plain_layers_requested, resolve,
                                 rolled_threefry, set_fast_paths, threefry_unrolled)

__all__ = ["PLAIN_LAYERS_ENV", "cpu_fast_paths", "fast_paths", "forced", "install", "lowering",
           "plain_layers_requested", "resolve", "rolled_threefry", "set_fast_paths"]

_installed = False
_scope = threading.local()  # .depth: how many lowering() blocks this thread is inside


@contextlib.contextmanager
def lowering() -> Iterator[None]:
    """Inside the block, in this thread, threefry is lowered as ``rlpar.core.platform.threefry_unrolled`` decides
    (once ``install()`` has registered the rule); outside it, by JAX's own rule."""
    _scope.depth = getattr(_scope, "depth", 0) + 1
    try:
        yield
    finally:
        _scope.depth -= 1


def unrolling_here() -> bool:
    """Whether a threefry lowered now, in this thread, is unrolled: inside ``lowering()`` and on the fast paths."""
    return getattr(_scope, "depth", 0) > 0 and threefry_unrolled("cpu")


def install() -> bool:
    """Register the CPU lowering of ``threefry2x32`` that follows ``unrolling_here`` (once per process; later calls
    do nothing). Returns whether it is registered: ``False`` on a JAX outside ``jax_internals.CHECKED``, whose own
    lowering then stays for every program (nothing changes but speed)."""
    global _installed
    if _installed:
        return True
    rolled = jax_internals.rolled_threefry_rule()
    if rolled is None:
        return False
    from jax.extend.random import threefry2x32_p
    from jax.interpreters import mlir

    unrolled = _unrolled_threefry(barriers=jax_internals.release() >= (0, 11))

    def rule(ctx, *args, **params):
        return (unrolled if unrolling_here() else rolled)(ctx, *args, **params)

    mlir.register_lowering(threefry2x32_p, rule, platform="cpu", inline=False)
    _installed = True
    return True


_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))  # Threefry-2x32's rotation distances, alternating by group of rounds
_KEY_PARITY = 0x1BD11BDA  # the third key word is key1 ^ key2 ^ this


def _unrolled_threefry(barriers: bool):
    """``threefry2x32``'s twenty rounds and five key injections as StableHLO ops, one by one (tracing JAX's Python
    rounds through ``jax.numpy`` instead costs a trace per draw shape). The four inputs are broadcast to the output's
    shape first, as JAX's GPU lowering does; with ``barriers``, an optimization barrier closes each group of four
    rounds but the last."""
    from jax.extend.mlir.dialects import stablehlo as hlo
    from jax.interpreters import mlir

    def lowering(ctx, k1, k2, x1, x2):
        aval = ctx.avals_out[0]
        rank = len(aval.shape)
        out_type = mlir.aval_to_ir_type(ctx.module_context, aval)

        def broadcast(value, value_aval):
            return hlo.broadcast_in_dim(out_type, value, list(range(rank - len(value_aval.shape), rank)))

        def const(value):
            return hlo.broadcast_in_dim(out_type, mlir.ir_constant(np.uint32(value)), [])

        def add(a, b):
            return hlo.add(a, b)

        k1, k2, x1, x2 = (broadcast(v, a) for v, a in zip((k1, k2, x1, x2), ctx.avals_in))
        ks = (k1, k2, hlo.xor(hlo.xor(k1, k2), const(_KEY_PARITY)))
        x = [add(x1, ks[0]), add(x2, ks[1])]
        for group in range(5):
            for r in _ROTATIONS[group % 2]:
                x[0] = add(x[0], x[1])
                rotated = hlo.or_(hlo.shift_left(x[1], const(r)), hlo.shift_right_logical(x[1], const(32 - r)))
                x[1] = hlo.xor(x[0], rotated)
            x[0] = add(x[0], ks[(group + 1) % 3])
            x[1] = add(add(x[1], ks[(group + 2) % 3]), const(group + 1))
            if barriers and group < 4:
                x = list(hlo.OptimizationBarrierOp(x).results)
        return x

    return lowering
