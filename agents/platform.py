"""The one switch between the XLA:CPU fast paths and the plain library layers.

rlpar trains small networks, and on XLA:CPU three workarounds in the agents are measurably faster than the plain
flax/optax code (figures in ``docs/benchmarks.md``, "Measured history behind the engine's design"), and one in the
engine (point 4):

1. ``agents.layers.Dense``: a matmul whose backward is a ``jax.custom_vjp`` that computes the kernel gradient from an
   explicitly transposed input, because XLA:CPU runs the transposed-operand product autodiff would emit slower. Where
   XLA:CPU emits AVX-512 code; on AVX2 only below 1,024 rows (``dense_fast_path``): above, the plain layer was faster.
2. ``agents.layers.Conv3x3``: a 3x3 convolution written as a dense layer over 3x3 patches, because XLA:CPU runs
   convolutions inside ``lax.scan`` (every training step here) several times slower than the equal matmul.
3. The optimizer step (``agents.ppo.learner``, with ``agents.optim``'s chain): the update run on all parameters raveled into one vector, a few fused
   kernels per step instead of a few per parameter array.
4. ``jax.random``'s threefry hash unrolled instead of run as a five-iteration loop (``rlpar.cpu_paths``, where the
   switch itself lives: the engine's collector draws random numbers in every step).

Each trick costs something a JAX user expects: a ``custom_vjp`` has no forward-mode rule, so ``jax.jvp`` and
``jax.hessian`` fail through it; the tricks were measured on float32 only; and on GPU/TPU the library layers are the
ones the compilers are tuned for. So the tricks run only where they pay: ``cpu_fast_paths()`` is True when the
platform is XLA:CPU and nobody asked for plain layers. Elsewhere, and whenever asked, the plain flax/optax code runs.
Both paths have the same parameter tree, so a checkpoint written on one loads on the other.

How to ask, most specific first:

- a module's ``fast`` field (``Dense(..., fast=False)``); ``None`` (the default) defers to this module;
- ``set_fast_paths(False)`` or ``with fast_paths(False): ...`` in code (``True`` forces the fast paths anywhere);
- the environment variable ``RLPAR_PLAIN_LAYERS=1`` (``0`` or unset: decide by platform);
- otherwise: fast paths on ``jax.default_backend() == "cpu"``, plain layers on anything else.

The switch is read when a module is applied (traced) or an optimizer is built, never at import, so importing this
module starts no JAX backend. A function already traced by ``jax.jit`` keeps the path it was traced with: change the
switch before building and tracing, not between calls of a compiled function.
"""

from __future__ import annotations

from rlpar.cpu_paths import (PLAIN_LAYERS_ENV, cpu_fast_paths, fast_paths, forced, install, plain_layers_requested,
                             resolve, set_fast_paths, xla_cpu_avx512)

__all__ = ["DENSE_FAST_ROWS_AVX2", "PLAIN_LAYERS_ENV", "cpu_fast_paths", "dense_fast_path", "fast_paths",
           "plain_layers_requested", "resolve", "set_fast_paths", "xla_cpu_avx512"]

install()  # the threefry lowering follows the same switch

DENSE_FAST_ROWS_AVX2 = 1024  # without AVX-512, Dense's fast path below this many rows (dense_fast_path)


def dense_fast_path(platform: str | None = None, rows: int | None = None) -> bool:
    """Whether ``agents.layers.Dense`` takes its fast path when its ``fast`` field is ``None``, for an input of ``rows``
    rows (the batch, flattened; ``None``: unknown): ``set_fast_paths`` when set; otherwise the fast paths on
    (``cpu_fast_paths``) and either XLA:CPU emitting AVX-512 (``xla_cpu_avx512``) or fewer than
    ``DENSE_FAST_ROWS_AVX2`` rows.

    The fast path (the kernel gradient from an explicitly transposed input) was measured faster on an AVX-512 host
    (a whole PPO update about 7% faster, ``docs/benchmarks.md``). On an AVX2 host (JAX 0.10.2, whole PPO updates in one
    process, the two paths in turns, ``benchmarks/dense_paths.py``) the plain layer took 1.00-1.02x the fast path's
    time with minibatches of 256 rows (CartPole, 8 envs), but 0.91-0.99x with 1,024 (Breakout-MinAtar's 2 x 256 MLP)
    and 0.90-0.97x with 32,768 (CartPole, 1024 envs): there the fast path is kept for small batches only."""
    if forced() is not None:
        return forced()
    if not cpu_fast_paths(platform):
        return False
    return xla_cpu_avx512() or (rows is not None and rows < DENSE_FAST_ROWS_AVX2)
