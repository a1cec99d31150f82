"""The benchmark harness: what every timing script does the same way, here once.

- **Where results go**: ``default_out(topic)`` is ``benchmarks/results/<today, UTC>/<topic>.jsonl``;
  ``add_out_argument`` makes it a script's ``--out``; ``emit`` prints a record as one JSON line and appends it there.
- **What every record carries**: ``record(benchmark, **fields)`` adds the host (``host_fields``: CPU model and vector
  extensions, CPU count, 1-minute load, Python, UTC time) and the command that made it; ``platform_fields(devices)``
  adds JAX's view (version, backend, device kind, count and memory) for a record made inside the measuring process.
- **A row in a fresh process**: ``run_fresh(argv)`` runs a command (a script's worker, ``python -m rlpar.train``),
  returns the JSON lines it printed, its wall time and CPU seconds, and raises with the end of its stderr if it fails.
- **Rounds**: ``interleave(rounds, sides)`` yields ``(round, side)`` with every side once per round (optionally in an
  order rotating by round) and says on stderr which row has started, so load from elsewhere on the host falls on
  both sides of a ratio alike; ``ratio(a, b)`` is the median of per-round ratios with their range.
- **The peer beside it**: ``peer_row(peer, argv)`` runs rejax or Stable-Baselines3 in its own environment
  (``peers.py``) and returns its record with the command that reproduces it, or None where it is not installed.
- **Statistics**: ``spread(values)`` (median, quartiles, extremes), ``sps_stats`` (the same for steps per second).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, NamedTuple, Sequence

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as `python benchmarks/x.py` from anywhere: rlpar, agents, envs importable
    sys.path.insert(0, str(ROOT))


RESULTS = ROOT / "benchmarks" / "results"


def today() -> str:
    """The UTC date, ``YYYY-MM-DD``: the folder of ``benchmarks/results`` a run writes into."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")


def default_out(topic: str, suffix: str = ".jsonl") -> str:
    """``benchmarks/results/<today>/<topic>.jsonl``, the one place results go (relative to the repository root)."""
    return str((RESULTS / today() / f"{topic}{suffix}").relative_to(ROOT))


def add_out_argument(parser, topic: str) -> None:
    """``--out``: the .jsonl file the records are appended to, by default ``default_out(topic)``."""
    parser.add_argument("--out", default=default_out(topic),
                        help=f"append the JSON lines to this file (default: benchmarks/results/<today>/{topic}.jsonl)")


def spread(values: Sequence[float]) -> dict:
    """``{"median", "q1", "q3", "min", "max", "n"}`` of ``values`` (quartiles inclusive; one value is all six)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("spread of no values")
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    return {"median": statistics.median(ordered), "q1": q1, "q3": q3, "min": ordered[0], "max": ordered[-1],
            "n": len(ordered)}


def sps_stats(steps_per_repeat: int, times: list[float]) -> dict:
    """Median, quartiles and extremes of steps per second over repeats of ``steps_per_repeat`` steps each."""
    s = spread([steps_per_repeat / t for t in times])
    return {"sps_median": s["median"], "sps_q1": s["q1"], "sps_q3": s["q3"], "sps_min": s["min"],
            "sps_max": s["max"], "repeats": s["n"]}


def ratio(a: dict, b: dict) -> dict | None:
    """``a`` over ``b`` measured in the same rounds (each ``{round: value}``): the median of the per-round ratios,
    their extremes and how many rounds had both; None if none had."""
    values = [a[k] / b[k] for k in sorted(a) if k in b and b[k]]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "rounds": len(values)}


def ratio_text(r: dict | None) -> str:
    """``ratio``'s result as ``1.09x (1.07-1.14, 3 rounds)``; ``n/a`` for None."""
    if r is None:
        return "n/a"
    return f"{r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f}, {r['rounds']} round{'s' * (r['rounds'] != 1)})"


def interleave(rounds: int, sides: Sequence, rotate: bool = False, describe=str) -> Iterator[tuple[int, object]]:
    """``(round, side)`` for every side once per round, in the given order or (``rotate``) starting one later each
    round; says on stderr which row has started (``row 3/9: round 1/3, rejax (52s so far)``)."""
    sides = list(sides)
    progress = Rows(rounds * len(sides))
    for r in range(rounds):
        shift = r % len(sides) if rotate and sides else 0
        for side in sides[shift:] + sides[:shift]:
            progress.start(f"round {r + 1}/{rounds}, {describe(side)}")
            yield r, side


class FreshRun(NamedTuple):
    """What ``run_fresh`` saw of one process."""

    records: list  # the JSON objects it printed on stdout, one a line, in order
    stdout: str
    stderr: str
    wall_s: float  # from start to exit, as a user waits for it
    cpu_s: float  # the process's CPU seconds, user + system, all threads


def run_fresh(argv: Sequence[str], env: dict | None = None, cwd: str | Path = ROOT, timeout_s: float | None = None,
              check: bool = True) -> FreshRun:
    """Run ``argv`` in a fresh process (nothing compiled, no devices opened, ``--devices`` still free to choose);
    ``env`` is added to this process's environment. A failure (non-zero exit, with ``check``) raises with the end of
    its stderr."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True,
                          text=True, timeout=timeout_s)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return FreshRun(records, proc.stdout, proc.stderr, wall, cpu)


def pythonpath_first(code: str | Path) -> str:
    """``PYTHONPATH`` with ``code`` first and this process's own entries after it (a machine may keep its JAX in a
    folder that ``PYTHONPATH`` names: replacing it would lose that)."""
    return os.pathsep.join([str(code), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])


def peer_row(peer: str, argv: list[str], timeout_s: float = 900) -> dict | None:
    """``peers.py PEER ARGV`` in the peer's own environment: its record, with ``program`` and the ``command`` that
    reproduces it; None where the peer is not installed (``python benchmarks/peers.py install``)."""
    import peers

    record = peers.run_peer(peer, argv, timeout_s=timeout_s)
    if record is None:
        return None
    return {"program": peer, **record, "command": " ".join(["python benchmarks/peers.py", peer, *argv])}


def record(benchmark: str, **fields) -> dict:
    """A result line: ``benchmark``, ``fields``, the host (``host_fields``) and the command (``fields`` may give its
    own ``command``, e.g. a peer's)."""
    return {"benchmark": benchmark, **fields, **host_fields(), "command": fields.get("command") or command_line()}


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


def add_force_argument(parser) -> None:
    """``--force CHOICE=VALUE`` (repeatable): answer one of ``rlpar.core.platform``'s per-backend choices as given
    (``fast_paths=on|off`` for the switch; ``collector_unroll=4``, ``raveled_update=on``, ``shuffle_method=sort``, ...),
    to time the answers against each other on one backend. ``apply_forcing`` applies them."""
    from rlpar.core import platform  # jax imported, no backend started

    parser.add_argument("--force", action="append", default=[], metavar="CHOICE=VALUE",
                        help="force one of rlpar.core.platform's choices "
                             f"({', '.join(('fast_paths', *platform.CHOICES))})")


def parse_forcing(items: Sequence[str]) -> dict:
    """``["collector_unroll=4", "fast_paths=on"]`` -> ``{"collector_unroll": 4, "fast_paths": True}``;
    ``ValueError`` (one line) for an unknown choice or a value it cannot take."""
    from rlpar.core import platform

    known = ("fast_paths", *platform.CHOICES)
    forced = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or name not in known:
            raise ValueError(f"--force {item!r}: expected CHOICE=VALUE with CHOICE one of {', '.join(known)}")
        lowered = text.strip().lower()
        if lowered in ("on", "true", "1", "yes"):
            value = True
        elif lowered in ("off", "false", "0", "no"):
            value = False
        elif lowered.isdigit():
            value = int(lowered)
        else:
            value = text.strip()
        if name in ("collector_unroll", "shuffle_block") and isinstance(value, bool):
            value = int(value)
        forced[name] = value
    for name, value in forced.items():  # each answer checked before anything is traced
        if name == "fast_paths":
            if not isinstance(value, bool):
                raise ValueError(f"--force fast_paths={value!r}: expected on or off")
        else:
            try:
                with platform.forcing(**{name: value}):  # checks the answer, forces nothing past this line
                    pass
            except ValueError as error:
                raise ValueError(f"--force {name}={value!r}: {error}") from None
    return forced


def apply_forcing(forced: dict) -> None:
    """Apply ``parse_forcing``'s answers for everything traced from now on in this process (any forced before are
    undone first: each row of a script decides its own)."""
    from rlpar.core import platform

    platform.set_fast_paths(None)
    for name in platform.CHOICES:
        platform.force(name, None)
    for name, value in forced.items():
        if name == "fast_paths":
            platform.set_fast_paths(value)
        else:
            platform.force(name, value)


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
