"""A run's log files: ``metrics.jsonl``, ``timing.jsonl``, ``population.jsonl`` (a population run's PBT rounds) and
(optionally) TensorBoard events and a Weights & Biases run.

Each logged chunk's record is split in two. Its wall-clock fields (``TIMING_FIELDS``) go to ``timing.jsonl``; the
rest (losses, episode statistics, update and step counts) go to ``metrics.jsonl``, which is therefore bit-identical
between two runs with the same seed and device count, and between an uninterrupted run and a killed-and-resumed one.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from rlpar.run import rundir
from rlpar.run.checkpoint import CheckpointError, Position

# Vary from run to run; everything else in a record is deterministic. startup_s (process start to the first update,
# in the first record a process writes) only where the caller knows when the process started (the CLI does).
TIMING_FIELDS = ("time_s", "sps", "startup_s", "memory")
_STEP_FIELDS = ("update", "env_steps")  # TensorBoard's x axis, not scalars of their own


def split_record(record: dict) -> tuple[dict, dict]:
    """``(deterministic part, timing part)``; the timing part keeps ``update`` to line the two files up."""
    timing = {"update": record["update"], **{k: record[k] for k in TIMING_FIELDS if k in record}}
    return {k: v for k, v in record.items() if k not in TIMING_FIELDS}, timing


def tensorboard_scalars(record: dict, prefix: str = "") -> dict[str, float]:
    """A record as TensorBoard tags: namespaced names kept (``loss/policy``), episode statistics under ``train/``,
    timing under ``perf/``; missing values (``None``: no episode ended in the chunk) left out. Each slot of a
    multi-seed or sweep run gets its own tags (``slot1/train/episode_return``), each device's memory its own
    (``perf/memory/device0/peak_bytes_in_use``)."""
    scalars = {}
    for name, value in record.items():
        if name in _STEP_FIELDS or name == "pbt" or value is None:  # "pbt": lineage, in population.jsonl
            continue
        if isinstance(value, dict):  # a slot's hyperparameters: slot0/hparams/lr
            scalars.update(tensorboard_scalars(value, f"{prefix}{name}/"))
        elif name == "slots":
            for i, slot in enumerate(value):
                scalars.update(tensorboard_scalars(slot, f"slot{i}/"))
        elif name == "memory":
            for device in value:
                scalars.update({f"perf/memory/device{device['device']}/{key}": float(v)
                                for key, v in device.items() if key != "device"})
        else:
            tag = name if "/" in name or prefix.endswith("hparams/") else f"perf/{name}" if name in TIMING_FIELDS \
                else f"train/{name}"
            scalars[prefix + tag] = float(value)
    return scalars


def _read_prefix(path: Path, num_bytes: int, num_records: int) -> list[dict]:
    """The first ``num_records`` JSON lines of ``path``, which must be exactly its first ``num_bytes`` bytes."""
    size = path.stat().st_size if path.is_file() else 0
    if size < num_bytes:
        raise CheckpointError(
            f"{path} has {size} bytes but the checkpoint was written after {num_bytes}: the run dir was changed "
            "after the checkpoint; start a new run"
        )
    with open(path, "rb") as f:
        lines = f.read(num_bytes).decode().splitlines()
    if len(lines) != num_records:
        raise CheckpointError(f"{path} holds {len(lines)} records where the checkpoint expects {num_records}")
    return [json.loads(line) for line in lines]


def read_records(run_dir: str | Path, position: Position) -> list[dict]:
    """The records a run dir held at a checkpoint's ``position`` (metrics with timing merged back in), read
    without changing the files: what every process of a resumed run starts its list of records from."""
    run_dir = Path(run_dir)
    metrics = _read_prefix(run_dir / rundir.METRICS, position.metrics_bytes, position.num_records)
    timing = _read_prefix(run_dir / rundir.TIMING, position.timing_bytes, position.num_records)
    return [{**m, **t} for m, t in zip(metrics, timing)]


class RunLogger:
    """Writes one record per logged chunk to a run dir.

    ``resume_at=None`` starts the files afresh. Otherwise the files are cut back to a checkpoint's ``Position``
    (dropping the lines a killed run wrote after it) and ``previous_records`` holds the records kept, timing merged
    back in.
    """

    def __init__(self, run_dir: str | Path, *, tensorboard: bool = False, wandb: bool = False, wandb_project: str = "",
                 wandb_config: dict | None = None, resume_at: Position | None = None):
        self.run_dir = Path(run_dir)
        self.previous_records: list[dict] = []
        metrics_path, timing_path = self.run_dir / rundir.METRICS, self.run_dir / rundir.TIMING
        if resume_at is not None:
            self.previous_records = read_records(self.run_dir, resume_at)
            os.truncate(metrics_path, resume_at.metrics_bytes)
            os.truncate(timing_path, resume_at.timing_bytes)
        self.num_records = len(self.previous_records)
        mode = "a" if resume_at is not None else "w"
        self._metrics = open(metrics_path, mode)
        self._timing = open(timing_path, mode)
        self._population = None  # population.jsonl: opened at the first PBT round; rewritten from the records kept
        if any(record.get("pbt") for record in self.previous_records):
            for record in self.previous_records:
                self._write_population(record)
        elif resume_at is not None and (self.run_dir / rundir.POPULATION).exists():
            (self.run_dir / rundir.POPULATION).unlink()
        self._tensorboard = self._open_tensorboard(resume_at) if tensorboard else None
        self._wandb = self._open_wandb(wandb_project, wandb_config, resume_at) if wandb else None

    def _open_tensorboard(self, resume_at: Position | None):
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise ImportError("--tensorboard needs tensorboardX: pip install tensorboardX") from None
        # On resume, TensorBoard drops the killed run's events from the first step after the checkpoint on.
        previous = self.previous_records
        purge_step = previous[-1]["env_steps"] + 1 if previous else None
        return SummaryWriter(str(self.run_dir / rundir.TENSORBOARD), purge_step=purge_step)

    def _open_wandb(self, project: str, config: dict | None, resume_at: Position | None):
        """A Weights & Biases run whose id is kept in ``RUN_DIR/wandb-run-id``, so a resumed run continues it.

        Its files go to ``$WANDB_DIR`` or the run dir; ``WANDB_MODE=offline`` keeps them there for ``wandb sync``.
        The config (``config.json``'s contents) is sent by a fresh run only: a resumed run's is the same."""
        try:
            import wandb
        except ImportError:
            raise ImportError("--wandb needs the wandb package: pip install -e \".[wandb]\" "
                              "(or pip install wandb)") from None
        id_path = self.run_dir / rundir.WANDB_RUN_ID
        run_id = id_path.read_text().strip() if id_path.is_file() else ""
        if not run_id:
            run_id = secrets.token_hex(4)  # wandb ids are lowercase letters and digits
            id_path.write_text(run_id + "\n")
        if resume_at is not None or config is None:
            config = None
        else:
            config = json.loads(json.dumps(config, default=rundir.json_default))  # numpy scalars, tuples: plain JSON
        run = wandb.init(project=project or os.environ.get("WANDB_PROJECT") or "rlpar", id=run_id, resume="allow",
                         name=self.run_dir.resolve().name, config=config,
                         dir=os.environ.get("WANDB_DIR") or str(self.run_dir))
        # The x axis is env steps, as in TensorBoard (wandb's own step counts log calls).
        run.define_metric("env_steps")
        run.define_metric("*", step_metric="env_steps")
        return run

    def _write_population(self, record: dict) -> None:
        from rlpar.core import population

        lines = population.population_lines(record)
        if not lines:
            return
        if self._population is None:
            self._population = open(self.run_dir / rundir.POPULATION, "w")  # derived from metrics.jsonl: rewritten
        self._population.write("".join(json.dumps(line) + "\n" for line in lines))
        self._population.flush()

    def write(self, record: dict) -> None:
        metrics, timing = split_record(record)
        self._metrics.write(json.dumps(metrics) + "\n")
        self._timing.write(json.dumps(timing) + "\n")
        self._metrics.flush()
        self._timing.flush()
        self._write_population(record)
        self.num_records += 1
        if self._tensorboard is not None:
            for tag, value in tensorboard_scalars(record).items():
                self._tensorboard.add_scalar(tag, value, global_step=record["env_steps"])
        if self._wandb is not None:
            self._wandb.log({**tensorboard_scalars(record), "env_steps": record["env_steps"],
                             "update": record["update"]})

    def position(self, updates_done: int) -> Position:
        """Where the files stand now; call after ``sync`` so the bytes are on disk."""
        return Position(updates_done, self.num_records, self._metrics.tell(), self._timing.tell())

    def sync(self) -> None:
        """Flush everything to disk (before a checkpoint records the files' lengths)."""
        for f in (self._metrics, self._timing):
            f.flush()
            os.fsync(f.fileno())
        if self._tensorboard is not None:
            self._tensorboard.flush()

    def close(self) -> None:
        self._metrics.close()
        self._timing.close()
        if self._population is not None:
            self._population.close()
        if self._tensorboard is not None:
            self._tensorboard.close()
        if self._wandb is not None:
            self._wandb.finish()
