"""The agents' view of ``rlpar.core.platform``: the one switch between the XLA:CPU fast paths and the plain library
layers.

rlpar trains small networks, and on XLA:CPU three workarounds in the agents are measurably faster than the plain
flax/optax code, and one in the engine (point 4). Whether each runs is decided in ``rlpar.core.platform``, next to the
figure that chose it (and tabulated in ``docs/accelerators.md``, "What each backend runs, and why"):

1. ``agents.layers.Dense``: a matmul whose backward is a ``jax.custom_vjp`` that computes the kernel gradient from an
   explicitly transposed input (``dense_fast_path``: where XLA:CPU emits AVX-512 code; on AVX2 only below 1,024
   rows).
2. ``agents.layers.Conv3x3``: a 3x3 convolution written as a dense layer over 3x3 patches (``conv_as_patches``).
3. The optimizer step (``agents.ppo.learner``, with ``agents.optim``'s chain): the update run on all parameters
   raveled into one vector, a few fused kernels per step instead of a few per parameter array (``raveled_update``).
4. ``jax.random``'s threefry hash unrolled instead of run as a five-iteration loop in the programs rlpar lowers
   (``rlpar.core.cpu_paths``, with ``rlpar.core.platform.threefry_unrolled``: the engine's collector draws random
   numbers in every step); importing this module changes nothing in JAX.

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

from rlpar.core.host_cpu import xla_cpu_avx512
from rlpar.core.platform import (DENSE_FAST_ROWS_AVX2, PLAIN_LAYERS_ENV, conv_as_patches, cpu_fast_paths,
                                 dense_fast_path, fast_paths, forced, plain_layers_requested, raveled_update, resolve,
                                 set_fast_paths)

__all__ = ["DENSE_FAST_ROWS_AVX2", "PLAIN_LAYERS_ENV", "conv_as_patches", "cpu_fast_paths", "dense_fast_path",
           "fast_paths", "plain_layers_requested", "raveled_update", "resolve", "set_fast_paths", "xla_cpu_avx512"]
