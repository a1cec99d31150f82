"""Helpers shared by the benchmark scripts: timing statistics, the fields every result line carries, output."""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as `python benchmarks/x.py` from anywhere: rlpar, agents, envs importable
    sys.path.insert(0, str(ROOT))


def sps_stats(steps_per_repeat: int, times: list[float]) -> dict:
    """Median, quartiles and extremes of steps per second over repeats of ``steps_per_repeat`` steps each."""
    sps = sorted(steps_per_repeat / t for t in times)
    if len(sps) >= 2:
        q1, _, q3 = statistics.quantiles(sps, n=4, method="inclusive")
    else:
        q1 = q3 = sps[0]
    return {
        "sps_median": statistics.median(sps),
        "sps_q1": q1,
        "sps_q3": q3,
        "sps_min": sps[0],
        "sps_max": sps[-1],
        "repeats": len(sps),
    }


def platform_fields(devices) -> dict:
    """jax version, backend, device kind and count, and the host's load when measured."""
    import jax

    return {
        "jax_version": jax.__version__,
        "backend": devices[0].platform,
        "device_kind": devices[0].device_kind,
        "num_devices": len(devices),
        **host_fields(),
    }


def host_fields() -> dict:
    """Host CPU count and 1-minute load average (other processes on the machine make timings noisy)."""
    return {
        "host_cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "time_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def command_line() -> str:
    """The command that produced a record, as typed from the repository root."""
    script = os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)
    return " ".join(["python", script, *sys.argv[1:]])


def emit(record: dict, out: str | None) -> None:
    """Print ``record`` as one JSON line and append it to ``out`` (a .jsonl file) if given."""
    line = json.dumps(record, sort_keys=False)
    print(line, flush=True)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        with open(out, "a") as f:
            f.write(line + "\n")


def read_jsonl(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
