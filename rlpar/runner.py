"""The host loop: validate, build the mapped program, compile once, run chunks of updates, log between them.

Between calls the host only reads small per-update metrics; environments, acting and learning stay on the devices.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import numpy as np

from rlpar import parallel

RUN_FORMAT_VERSION = 1


def _f(default, help: str):  # noqa: A002
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class RunConfig:
    """Where and how a run executes (not what it learns). Each field is a CLI flag too."""

    env: str = _f("CartPole-v1", "environment id (gymnax id or probe id)")
    devices: int = _f(0, "local devices to use; 0 = all. On a CPU-only host the CLI creates this many CPU devices")
    run_dir: str = _f("", "directory for config.json and metrics.jsonl; empty = write nothing")
    log_every: int = _f(10, "updates per compiled call; one log line and metrics.jsonl record per call")

    def validate(self) -> "RunConfig":
        if not isinstance(self.devices, int) or self.devices < 0:
            raise ValueError(f"devices={self.devices!r}: must be a positive integer, or 0 for all local devices")
        if not isinstance(self.log_every, int) or self.log_every <= 0:
            raise ValueError(f"log_every={self.log_every!r}: must be a positive integer")
        return self


class AgentSpec(NamedTuple):
    """What the runner needs from an agent family."""

    name: str
    config_cls: type
    # make(config, env, env_params, num_local_envs, axis_name) -> object with .init(key_params, key_device) and
    # .update(state) -> (state, metrics)
    make: Callable[..., Any]


class TrainResult(NamedTuple):
    params: Any  # final parameters (host numpy pytree; identical on every device)
    metrics: list[dict]  # one dict per logged chunk of updates, as in metrics.jsonl
    state: Any  # final per-device training state (on the devices)
    compile_s: float  # seconds spent compiling the update program


def _chunk(update: Callable, length: int) -> Callable:
    """``length`` updates in one ``lax.scan``; per-update metrics stacked ``[length]``."""

    def run(state):
        return jax.lax.scan(lambda s, _: update(s), state, None, length=length)

    return run


def summarize(raw: dict, *, update: int, env_steps: int, seconds: float, steps_in_chunk: int) -> dict:
    """Turn a chunk's stacked per-update metrics into one log record."""
    count = float(np.sum(raw["episode/count"]))
    record = {
        "update": update,
        "env_steps": env_steps,
        "time_s": round(seconds, 4),
        "sps": steps_in_chunk / seconds if seconds > 0 else float("nan"),
        "episodes": int(count),
        "episode_return": float(np.sum(raw["episode/return_sum"]) / count) if count else None,
        "episode_length": float(np.sum(raw["episode/length_sum"]) / count) if count else None,
    }
    for name, values in raw.items():
        if not name.startswith("episode/"):
            record[name] = float(np.mean(values))
    return record


def format_record(record: dict, num_updates: int) -> str:
    ret = record["episode_return"]
    ret_s = f"{ret:9.2f}" if ret is not None else "      n/a"
    return (
        f"update {record['update']:>6}/{num_updates}  steps {record['env_steps']:>11,}  "
        f"sps {record['sps']:>10,.0f}  return {ret_s}  "
        f"loss {record.get('loss/total', float('nan')):8.4f}"
    )


def _json_default(x):
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, tuple):
        return list(x)
    raise TypeError(type(x))


def run(
    agent: AgentSpec,
    config,
    run_config: RunConfig = RunConfig(),
    *,
    on_log: Callable[[dict], None] | None = None,
    env_kwargs: dict | None = None,
) -> TrainResult:
    """Train ``agent`` with ``config`` on ``run_config.env``; returns final params and per-chunk metrics."""
    import envs

    run_config.validate()
    devices = parallel.select_devices(run_config.devices)
    num_devices = len(devices)
    config.validate(num_devices)
    env, env_params = envs.make(run_config.env, **(env_kwargs or {}))
    num_local_envs = config.num_envs // num_devices
    num_updates = config.num_updates

    def make_init(axis_name):
        return agent.make(config, env, env_params, num_local_envs, axis_name).init

    def make_step(length):
        return lambda axis_name: _chunk(agent.make(config, env, env_params, num_local_envs, axis_name).update, length)

    run_dir = Path(run_config.run_dir) if run_config.run_dir else None
    if run_dir is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
        meta = {
            "format_version": RUN_FORMAT_VERSION,
            "agent": agent.name,
            "run": dataclasses.asdict(run_config),
            "config": dataclasses.asdict(config),
            "jax_version": jax.__version__,
            "backend": devices[0].platform,
            "device_kind": devices[0].device_kind,
            "num_devices": num_devices,
        }
        (run_dir / "config.json").write_text(json.dumps(meta, indent=2, default=_json_default) + "\n")
        metrics_file = open(run_dir / "metrics.jsonl", "w")
    else:
        metrics_file = None

    key = jax.random.PRNGKey(config.seed)
    key_params, key_devices = jax.random.split(key)
    state = parallel.map_init(make_init, devices)(key_params, key_devices)

    # Compile once per distinct chunk length (at most two: log_every and the remainder).
    lengths = [run_config.log_every] * (num_updates // run_config.log_every)
    if num_updates % run_config.log_every:
        lengths.append(num_updates % run_config.log_every)
    compiled, compile_s = {}, 0.0
    for length in sorted(set(lengths)):
        start = time.perf_counter()
        compiled[length] = parallel.map_step(make_step(length), devices).lower(state).compile()
        compile_s += time.perf_counter() - start

    records = []
    done_updates = 0
    try:
        for length in lengths:
            start = time.perf_counter()
            state, raw = compiled[length](state)
            raw = parallel.to_host(raw)  # waits for the devices
            seconds = time.perf_counter() - start
            done_updates += length
            record = summarize(
                raw,
                update=done_updates,
                env_steps=done_updates * config.batch_size,
                seconds=seconds,
                steps_in_chunk=length * config.batch_size,
            )
            records.append(record)
            if metrics_file is not None:
                metrics_file.write(json.dumps(record) + "\n")
                metrics_file.flush()
            if on_log is not None:
                on_log(record)
    finally:
        if metrics_file is not None:
            metrics_file.close()
    return TrainResult(parallel.first_replica(state.params), records, state, compile_s)


def mean_recent_return(records: list[dict], last: int = 5) -> float:
    """Mean episode return over the last ``last`` logged chunks that finished an episode (weighted by episodes)."""
    recent = [r for r in records if r["episode_return"] is not None][-last:]
    episodes = sum(r["episodes"] for r in recent)
    if not episodes:
        return math.nan
    return sum(r["episode_return"] * r["episodes"] for r in recent) / episodes
