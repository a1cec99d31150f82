"""Whole compiled programs kept under a key, so a warm start neither traces, lowers nor compiles: served only where
the key provably covers everything the program is made from.

JAX's persistent cache (``rlpar.run.compile_cache``) keys a program by its lowered HLO, which is sound whatever Python
built it, but a run must trace and lower its programs before it can look one up. On a 2-core CPU that is most of a
warm start: the README command's programs load in 0.4 s from here and in 2.7 s through JAX's cache (warm whole command
6.3 s against 8.7 s; ``benchmarks/README.md``, "Start-up"). This cache keys the compiled executable by what the HLO
is made from instead, and loads it with ``jax.experimental.serialize_executable`` before anything is traced.

Why not for every run. Tracing runs arbitrary Python: an env module may read a data file, an environment variable, a
download cache or the clock when it is imported or built, and no list of files covers that (a user's env that read
a JSON level file at import was served its old program after the file changed). Keying on the lowered program would
be sound but costs the tracing and lowering this cache exists to skip, which is what JAX's cache already does. So a
saved program is served, and stored, only for a *closed* run (``closed_run``), whose every input is known:

- the process was started by rlpar's own command line (``__main__`` is ``rlpar.train`` or its console script) and
  every module loaded when the key is taken is rlpar's own or an installed distribution's (in site-packages, or in
  a ``sys.path`` folder that pip installed into with ``--target`` and whose ``*.dist-info`` records list it, as a
  machine with an accelerator may hold its JAX): no user script, notebook, test module or ``pip install -e`` package
  of someone else's ran before the programs were built;
- the agent is one of rlpar's (its ``make`` lives in rlpar's packages) and the env is built by rlpar's registry from
  a built-in id (gymnax, the probes, the Craftax and brax suites): no ``module:attribute`` target, no id added by
  ``envs.register``. That code reads no file but its package's own and no environment variable but those below;
- a module first imported while a program is traced must be of the same kinds (``covered``), or it is not stored.

Everything else (users' agents and envs, instances, library calls from a script, multi-process runs) still goes
through JAX's cache, which keys on the HLO and so can never serve a stale program.

The key (``snapshot``, then ``Snapshot.key`` per program) covers:

- the code: the contents of every file of rlpar's own packages (``rlpar``, ``agents``, ``envs``), and the installed
  distributions with their versions (the ``*.dist-info`` names in site-packages and in those folders; the standard
  library by Python's version). A file edited inside site-packages in place, without reinstalling, is not noticed: use
  ``--no-compile-cache`` (or ``pip install`` again) after such an edit;
- the environment variables that the covered code reads or that steer JAX and XLA: every ``RLPAR_*`` (e.g.
  ``RLPAR_PLAIN_LAYERS``, which chooses the layers traced), ``JAX_*``, ``XLA_*``, ``FLAX_*``, ``TF_*``, ``MUJOCO_*``
  and ``PYTHONHASHSEED`` (``ENV_PREFIXES``), but those that only say where the cache is or how errors print;
- jax's and jaxlib's versions, jax's configuration (every ``JAX_*`` setting but the cache's own), the backend, its
  version and the host CPU's model and feature flags (the CPU backend compiles for the host);
- the devices of the program (ids, kinds, processes);
- the caller's description of the programs: for the runner the agent, its config, the env id, kwargs and parameters,
  and the run settings that shape a program (``rlpar.run.prepare._describe``); each program's name (its inputs' shapes
  follow from all of these).

A program is stored only when this process compiled it. When JAX's cache supplied it instead (the same HLO under a new
key: after an edit that changed nothing traced, an upgrade), it is used but not stored (XLA:CPU re-serializes such an
executable without some of its functions), and a marker makes the next run with that key compile its programs
without JAX's cache and store them: one slower run, then the fast start.

Entries are written to a temporary file and renamed, so processes may share the directory; beyond ``MAX_BYTES`` the
least recently used go first. A file that cannot be read or loaded is a miss, never an error. Only load a directory
you trust: loading an executable runs its code.
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

from rlpar.core import jax_internals

SUBDIR = "programs"  # under the compilation cache's directory (JAX's own entries are files at its top level)
SUFFIX = ".program"
MARKER = ".seen"  # a run whose programs came from JAX's cache, so were not stored: the next such run compiles them
MAX_BYTES = 512 * 2**20
MAX_MARKERS = 256
VERSION = 2  # of this file format and key; bump to orphan every entry
_directory: list[Path | None] = [None]
_CONFIG_SKIPPED = ("jax_compilation_cache", "jax_persistent_cache", "jax_explain_cache_misses",
                   "jax_enable_compilation_cache")  # JAX's cache settings: they change no program
# Environment variables in the key: those the covered code reads (rlpar's own, flax's configuration, MuJoCo's
# renderer), those that steer JAX and XLA, and the hash seed (set iteration order while tracing). Found by reading
# rlpar's packages and the installed suites for ``os.environ`` and ``getenv``.
ENV_PREFIXES = ("RLPAR_", "JAX_", "XLA_", "FLAX_", "TF_", "MUJOCO_", "LIBTPU_", "TPU_")
ENV_NAMES = ("PYTHONHASHSEED",)
ENV_NOT_IN_PROGRAM = ("RLPAR_CACHE_DIR", "RLPAR_TRACEBACK")  # where the cache is, how errors print


def enable(setting: str) -> Path | None:
    """Both caches for a ``compile_cache`` setting (``""`` the default directory, ``"off"`` none, else that path):
    JAX's (``rlpar.run.compile_cache.enable``), and whole programs in its ``programs/``; returns the directory."""
    from rlpar.run import compile_cache

    directory = compile_cache.enable(setting)
    configure(directory)
    return directory


def configure(directory: Path | None) -> None:
    """Keep programs under ``directory/programs`` (``enable`` calls this); ``None``: off."""
    _directory[0] = None if directory is None else Path(directory) / SUBDIR


def directory() -> Path | None:
    return _directory[0]


OWN_PACKAGES = ("rlpar", "agents", "envs")  # fingerprinted file by file, loaded or not


def _own_roots() -> list[Path]:
    return [Path(__file__).resolve().parents[2] / name for name in OWN_PACKAGES]  # the checkout: rlpar/run/../..


def _installed_roots() -> list[Path]:
    """``_site_roots``, and the package folders that pip installed into other ``sys.path`` folders
    (``_target_installs``)."""
    return _site_roots() + _target_installs()[0]


def _site_roots() -> list[Path]:
    """The ``sys.path`` directories that hold installed distributions (site-packages), their console scripts (e.g.
    ``rlpar-train``) and the standard library."""
    roots = [Path(sysconfig.get_paths()[name]).resolve() for name in ("stdlib", "platstdlib", "scripts")]
    for entry in sys.path:
        if entry and os.path.isdir(entry) and os.path.basename(entry.rstrip(os.sep)) in ("site-packages",
                                                                                          "dist-packages"):
            roots.append(Path(entry).resolve())
    return roots


def _target_folders() -> list[Path]:
    """The ``sys.path`` folders, other than site-packages and rlpar's checkout, that hold ``*.dist-info`` records:
    folders pip installed into with ``--target``, as a machine with an accelerator may hold its JAX in a folder that
    ``PYTHONPATH`` names. (A record's ``INSTALLER`` file is not asked for, since a folder copied rather than installed may lack it: a folder
    of a user's own that holds an unpacked dist-info is trusted for the files its record lists, as site-packages is.)"""
    checkout = _own_roots()[0].parent
    folders = []
    for entry in sys.path:
        if not entry or os.path.basename(entry.rstrip(os.sep)) in ("site-packages", "dist-packages"):
            continue
        try:
            folder = Path(entry).resolve()
            if folder == checkout or not any(name.endswith(".dist-info") for name in os.listdir(folder)):
                continue
        except OSError:
            continue
        folders.append(folder)
    return folders


def _target_installs() -> tuple[list[Path], frozenset[str]]:
    """What the ``*.dist-info/RECORD`` files of ``_target_folders`` list at the top of their folder: the packages
    (folders) and single-file modules (files, e.g. ``six.py``). Only these count as installed there: any other file in
    such a folder (a user's module put beside them) does not. A namespace package's folder (``google/``) counts whole
    where one record lists it, as in site-packages. Read once per ``sys.path``."""
    folders = tuple(_target_folders())
    if _targets_read[0] is None or _targets_read[0][0] != folders:
        _targets_read[0] = (folders, _read_targets(folders))
    return _targets_read[0][1]


_targets_read: list = [None]  # (folders, what _read_targets found in them)


def _read_targets(folders) -> tuple[list[Path], frozenset[str]]:
    packages, modules = set(), set()
    for folder in folders:
        tops = set()
        for info in folder.glob("*.dist-info"):
            try:
                lines = (info / "RECORD").read_text().splitlines()
            except OSError:
                continue
            tops.update(line.split(",", 1)[0].replace("\\", "/").split("/")[0] for line in lines)
        for top in tops:
            if not top or top.startswith("..") or top.endswith((".dist-info", ".data")) or top == "__pycache__":
                continue
            path = folder / top
            if path.is_dir():
                packages.add(path)
            elif top.endswith((".py", ".so", ".pyd")):
                modules.add(str(path))
    return sorted(packages), frozenset(modules)


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


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def code_fingerprint() -> dict:
    """What the programs of a closed run are made from, as far as files tell: the contents of rlpar's own files and
    the installed distributions' names and versions (module docstring)."""
    own = [(str(path), _digest(path)) for root in _own_roots() for path in sorted(root.rglob("*.py"))]
    installed = []
    for root in _site_roots() + _target_folders():
        try:
            names = os.listdir(root)
        except OSError:
            continue
        installed.append((str(root), sorted(n for n in names if n.endswith((".dist-info", ".egg-info")))))
    return {"own": own, "installed": installed}


def program_environment() -> dict[str, str]:
    """The environment variables in the key (``ENV_PREFIXES``, ``ENV_NAMES``), by name."""
    return {name: value for name, value in sorted(os.environ.items())
            if (name.startswith(ENV_PREFIXES) or name in ENV_NAMES) and name not in ENV_NOT_IN_PROGRAM}


def covered(paths) -> bool:
    """Whether modules at ``paths`` are covered by a key: files of an installed distribution, of the standard
    library, or of rlpar's own packages."""
    return not _outside(list(paths), _installed_roots() + _own_roots())


def closed_run() -> str | None:
    """``None`` when this process is closed (module docstring): started by rlpar's command line, with nothing but
    rlpar's own and installed modules loaded; else why not, e.g. ``"__main__ is /home/me/train_it.py"``."""
    main = sys.modules.get("__main__")
    main_file = vars(main).get("__file__") if main is not None else None
    if not isinstance(main_file, str):
        return "__main__ has no file (an interactive session or python -c)"
    if not (_under(main_file, _own_roots()) or _under(main_file, _script_roots())):
        return f"__main__ is {main_file}"
    outside = _outside(loaded_modules().values(), _installed_roots() + _own_roots())
    return f"{outside[0]} is loaded" if outside else None


def _outside(paths, roots: list[Path]) -> list[str]:
    """The ``paths`` under none of ``roots``, sorted; each directory resolved once (thousands of modules share a few
    hundred), and only where the path as written is under none: 180 ms for a run's 2,600 modules otherwise."""
    prefixes = tuple(str(root).rstrip(os.sep) + os.sep for root in roots)
    modules = _target_installs()[1]
    inside: dict[str, bool] = {}
    for path in paths:
        folder = os.path.dirname(path)
        if folder not in inside:  # as written first (no file system calls), else with links resolved
            plain = (folder + os.sep).startswith(prefixes) and ".." not in folder.split(os.sep)
            inside[folder] = plain or _under(folder, roots)
    return sorted(path for path in paths
                  if not inside[os.path.dirname(path)] and str(Path(path).resolve()) not in modules)


def _script_roots() -> list[Path]:
    return [Path(sysconfig.get_paths()["scripts"]).resolve(), Path(sys.executable).resolve().parent,
            Path(sys.executable).absolute().parent]


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


def snapshot(description: Any, devices: list, *, require_closed: bool = True) -> Snapshot | None:
    """The ``Snapshot`` of programs made from ``description`` (JSON-able: what the caller builds them from, and
    ``None`` when that is not only rlpar's own code and settings) on ``devices``, with everything else they depend on
    (module docstring); ``None`` (nothing served or stored) when the cache is off, ``description`` is ``None``, or
    the process is not a closed run (``closed_run``; ``require_closed=False`` skips that check, for tests of the
    storage itself). Take it before tracing any of them, so that every run computes the same keys: tracing may
    import modules on first use (an env suite's), loading a program does not."""
    if _directory[0] is None or description is None or (require_closed and closed_run() is not None):
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
        "environment": program_environment(),
        "host": _host(),
        "code": code_fingerprint(),
    }
    text = json.dumps(parts, sort_keys=True, default=repr)
    snap = Snapshot(hashlib.sha256(text.encode()).hexdigest(), modules, list(devices))
    if _marker(snap).exists():  # seen before and not stored (JAX's cache had its programs): compile them here
        from rlpar.run import compile_cache

        compile_cache.bypass_for_this_process()
    return snap


def _marker(snap: Snapshot) -> Path:
    return _directory[0] / (snap.digest + MARKER)


def _path(program_key: str) -> Path:
    return _directory[0] / (program_key + SUFFIX)


def stored(program: str, snap: Snapshot | None) -> bool:
    """Whether ``load_or_compile(program, ..., snap)`` finds the program on disk (loading it may still fail)."""
    return snap is not None and _directory[0] is not None and _path(snap.key(program)).is_file()


def load(program_key: str | None, devices: list):
    """The ``jax.stages.Compiled`` stored under ``program_key``, or ``None`` (none stored, caching off, unreadable)."""
    if program_key is None or _directory[0] is None:
        return None
    path = _path(program_key)
    try:
        with open(path, "rb") as file:
            entry = pickle.load(file)
        # its LAPACK calls are bound when the library is set up, which lowering does: do it here, or miss
        if entry["lapack"] and not initialize_lapack(devices[0].platform):
            return None
        compiled = serialize_executable.deserialize_and_load(*entry["executable"], backend=devices[0].client,
                                                             execution_devices=list(devices))
        os.utime(path)  # recently used: evicted last
    except Exception:  # noqa: BLE001 -- a missing, partial, stale or foreign entry is a miss
        return None
    return compiled


def initialize_lapack(platform: str) -> bool:
    """Set up the CPU LAPACK kernels a program's custom calls name (as ``jax.export`` does before running a
    deserialized program): without it such a program crashes the process. Only for ``platform`` ``"cpu"``: another
    backend's programs call no LAPACK, and the set-up (SciPy's linalg import) is slow on a warm start. ``False``
    where this JAX cannot do it (``rlpar.core.jax_internals``): then no program that calls LAPACK is stored or
    loaded."""
    if platform != "cpu":
        return True
    return jax_internals.initialize_lapack()


def store(program_key: str | None, compiled) -> bool:
    """Save ``compiled`` under ``program_key``; ``False`` if it cannot be (caching off, a program JAX cannot
    serialize, a full or read-only disk): the run goes on without it."""
    if program_key is None or _directory[0] is None:
        return False
    try:
        lapack = "lapack_" in compiled.as_text()
        if lapack and not jax_internals.checked():  # could not be loaded safely (load)
            return False
        entry = {"lapack": lapack, "executable": serialize_executable.serialize(compiled)}
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
    from rlpar.run import compile_cache

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
