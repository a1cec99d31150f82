"""What a run directory holds, and reading back its ``config.json``.

```
RUN_DIR/config.json        agent, run flags, every agent config field, versions, device count (format_version)
RUN_DIR/metrics.jsonl      one record per logged chunk; no wall-clock fields, so it is bit-identical across reruns
RUN_DIR/timing.jsonl       the wall-clock fields of the same chunks (update, time_s, sps), line for line
RUN_DIR/checkpoints/N/     checkpoint after update N (see rlpar.run.checkpoint)
RUN_DIR/tensorboard/       TensorBoard event files (with --tensorboard)
RUN_DIR/wandb-run-id       the Weights & Biases run's id (with --wandb), which a resumed run continues
RUN_DIR/wandb/             wandb's own files, unless $WANDB_DIR puts them elsewhere (with --wandb)
```
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# config.json's format; 2: agent-agnostic engine (checkpoints hold TrainState(agent, rollout)).
FORMAT_VERSION = 2
# Run settings added to config.json since format_version 2 began, with the values that reproduce what a run dir
# written without them did (resuming one keeps its behaviour).
RUN_FIELDS_ADDED = {"eval_every": 0, "eval_episodes": 64, "search": "", "population": 0, "pbt": False,
                    "pbt_interval": 0, "pbt_quantile": 0.25, "pbt_resample": 0.25, "pbt_fitness": "train",
                    "population_devices": 1}
# Fields every agent config gained since then (rlpar.core.agent.AgentConfig), with the values a run dir written
# without them ran with.
CONFIG_FIELDS_ADDED = {"collector_unroll": 0}
# Fields some agents' configs gained since then (PPO's family and PQN), with the values a run dir written without
# them ran with; filled in only for a config that has the field.
AGENT_FIELDS_ADDED = {"shuffle_block": 0}
CONFIG = "config.json"
METRICS = "metrics.jsonl"
TIMING = "timing.jsonl"
POPULATION = "population.jsonl"  # a PBT run's rounds: each member's parent, fitness and values
CHECKPOINTS = "checkpoints"
TENSORBOARD = "tensorboard"
WANDB_RUN_ID = "wandb-run-id"


def config_values(saved: dict, fields: Iterable[str] = ()) -> dict:
    """A saved ``config`` section (config.json's or a checkpoint's) with ``CONFIG_FIELDS_ADDED`` filled in where the
    run predates them, and ``AGENT_FIELDS_ADDED`` for those of ``fields`` (the agent config's field names): the
    settings the run trained with."""
    added = {name: value for name, value in AGENT_FIELDS_ADDED.items() if name in fields}
    return {**CONFIG_FIELDS_ADDED, **added, **saved}


def json_default(x):
    import numpy as np

    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, tuple):
        return list(x)
    raise TypeError(type(x))


def make_meta(agent_name: str, config, run_config, devices: list, format_version: int = FORMAT_VERSION,
              agent_module: str | None = None) -> dict:
    """The contents of ``config.json``: everything needed to rebuild the run, plus where it ran."""
    import jax

    return {
        "format_version": format_version,
        "agent": agent_name,
        "agent_module": agent_module,  # where the agent's make() lives (finds unregistered agents again)
        "run": dataclasses.asdict(run_config),
        "config": dataclasses.asdict(config),
        "jax_version": jax.__version__,
        "backend": devices[0].platform,
        "device_kind": devices[0].device_kind,
        "num_devices": len(devices),
        "num_processes": jax.process_count(),
    }


def write_meta(run_dir: Path, meta: dict) -> None:
    (run_dir / CONFIG).write_text(json.dumps(meta, indent=2, default=json_default) + "\n")


def read_meta(run_dir: str | Path) -> dict:
    """``RUN_DIR/config.json``, checked to be of this rlpar's format; ``ValueError`` saying what is wrong."""
    path = Path(run_dir) / CONFIG
    if not Path(run_dir).is_dir():
        raise ValueError(f"run dir {str(run_dir)!r} does not exist: give the --run-dir of an earlier run")
    if not path.is_file():
        raise ValueError(f"{path} is missing: {str(run_dir)!r} is not an rlpar run dir (it has no config.json)")
    try:
        meta = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not readable JSON ({err})") from None
    version = meta.get("format_version") if isinstance(meta, dict) else None
    if version != FORMAT_VERSION:
        raise ValueError(
            f"{path} has format_version={version!r}; this rlpar reads format_version {FORMAT_VERSION} only: "
            "use the rlpar version that wrote it, or start a new run"
        )
    return meta


def build_config(cls: type, values: dict) -> Any:
    """An instance of the frozen dataclass ``cls`` from ``config.json`` values (JSON lists back to tuples)."""
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"config.json has fields {', '.join(unknown)} that {cls.__name__} does not know")
    converted = {}
    for name, value in values.items():
        if typing.get_origin(hints[name]) is tuple and isinstance(value, list):
            value = tuple(value)
        converted[name] = value
    return cls(**converted)
