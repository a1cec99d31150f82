"""Checkpoints of a whole run, with orbax, that a kill at any moment cannot corrupt.

A checkpoint ``RUN_DIR/checkpoints/N/`` (after update ``N``) holds:

- ``state``: every device's training state, stacked ``[D, ...]`` in device order (for PPO: params, optimizer state,
  environment states, observations, acting and shuffling keys, update counter). Environment states and keys differ
  per device, so all rows are kept, not just one copy of the parameters.
- ``meta`` (JSON): the run's ``config.json`` contents and its ``Position``: updates done, metrics records written, and
  the byte lengths of ``metrics.jsonl`` and ``timing.jsonl`` at that moment.

Atomicity, in two steps. orbax writes into a temporary directory and renames it to ``N/`` only once everything is
written. Then this module writes the commit marker ``N/rlpar_commit.json`` (to a temporary name, then an atomic
rename). Only directories with the marker count as checkpoints: a directory orbax never finalised, or one killed
between orbax's rename and the marker, is ignored and removed on resume.

Multi-process runs: every process calls ``save`` and ``restore`` together (orbax synchronises them over JAX's
distributed runtime), each with the whole state (``parallel.rows_to_host`` gathers it). Only the writer (process 0)
writes: orbax stores host numpy arrays from the primary process alone, and the marker, the clean-up of a killed
attempt and the deletion of old checkpoints are the writer's too. Every process reads the same files on resume, so
the run dir must be on a filesystem all of them see.

Paths: orbax wants absolute paths, so ``Checkpoints`` makes its directory absolute once (against the working
directory of the moment it is opened); callers may pass relative ones.

Failed restores are sorted in two (``restore_failure``): ``CorruptCheckpointError`` when the files are proven
damaged (a metadata file that does not parse, an array file that is short, garbled or missing from a committed
checkpoint), and ``UnreadableCheckpointError`` for everything else (I/O and permission errors, path problems,
orbax errors that say nothing about the data). Only the first advises deleting the checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple

COMMIT_MARKER = "rlpar_commit.json"
KEEP = 2  # committed checkpoints kept; older ones are deleted after each save


class CheckpointError(ValueError):
    """A run dir has no usable checkpoint, or one that does not match the run."""


class CorruptCheckpointError(CheckpointError):
    """A committed checkpoint whose files are proven damaged; deleting it is the fix."""


class UnreadableCheckpointError(CheckpointError):
    """A checkpoint that could not be read for a reason other than damaged data (I/O, permissions, paths)."""


class Position(NamedTuple):
    """Where a run stood when a checkpoint was written."""

    updates_done: int
    num_records: int  # records in metrics.jsonl (and timing.jsonl)
    metrics_bytes: int  # byte length of metrics.jsonl holding exactly those records
    timing_bytes: int  # byte length of timing.jsonl holding exactly those records


class Restored(NamedTuple):
    state: Any  # host numpy pytree, every leaf [D, ...]
    position: Position
    meta: dict  # the run's config.json contents at save time


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def require_orbax() -> None:
    """``ImportError`` with the fix when orbax is not installed (checked before a run starts, without importing it)."""
    import importlib.util

    if importlib.util.find_spec("orbax") is None or importlib.util.find_spec("orbax.checkpoint") is None:
        raise ImportError("checkpoints need orbax-checkpoint, part of rlpar's base install: "
                          "pip install 'orbax-checkpoint>=0.12.8,<0.13' "
                          "(or pass --checkpoint-every 0 to train without checkpoints)")


def _checkpointer():
    require_orbax()
    import orbax.checkpoint as ocp

    return ocp, ocp.Checkpointer(ocp.CompositeCheckpointHandler())


class Checkpoints:
    """The checkpoints in one directory (``RUN_DIR/checkpoints``)."""

    def __init__(self, directory: str | Path, keep: int = KEEP, writer: bool = True):
        self.directory = Path(os.path.abspath(directory))  # orbax refuses relative paths
        self.keep = keep
        self.writer = writer  # False in processes other than 0 of a multi-process run: they read, never write

    def path(self, step: int) -> Path:
        return self.directory / str(step)

    def committed_steps(self) -> list[int]:
        """Steps with a complete checkpoint, ascending."""
        if not self.directory.is_dir():
            return []
        return sorted(int(p.name) for p in self.directory.iterdir()
                      if p.name.isdigit() and (p / COMMIT_MARKER).is_file())

    def uncommitted(self) -> list[Path]:
        """Everything in the directory that is not a complete checkpoint (orbax temporaries, unmarked steps)."""
        if not self.directory.is_dir():
            return []
        committed = {str(s) for s in self.committed_steps()}
        return sorted(p for p in self.directory.iterdir() if p.name not in committed)

    def latest(self) -> int | None:
        steps = self.committed_steps()
        return steps[-1] if steps else None

    def discard_uncommitted(self) -> None:
        if not self.writer:
            return
        for path in self.uncommitted():
            shutil.rmtree(path) if path.is_dir() else path.unlink()

    def save(self, step: int, state: Any, position: Position | None, meta: dict) -> Path:
        """Write and commit the checkpoint of ``step``; then delete committed ones beyond the newest ``keep``.

        ``state`` is a host numpy pytree of every device's rows. In a multi-process run every process calls this at
        the same point with the same ``state``; only the writer's files reach the disk, so the others may pass
        ``position=None`` (they keep no logs).
        """
        with _ctrl_c_after():  # a Ctrl-C meanwhile acts once the checkpoint is committed
            return self._save(step, state, position, meta)

    def _save(self, step: int, state: Any, position: Position | None, meta: dict) -> Path:
        ocp, checkpointer = _checkpointer()
        path = self.path(step)
        if self.writer:
            if path.exists():  # leftovers of a killed attempt at the same step; never a committed one
                if (path / COMMIT_MARKER).exists():
                    raise CheckpointError(f"checkpoint {path} already exists")
                shutil.rmtree(path)
            self.directory.mkdir(parents=True, exist_ok=True)
        if self.writer and position is None:
            raise ValueError("the writer of a checkpoint must give its Position")
        payload = {"position": position._asdict() if position is not None else None, "run": meta}
        try:
            with _quiet_orbax():
                checkpointer.save(path, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                                meta=ocp.args.JsonSave(payload)))
        except Exception as err:  # disk full, permissions, ...: one line, not orbax's threads' tracebacks
            raise CheckpointError(f"could not write checkpoint {path} ({_reason(err)}); the earlier checkpoints "
                                  "are intact") from err
        if self.writer:
            _write_atomically(path / COMMIT_MARKER, json.dumps({"step": step}) + "\n")
            for old in self.committed_steps()[: -self.keep]:
                (self.path(old) / COMMIT_MARKER).unlink()  # first: a kill mid-deletion leaves no marked remains
                shutil.rmtree(self.path(old))
        return path

    def read_meta(self, step: int) -> dict:
        """The run's metadata stored with checkpoint ``step`` (what ``Restored.meta`` holds), without reading any
        array: enough to check that a resumed run keeps its settings before restoring a state of another shape."""
        return self._read(step, lambda ocp: dict(meta=ocp.args.JsonRestore()), lambda r: r.meta["run"])

    def restore(self, step: int, template: Any = None) -> Restored:
        """Read checkpoint ``step`` into host numpy arrays; ``CheckpointError`` if unreadable.

        With a ``template`` (a pytree of arrays like the saved state) the state comes back as that pytree, checked
        against it; without one, as nested dicts and lists of the saved field names (enough to read the params).
        """
        return self._read(
            step, lambda ocp: dict(state=ocp.args.StandardRestore(template), meta=ocp.args.JsonRestore()),
            lambda r: Restored(r.state, Position(**r.meta["position"]), r.meta["run"]))

    def _read(self, step: int, items: Callable, unpack: Callable):
        """orbax's restore of the composite ``items(ocp)`` of checkpoint ``step``, then ``unpack``; any failure of
        either becomes ``restore_failure``'s corrupt or unreadable ``CheckpointError``."""
        path = self.path(step)
        if not (path / COMMIT_MARKER).is_file():
            raise CheckpointError(f"{path} is not a complete checkpoint (no {COMMIT_MARKER})")
        ocp, checkpointer = _checkpointer()
        try:
            with _quiet_orbax():
                return unpack(checkpointer.restore(path, args=ocp.args.Composite(**items(ocp))))
        except Exception as err:  # orbax/tensorstore raise many types for missing or damaged files
            if _missing_on_disk(err, "population"):
                raise CheckpointError(
                    f"checkpoint {path} was written before runs of several slots kept a population state (their "
                    "members' hyperparameters and PBT counters): resume or evaluate it with the rlpar that wrote it, "
                    "or start a new run") from err
            raise restore_failure(err, path, earlier=[s for s in self.committed_steps() if s < step]) from err


def _missing_on_disk(err: BaseException, field: str) -> bool:
    """Whether orbax refused a restore because the checkpoint lacks ``field`` that the template has (its message
    names the field with ``Target: MISSING``): a checkpoint of an older state layout, not a damaged one."""
    return any(f"{field}:" in str(e) and "Target: MISSING" in str(e) for e in _chain(err))


# tensorstore status codes (absl) and message parts that prove the stored bytes are bad, not merely unreachable.
_CORRUPT_CODES = ("DATA_LOSS", "OUT_OF_RANGE")
_CORRUPT_WORDS = ("truncated", "error decoding", "error parsing", "corrupt", "checksum", "invalid magic")


def _chain(err: BaseException) -> Iterator[BaseException]:
    """``err`` and the exceptions it was raised from or while handling, outermost first."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def _reason(err: BaseException) -> str:
    """The innermost message of ``err``'s chain as one whole line, without tensorstore's JSON spec."""
    inner = list(_chain(err))[-1]
    text = str(inner).strip()
    text = re.sub(r"\s*\[tensorstore_spec.*", "", text, flags=re.DOTALL).strip()
    text = " ".join(text.split())  # one line
    return f"{type(inner).__name__}: {text}" if text else type(inner).__name__


def _has_symlink(directory: Path) -> bool:
    """Whether anything under ``directory`` is a symbolic link (orbax and rlpar never write one)."""
    return any(os.path.islink(os.path.join(root, name))
               for root, dirs, files in os.walk(directory) for name in dirs + files)


def is_corruption(err: BaseException, path: Path) -> bool:
    """Whether the failure ``err`` to restore the committed checkpoint at ``path`` proves its data is bad.

    Proof: a metadata file that does not parse as JSON; tensorstore reporting lost data (``DATA_LOSS``), a file
    shorter than its index says (``OUT_OF_RANGE``) or bytes it cannot decode (``Truncated Zstd-compressed stream``);
    a file missing from the directory (no symbolic link inside, so the path is not the problem). I/O and permission
    errors (any ``OSError`` with an errno, tensorstore ``PERMISSION_DENIED``, ``UNKNOWN ... os_error_code``) and
    everything else are not proof.
    """
    for e in _chain(err):
        text = str(e)
        if isinstance(e, json.JSONDecodeError):
            return True
        if isinstance(e, FileNotFoundError):
            return not _has_symlink(path)
        if isinstance(e, OSError):
            return False
        code = text.split(":", 1)[0].strip()
        if code in _CORRUPT_CODES:
            return True
        if code == "NOT_FOUND":
            return not _has_symlink(path)
        if code in ("FAILED_PRECONDITION", "INVALID_ARGUMENT") and any(w in text.lower() for w in _CORRUPT_WORDS):
            return True
    return False


def restore_failure(err: BaseException, path: Path, earlier: list[int] = ()) -> CheckpointError:
    """The one-line error for a failed restore of the checkpoint at ``path``: corrupt (delete it) or unreadable.

    ``earlier`` are the committed steps before this one, to say what deleting it falls back to.
    """
    reason = _reason(err)
    if is_corruption(err, path):
        fallback = (f"delete that directory to fall back to checkpoint {max(earlier)}, or start a new run" if earlier
                    else "it is the run's only checkpoint: delete it and start a new run")
        return CorruptCheckpointError(f"checkpoint {path} is corrupt ({reason}); {fallback}")
    return UnreadableCheckpointError(
        f"could not read checkpoint {path} ({reason}); the files were not shown to be damaged, so keep them: check "
        "the path, its permissions and the filesystem, then try again"
    )


_EVENT_LOOP_CLOSED = "Event loop is closed"


def _drop_event_loop_closed(hook):
    """An unraisable-exception hook that drops the ``RuntimeError('Event loop is closed')`` that tensorstore's
    callbacks raise into orbax's finished event loop after a failed read, and passes anything else to ``hook``."""

    def unraisable(info):
        if isinstance(info.exc_value, RuntimeError) and str(info.exc_value) == _EVENT_LOOP_CLOSED:
            return
        hook(info)

    unraisable.rlpar_filter = True
    return unraisable


class _DropOrphanedReads(logging.Filter):
    """Drops asyncio's ``Task exception was never retrieved`` records: after a failed read, orbax leaves the reads
    of the other arrays unawaited, and asyncio logs each (with a traceback) when it is garbage collected."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Task exception was never retrieved")


_DROP_ORPHANED_READS = _DropOrphanedReads()


@contextlib.contextmanager
def _ctrl_c_after() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) that arrives inside the block until the block is done, then raise it.

    A ``KeyboardInterrupt`` in the middle of orbax's save leaves its writer threads running into interpreter
    shutdown (``RuntimeError: cannot schedule new futures after interpreter shutdown``, with a traceback) and the
    checkpoint half written; held back, the save finishes and the interrupted run names it as its last checkpoint.
    Only the main thread can take signals; elsewhere, or under a handler other than Python's default, nothing
    changes."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    received = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


@contextlib.contextmanager
def _quiet_orbax():
    """Hold orbax's log records (absl) for one call, re-emitting them only if the call succeeds, and keep the
    ``Event loop is closed`` and ``Task exception was never retrieved`` stragglers of a failed read off stderr.

    A failed call's records repeat its exception (with tracebacks from orbax's threads); the caller reports it in
    one line instead. The two straggler filters are installed for the whole call, since an abandoned read may be
    garbage collected while orbax is still unwinding, and stay installed after a failure: tensorstore's callbacks and
    the garbage collection of the other abandoned reads may come after the exception has reached the caller.
    """
    logger = logging.getLogger("absl")
    held: list[logging.LogRecord] = []

    class Hold(logging.Handler):
        def emit(self, record):
            held.append(record)

    handler, propagate = Hold(), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    previous_hook = sys.unraisablehook
    if not getattr(previous_hook, "rlpar_filter", False):
        sys.unraisablehook = _drop_event_loop_closed(previous_hook)
    asyncio_logger = logging.getLogger("asyncio")
    filtering = _DROP_ORPHANED_READS in asyncio_logger.filters  # left by an earlier failed call: keep it
    asyncio_logger.addFilter(_DROP_ORPHANED_READS)
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        if not failed:
            if not filtering:
                asyncio_logger.removeFilter(_DROP_ORPHANED_READS)
            sys.unraisablehook = previous_hook
            for record in held:
                if record.levelno >= logging.WARNING:
                    logger.handle(record)
