"""Everything rlpar takes from JAX's private modules (``jax._src``), each only on the JAX versions it was checked on.

JAX's private modules change between releases without notice. So each use below asks ``checked()`` first and, on a
JAX outside ``CHECKED`` (or when the private name has gone), does without: JAX's own behaviour stays, and rlpar only
loses speed or a safeguard. ``tests/test_jax_internals.py`` runs each use on the installed JAX and each fallback under a
version outside the range.

- ``backends_started``: whether JAX has opened its backends (``xla_bridge.backends_are_initialized``); elsewhere
  a public probe (``jax.config.update`` of the CPU device count, which JAX refuses once started, then set back).
- ``initialize_lapack``: set up the CPU LAPACK kernels (``lax.linalg``) before a second thread traces, so that the
  imports it makes happen on one thread (``rlpar.run.compiling.import_before_threads``); elsewhere ``False``.
- ``rolled_threefry_rule``: JAX's own CPU lowering of ``threefry2x32`` (``random.threefry2x32``), which
  ``rlpar.core.cpu_paths`` falls back to for every program but rlpar's own; elsewhere ``None``, and
  ``cpu_paths`` registers nothing.
"""

from __future__ import annotations

import jax

# (major, minor) releases of JAX each use was checked on, with the test suite; extend only after running it there.
CHECKED = ((0, 10), (0, 11))


def release(version: str | None = None) -> tuple[int, int]:
    """``(major, minor)`` of ``version`` (default: the installed JAX's), e.g. ``"0.11.2"`` -> ``(0, 11)``."""
    major, minor = (version or jax.__version__).split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def checked(version: str | None = None) -> bool:
    """Whether ``version`` (default: the installed JAX's) is a release the private uses were checked on."""
    return release(version) in CHECKED


def backends_started() -> bool:
    """Whether JAX has started its backends in this process (after which the CPU device count is fixed)."""
    if checked():
        try:
            from jax._src import xla_bridge

            return bool(xla_bridge.backends_are_initialized())
        except (ImportError, AttributeError):
            pass
    count = jax.config.jax_num_cpu_devices
    try:  # JAX refuses a change of the CPU device count once its backends are up
        jax.config.update("jax_num_cpu_devices", 2 if count == 1 else 1)
    except RuntimeError:
        return True
    jax.config.update("jax_num_cpu_devices", count)  # not started: the setting goes back as it was
    return False


def initialize_lapack() -> bool:
    """Set up the CPU LAPACK kernels that programs' custom calls name (what JAX does when it first lowers one);
    ``False`` where this JAX is outside ``CHECKED`` or lacks the function."""
    if not checked():
        return False
    try:
        from jax._src.lax import linalg

        linalg.initialize_lapack()
    except (ImportError, AttributeError):
        return False
    return True


def rolled_threefry_rule():
    """JAX's own CPU lowering rule of ``threefry2x32`` (its rounds in a loop), or ``None`` outside ``CHECKED`` or
    where this JAX has no such rule."""
    if not checked():
        return None
    try:
        from jax._src.random import threefry2x32

        return threefry2x32._threefry2x32_cpu_lowering_rule
    except (ImportError, AttributeError):
        return None
