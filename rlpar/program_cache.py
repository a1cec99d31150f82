"""Whole compiled programs kept by what they are made from, so a warm start neither traces, lowers nor compiles.

JAX's persistent cache (``rlpar.compile_cache``) keys a program by its lowered HLO: a run must trace and lower its
programs before it can look one up, and on a 2-core CPU that was most of the CartPole preset's 2 s warm "compile".
This cache keys the compiled executable by what the HLO is made from instead, and loads it with
``jax.experimental.serialize_executable`` before anything is traced. The key (``snapshot``, then ``Snapshot.key`` per program) covers:

- the code: every file of rlpar's own packages (``rlpar``, ``agents``, ``envs``: path, size, modification time), the
  installed distributions and their versions (the ``*.dist-info`` names in site-packages; the standard library by
  Python's version), and every other loaded module's file (a user's agent, env or script; a package installed for
  development with ``pip install -e``), so an edited, added, upgraded or installed file makes another key. Which
  installed or standard modules happen to be loaded is left out (it varies with incidental code paths). A module first
  imported while a program is traced (distrax is) must be one of the covered kinds, or the program is not stored;
- jax's and jaxlib's versions, jax's configuration (every ``JAX_*`` setting but the cache's own), ``XLA_FLAGS``, the
  backend, its version and the host CPU's model and feature flags (the CPU backend compiles for the host);
- the devices of the program (ids, kinds, processes);
- the caller's description of the programs: for the runner the agent, its config, the env id, kwargs and parameters,
  and the run settings that shape a program (``rlpar.runner._describe``); each program's name (its inputs' shapes
  follow from all of these).

A program is stored only when this process compiled it. When JAX's cache supplied it instead (the same HLO under a new
key: after an edit that changed nothing traced, an upgrade, another script), it is used but not stored (XLA:CPU
re-serializes such an executable without some of its functions), and a marker makes the next run with that key
compile its programs without JAX's cache and store them: one slower run, then the fast start.

What a key cannot cover is not cached here: the runner passes ``None`` for an env given as an instance (its
attributes are not code), an agent or env whose module has no file (an interactive session), a multi-process run.
Those programs still go through JAX's cache. Entries are written to a temporary file and renamed, so processes may
share the directory; beyond ``MAX_BYTES`` the least recently used go first. A file that cannot be read or loaded is
a miss, never an error. Only load a directory you trust: loading an executable runs its code.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import pickle
import platform
import sys
import sysconfig
from pathlib import Path
from typing import Any, Callable, NamedTuple

from jax.experimental import serialize_executable

SUBDIR = "programs"  # under the compilation cache's directory (JAX's own entries are files at its top level)
SUFFIX = ".program"
MARKER = ".seen"  # a run whose programs came from JAX's cache, so were not stored: the next such run compiles them
MAX_BYTES = 512 * 2**20
MAX_MARKERS = 256
VERSION = 1  # of this file format and key; bump to orphan every entry
_directory: list[Path | None] = [None]
_CONFIG_SKIPPED = ("jax_compilation_cache", "jax_persistent_cache", "jax_explain_cache_misses",
                   "jax_enable_compilation_cache")  # JAX's cache settings: they change no program


def configure(directory: Path | None) -> None:
    """Keep programs under ``directory/programs`` (``rlpar.compile_cache.enable`` calls this); ``None``: off."""
    _directory[0] = None if directory is None else Path(directory) / SUBDIR


def directory() -> Path | None:
    return _directory[0]


OWN_PACKAGES = ("rlpar", "agents", "envs")  # fingerprinted file by file, loaded or not


def _own_roots() -> list[Path]:
    return [Path(__file__).resolve().parents[1] / name for name in OWN_PACKAGES]


def _installed_roots() -> list[Path]:
    """The ``sys.path`` directories that hold installed distributions (site-packages), their console scripts (e.g.
    ``rlpar-train``) and the standard library."""
    roots = [Path(sysconfig.get_paths()[name]).resolve() for name in ("stdlib", "platstdlib", "scripts")]
    for entry in sys.path:
        if entry and os.path.isdir(entry) and os.path.basename(entry.rstrip(os.sep)) in ("site-packages",
                                                                                          "dist-packages"):
            roots.append(Path(entry).resolve())
    return roots


def loaded_modules() -> dict[str, str]:
    """``{name: file}`` of every loaded module that has a file; modules not loaded yet (``importlib``'s lazy ones,
    ``envs.deferred``'s stand-ins) are left alone: touching one would load it."""
    files = {}
    for name, module in list(sys.modules.items()):
        if issubclass(type(module), importlib.util._LazyModule):  # type(), not isinstance: that reads __class__
            continue
        path = vars(module).get("__file__")  # not getattr: envs.deferred's stand-ins import on a missing attribute
        if isinstance(path, str):
            files[name] = path
    return files


def _stat(path: str):
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def code_fingerprint(modules: dict[str, str]) -> dict:
    """What programs traced in this process are made from, as far as files tell (module docstring); ``modules``:
    ``loaded_modules()``."""
    own = []
    for root in _own_roots():
        for path in sorted(root.rglob("*.py")):
            own.append((str(path), _stat(str(path))))
    installed = []
    for root in _installed_roots():
        try:
            names = os.listdir(root)
        except OSError:
            continue
        installed.append((str(root), sorted(n for n in names if n.endswith((".dist-info", ".egg-info")))))
    roots = _installed_roots() + _own_roots()
    others = sorted((name, path, _stat(path)) for name, path in modules.items() if not _under(path, roots))
    return {"own": own, "installed": installed, "modules": others}


def covered(paths) -> bool:
    """Whether modules at ``paths`` (imported after a key was taken) are covered by that key anyway: files of an
    installed distribution, of the standard library, or of rlpar's own packages."""
    roots = _installed_roots() + _own_roots()
    return all(_under(path, roots) for path in paths)


def _under(path: str, roots: list[Path]) -> bool:
    resolved = Path(path).resolve()
    return any(resolved.is_relative_to(root) for root in roots)


def _host() -> dict:
    cpu = {}
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                field, _, value = line.partition(":")
                if field.strip() in ("model name", "flags", "Features", "CPU part") and field.strip() not in cpu:
                    cpu[field.strip()] = value.strip()
    except OSError:
        pass
    return {"machine": platform.machine(), "processor": platform.processor(), "cpu": cpu}


def _jax_settings() -> dict:
    import jax

    values = getattr(jax.config, "values", {})
    return {name: repr(value) for name, value in sorted(values.items()) if not name.startswith(_CONFIG_SKIPPED)}


class Snapshot(NamedTuple):
    """Everything a run's programs depend on, taken once before any of them is traced (``snapshot``)."""

    digest: str  # sha256 of the description, code, versions, configuration, host and devices
    modules: dict  # loaded_modules() when it was taken
    devices: list

    def key(self, program: str) -> str:
        """The cache key of the run's program ``program`` (a name: its programs differ by it)."""
        return hashlib.sha256(f"{self.digest}/{program}".encode()).hexdigest()


def snapshot(description: Any, devices: list) -> Snapshot | None:
    """The ``Snapshot`` of programs made from ``description`` (JSON-able: what the caller builds them from) on
    ``devices``, with everything else they depend on (module docstring); ``None`` when the cache is off or
    ``description`` is ``None`` (not cacheable). Take it before tracing any of them, so that every run computes the
    same keys: tracing imports modules (distrax on first use), loading a program does not."""
    if _directory[0] is None or description is None:
        return None
    import jax
    import jaxlib

    client = devices[0].client
    modules = loaded_modules()
    parts = {
        "format": VERSION,
        "program": description,
        "devices": [(d.id, d.platform, d.device_kind, d.process_index) for d in devices],
        "backend": (client.platform, client.platform_version, jax.process_count(), jax.device_count()),
        "versions": (jax.__version__, jaxlib.__version__, sys.version),
        "jax_config": _jax_settings(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "host": _host(),
        "code": code_fingerprint(modules),
    }
    text = json.dumps(parts, sort_keys=True, default=repr)
    snap = Snapshot(hashlib.sha256(text.encode()).hexdigest(), modules, list(devices))
    if _marker(snap).exists():  # seen before and not stored (JAX's cache had its programs): compile them here
        from rlpar import compile_cache

        compile_cache.bypass_for_this_process()
    return snap


def _marker(snap: Snapshot) -> Path:
    return _directory[0] / (snap.digest + MARKER)


def _path(program_key: str) -> Path:
    return _directory[0] / (program_key + SUFFIX)


def load(program_key: str | None, devices: list):
    """The ``jax.stages.Compiled`` stored under ``program_key``, or ``None`` (none stored, caching off, unreadable)."""
    if program_key is None or _directory[0] is None:
        return None
    path = _path(program_key)
    try:
        with open(path, "rb") as file:
            entry = pickle.load(file)
        if entry["lapack"]:  # its LAPACK calls are bound when the library is set up, which lowering does: do it here
            _initialize_lapack()
        compiled = serialize_executable.deserialize_and_load(*entry["executable"], backend=devices[0].client,
                                                             execution_devices=list(devices))
        os.utime(path)  # recently used: evicted last
    except Exception:  # noqa: BLE001 -- a missing, partial, stale or foreign entry is a miss
        return None
    return compiled


def _initialize_lapack() -> None:
    """Set up the CPU LAPACK kernels a program's custom calls name (as ``jax.export`` does before running a
    deserialized program): without it such a program crashes the process."""
    from jax._src.lax import linalg

    linalg.initialize_lapack()


def store(program_key: str | None, compiled) -> bool:
    """Save ``compiled`` under ``program_key``; ``False`` if it cannot be (caching off, a program JAX cannot
    serialize, a full or read-only disk): the run goes on without it."""
    if program_key is None or _directory[0] is None:
        return False
    try:
        entry = {"lapack": "lapack_" in compiled.as_text(), "executable": serialize_executable.serialize(compiled)}
        blob = pickle.dumps(entry)
        _directory[0].mkdir(parents=True, exist_ok=True)
        path = _path(program_key)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        temporary.write_bytes(blob)
        os.replace(temporary, path)  # atomic: a reader sees the whole file or none
        _evict(MAX_BYTES)
    except Exception:  # noqa: BLE001 -- caching is an optimisation; the compiled program is still used
        return False
    return True


def _evict(max_bytes: int) -> None:
    """Delete the least recently used entries until the directory holds at most ``max_bytes``, and all but the newest
    ``MAX_MARKERS`` markers."""
    markers = sorted(_directory[0].glob("*" + MARKER), key=lambda p: p.stat().st_mtime if p.exists() else 0)
    for path in markers[:-MAX_MARKERS]:
        path.unlink(missing_ok=True)
    entries = []
    for path in _directory[0].glob("*" + SUFFIX):
        try:
            stat = path.stat()
        except OSError:
            continue
        entries.append((stat.st_mtime, stat.st_size, path))
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= max_bytes:
            break
        try:
            path.unlink()
        except OSError:
            pass
        total -= size


def load_or_compile(program: str, compile: Callable[[], Any], snap: Snapshot | None):
    """``(compiled, loaded)``: the run's program ``program`` as stored for ``snap`` (``loaded=True``), else
    ``compile()`` (it traces, lowers and compiles, through JAX's cache), then stored, unless tracing it imported a
    module ``snap`` does not cover (``covered``) or JAX's cache supplied it (see below). ``snap=None``: compiled, not
    stored."""
    if snap is None:
        return compile(), False
    program_key = snap.key(program)
    compiled = load(program_key, snap.devices)
    if compiled is not None:
        return compiled, True
    from rlpar import compile_cache

    hits = compile_cache.hits()
    compiled = compile()
    if compile_cache.hits() > hits:
        # JAX's cache had it (same HLO under a new key: e.g. after an edit that changed nothing traced). Not stored:
        # on XLA:CPU (jax 0.10.2) an executable loaded from JAX's cache serializes without some of its functions,
        # and loaded again fails ("Function iota_concatenate_fusion not found"; tests/test_program_cache.py). The
        # marker makes the next run with this snapshot compile its programs itself (``snapshot``), and store them.
        _touch(_marker(snap))
        return compiled, False
    if covered(path for name, path in loaded_modules().items() if name not in snap.modules):
        if store(program_key, compiled):
            _marker(snap).unlink(missing_ok=True)
    return compiled, False


def _touch(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    except OSError:
        pass
