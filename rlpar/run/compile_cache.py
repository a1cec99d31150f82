"""JAX's persistent compilation cache, on by default: a second identical run loads its program instead of compiling.

The cache is JAX's own (``jax_compilation_cache_dir``). Its key is a hash of the lowered program (the HLO, in which
the config's shapes and constants are written), the compile options, the device assignment (so the device count and
backend), and the jax/jaxlib versions: a different config, device count, backend or JAX version is a different
entry, never a wrong program. rlpar gives the cache a size limit (``MAX_BYTES``), which makes JAX evict the least
recently used entries and hold a file lock (``filelock``) around every read and write, so several processes (or the
processes of one multi-process run) may share a directory.

Where: ``$RLPAR_CACHE_DIR`` (``off`` turns it off), else ``$XDG_CACHE_HOME/rlpar/jax``, else ``~/.cache/rlpar/jax``;
``--compile-cache DIR`` moves it and ``--no-compile-cache`` (``compile_cache="off"``) turns it off for a run.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

OFF = "off"
MAX_BYTES = 2 * 2**30  # the cache's size limit; the least recently used entries go first
HIT_EVENT = "/jax/compilation_cache/cache_hits"
_hits = threading.local()  # persistent-cache hits seen by each thread (one listener, registered on first use): the
# runner compiles the init in a thread of its own while the main thread compiles the chunk program
_listening = [False]


def default_dir() -> Path | None:
    """``$RLPAR_CACHE_DIR`` (``off``: no cache), else ``$XDG_CACHE_HOME/rlpar/jax``, else ``~/.cache/rlpar/jax``."""
    if os.environ.get("RLPAR_CACHE_DIR"):
        return None if os.environ["RLPAR_CACHE_DIR"] == OFF else Path(os.environ["RLPAR_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rlpar" / "jax"


def resolve(setting: str) -> Path | None:
    """The cache directory for a ``compile_cache`` setting: ``""`` the default, ``"off"`` none, else that path."""
    if setting == OFF:
        return None
    return Path(setting).expanduser().absolute() if setting else default_dir()


def enable(setting: str) -> Path | None:
    """Point JAX's persistent cache at ``resolve(setting)`` (creating it), caching every program however quick to
    compile; returns the directory, or ``None`` when off. Takes effect for programs compiled afterwards."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    directory = resolve(setting)
    _listen()
    if directory is None:
        bypass_for_this_process()
        return None
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"compile_cache={str(directory)!r}: cannot create the compilation cache directory ({err}); "
                         "give a writable directory with --compile-cache DIR, or --no-compile-cache") from None
    if jax.config.jax_compilation_cache_dir != str(directory) or not jax.config.jax_enable_compilation_cache:
        jax.config.update("jax_enable_compilation_cache", True)
        jax.config.update("jax_compilation_cache_dir", str(directory))
        compilation_cache.reset_cache()  # JAX decides once per process whether to use it: decide again
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    # A size limit turns on JAX's least-recently-used eviction, and with it a file lock around every read and
    # write: without one, entries are written in place and the directory grows without bound.
    jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    return directory


def bypass_for_this_process() -> None:
    """Compile this process's programs without JAX's cache (neither read nor written): ``enable("off")``."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()  # JAX decides once per process whether to use it: decide again


def _listen() -> None:
    if _listening[0]:
        return
    import jax

    def on_event(event: str, **kwargs) -> None:
        if event == HIT_EVENT:
            _hits.count = getattr(_hits, "count", 0) + 1

    jax.monitoring.register_event_listener(on_event)
    _listening[0] = True


def hits() -> int:
    """Persistent-cache hits so far in the calling thread (compare before and after a compile)."""
    return getattr(_hits, "count", 0)


def count_hits(n: int) -> None:
    """Count ``n`` hits of another thread as the calling thread's: a compile it waited for in a thread of its own
    (``rlpar.run.compiling``)."""
    _hits.count = hits() + n
