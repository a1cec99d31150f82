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
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any, NamedTuple

COMMIT_MARKER = "rlpar_commit.json"
KEEP = 2  # committed checkpoints kept; older ones are deleted after each save
TEST_KILL_ENV = "RLPAR_TEST_SIGKILL_AFTER_UPDATE"  # test-only: see kill_if_test_asks


class CheckpointError(ValueError):
    """A run dir has no usable checkpoint, or one that does not match the run."""


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
        raise ImportError("checkpoints need orbax-checkpoint: pip install 'rlpar[extras]' "
                          "(or pass --checkpoint-every 0 to train without checkpoints)")


def _checkpointer():
    require_orbax()
    import orbax.checkpoint as ocp

    return ocp, ocp.Checkpointer(ocp.CompositeCheckpointHandler())


class Checkpoints:
    """The checkpoints in one directory (``RUN_DIR/checkpoints``)."""

    def __init__(self, directory: str | Path, keep: int = KEEP, writer: bool = True):
        self.directory = Path(directory)
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
        checkpointer.save(path, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                        meta=ocp.args.JsonSave(payload)))
        if self.writer:
            _write_atomically(path / COMMIT_MARKER, json.dumps({"step": step}) + "\n")
            for old in self.committed_steps()[: -self.keep]:
                shutil.rmtree(self.path(old))
        return path

    def restore(self, step: int, template: Any = None) -> Restored:
        """Read checkpoint ``step`` into host numpy arrays; ``CheckpointError`` if unreadable.

        With a ``template`` (a pytree of arrays like the saved state) the state comes back as that pytree, checked
        against it; without one, as nested dicts and lists of the saved field names (enough to read the params).
        """
        path = self.path(step)
        if not (path / COMMIT_MARKER).is_file():
            raise CheckpointError(f"{path} is not a complete checkpoint (no {COMMIT_MARKER})")
        ocp, checkpointer = _checkpointer()
        try:
            restored = checkpointer.restore(path, args=ocp.args.Composite(state=ocp.args.StandardRestore(template),
                                                                          meta=ocp.args.JsonRestore()))
            position = Position(**restored.meta["position"])
            meta = restored.meta["run"]
        except Exception as err:  # orbax/tensorstore raise many types for missing or damaged files
            first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise CheckpointError(
                f"checkpoint {path} is corrupt or does not match this run ({type(err).__name__}: {first_line[:200]}); "
                f"delete that directory to resume from an earlier checkpoint, or start a new run"
            ) from err
        return Restored(restored.state, position, meta)


def kill_if_test_asks(updates_done: int) -> None:
    """Test-only crash: SIGKILL this process once ``updates_done`` reaches ``$RLPAR_TEST_SIGKILL_AFTER_UPDATE``.

    The kill/resume test uses it to die at an exact point between two checkpoints (after that chunk's metrics line
    is written). Unset in normal use; reading one environment variable per chunk costs nothing.
    """
    target = os.environ.get(TEST_KILL_ENV)
    if target and updates_done >= int(target):
        os.kill(os.getpid(), signal.SIGKILL)
