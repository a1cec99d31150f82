"""The one switch between the XLA:CPU fast paths and the plain library layers.

rlpar trains small networks, and on XLA:CPU three workarounds are measurably faster than the plain flax/optax code
(figures in ``docs/benchmarks.md``, "Measured history behind the engine's design"):

1. ``agents.layers.Dense``: a matmul whose backward is a ``jax.custom_vjp`` that computes the kernel gradient from an
   explicitly transposed input, because XLA:CPU runs the transposed-operand product autodiff would emit slower.
2. ``agents.layers.Conv3x3``: a 3x3 convolution written as a dense layer over 3x3 patches, because XLA:CPU runs
   convolutions inside ``lax.scan`` (every training step here) several times slower than the equal matmul.
3. The optimizer step (``agents.ppo.learner``, with ``agents.optim``'s chain): the update run on all parameters raveled into one vector, a few fused
   kernels per step instead of a few per parameter array.

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

import contextlib
import os
from typing import Iterator

import jax

PLAIN_LAYERS_ENV = "RLPAR_PLAIN_LAYERS"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")

_override: bool | None = None  # set_fast_paths / fast_paths; None: decide by environment variable and platform


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
    """Whether ``$RLPAR_PLAIN_LAYERS`` asks for the plain layers; ``ValueError`` for a value that is not a boolean."""
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
