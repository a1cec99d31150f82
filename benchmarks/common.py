"""Helpers shared by the benchmark scripts: timing statistics, the fields every result line carries, output."""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import sys
import time
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
    """jax version, backend, the first device as JAX names it, device kind, count and memory (bytes an accelerator
    lets programs hold; None on a CPU), and the host's load when measured."""
    import jax

    return {
        "jax_version": jax.__version__,
        "backend": devices[0].platform,
        "device": str(devices[0]),
        "device_kind": devices[0].device_kind,
        "num_devices": len(devices),
        "device_memory_bytes": device_memory(devices[0]),
        **host_fields(),
    }


def device_memory(device) -> int | None:
    """The bytes ``device`` lets programs hold (``memory_stats()["bytes_limit"]``), or None where JAX does not say
    (a CPU)."""
    try:
        stats = device.memory_stats()
    except Exception:  # a backend without memory statistics raises rather than returning None
        return None
    return (stats or {}).get("bytes_limit")


# The vector extensions that decide how fast XLA:CPU's kernels run, as /proc/cpuinfo names them (x86 "flags",
# ARM "Features"): an AVX2 host runs the README's command about twice as slowly as an AVX-512 one.
VECTOR_EXTENSIONS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_tile",
                     "asimd", "sve", "sve2")


def cpu_description(cpuinfo: str | None = None) -> str:
    """The host CPU's model and vector extensions, e.g. ``"AMD EPYC (avx, avx2, fma)"``.

    ``cpuinfo`` is the text of ``/proc/cpuinfo`` (read when None); where there is none (macOS, Windows) the model is
    ``platform.processor()`` and the extensions are not listed."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    model = fields.get("model name") or fields.get("Model") or platform.processor() or platform.machine() or "unknown"
    present = set((fields.get("flags") or fields.get("Features") or "").split())
    extensions = [name for name in VECTOR_EXTENSIONS if name in present]
    return f"{model} ({', '.join(extensions)})" if extensions else model


def host_fields() -> dict:
    """Host CPU (model and vector extensions), CPU count and 1-minute load average (other processes on the machine
    make timings noisy)."""
    return {
        "cpu": cpu_description(),
        "host_cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "time_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def host_line() -> str:
    """``host_fields`` as one line, for the scripts that print a table instead of JSON records."""
    host = host_fields()
    return (f"host: {host['cpu']}, {host['host_cpus']} CPUs, 1-minute load {host['load_avg_1m']}, "
            f"python {host['python']}, {host['time_utc']}")


def command_line() -> str:
    """The command that produced a record, as typed from the repository root."""
    script = os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)
    return " ".join(["python", script, *sys.argv[1:]])


def say(message: str) -> None:
    """One progress line on stderr, named by the script (``[learning] row 2/6: ...``); stdout keeps the results."""
    print(f"[{Path(sys.argv[0]).stem}] {message}", file=sys.stderr, flush=True)


class Rows:
    """Counts a script's rows as they start: ``rows.start("pqn, 2 devices")`` says
    ``row 3/12: pqn, 2 devices (41s so far)`` on stderr, so a long benchmark tells how far it has got."""

    def __init__(self, total: int):
        self.total, self.started, self.t0 = total, 0, time.perf_counter()

    def start(self, what: str) -> None:
        self.started += 1
        say(f"row {self.started}/{self.total}: {what} ({time.perf_counter() - self.t0:.0f}s so far)")


def split_rows(argv: list[str], separator: str = "--then") -> list[list[str]]:
    """A command line of several rows, ``--env A ... --then --env B ...``, as one argument list per row: the scripts
    that take ``--then`` run every row in one process (opening an accelerator costs 10-15 s a process on a TPU,
    and only one process may hold it)."""
    rows = [[]]
    for arg in argv:
        if arg == separator:
            rows.append([])
        else:
            rows[-1].append(arg)
    return rows


def past_deadline(deadline: float | None) -> bool:
    """Whether the Unix time ``deadline`` (None: none) has passed: a row is not started after it."""
    return deadline is not None and time.time() > deadline


def not_measured(reason: str, **row) -> None:
    """Say on stdout, as one JSON line beside the records, that the row ``row`` (its program, env, num_envs) was
    not measured and why; ``device_run.py`` reads these back."""
    print(json.dumps({"not_measured": reason, **row}), flush=True)


def failure(error: BaseException) -> str:
    """``error`` as a ``not_measured`` reason: its type and the first line of its message."""
    message = str(error).strip().splitlines()
    return f"failed: {type(error).__name__}" + (f": {message[0][:300]}" if message else "")


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


def add_ppo_config_arguments(parser) -> None:
    """The flags that choose a PPO config for the scripts that time one (``ppo_setup`` reads them back)."""
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--preset", action="store_true", help="start from the env's PPO preset (PPOConfig.for_env)")
    parser.add_argument("--num-envs", type=int, default=None, help="default: 8, or the preset's")
    parser.add_argument("--num-steps", type=int, default=None, help="default: 128, or the preset's")
    parser.add_argument("--torso", default=None, help="auto (convolution for images) or mlp; default: the preset's")
    parser.add_argument("--hidden-sizes", default=None, help="e.g. 128 or 256,256; default: the preset's")


def ppo_setup(parser, args):
    """``(PPOConfig, env, env_params)`` for ``add_ppo_config_arguments``' flags; a bad ``--env`` or ``--hidden-sizes``
    is the parser's one-line error, before anything compiles."""
    import envs
    from agents.ppo import PPOConfig

    try:
        hidden = tuple(int(h) for h in args.hidden_sizes.split(",")) if args.hidden_sizes else None
    except ValueError:
        hidden = ()
    if hidden is not None and (not hidden or min(hidden) < 1):
        parser.error(f"--hidden-sizes={args.hidden_sizes!r}: expected positive integers separated by commas, e.g. "
                     "256,256")
    try:
        env, env_params = envs.make(args.env)
    except ValueError as error:
        parser.error(f"--env: {error}")
    config = PPOConfig.for_env(args.env) if args.preset else PPOConfig()
    config = config.replace(**{k: v for k, v in (("num_envs", args.num_envs), ("num_steps", args.num_steps),
                                               ("torso", args.torso), ("hidden_sizes", hidden)) if v is not None})
    return config, env, env_params
