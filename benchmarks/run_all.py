"""Every benchmark in one command: rollout sweep, end-to-end training, peers; JSON lines, a PNG and a markdown table.

    python benchmarks/peers.py install            # once: rejax and Stable-Baselines3 venvs (optional)
    python benchmarks/run_all.py --out benchmarks/results/

Writes into ``--out``: ``rollout.jsonl`` (sweep), ``train.jsonl`` (rlpar and peers), ``rollout_sps.png`` and
``table.md`` (the tables for ``benchmarks/README.md``, each row with the command that measured it). Every
device count runs in a fresh process. Training runs in ``--train-rounds`` rounds, each round running every rlpar
row and rejax once, so that the host's load (which moves single runs by 20% here) falls on all programs alike; the
table gives each row's median over rounds, and each ratio is the median of the per-round ratios.
``--quick`` shrinks everything for a smoke test (about two minutes).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import common  # also puts the repository root on sys.path
import peers
import sweep
from common import emit, host_fields, read_jsonl

HERE = Path(__file__).resolve().parent

# Training configurations measured end to end. "default" is PPOConfig's CartPole default (the peers' config too);
# "large" has enough environments per device for compute, not per-step overhead, to dominate.
TRAIN_CONFIGS = {
    "default": {"num_envs": 8, "num_steps": 128, "total_timesteps": 1_000_000, "log_every": 10},
    "large": {"num_envs": 1024, "num_steps": 128, "total_timesteps": 2_097_152, "log_every": 4},
}
QUICK_TRAIN_CONFIGS = {
    "default": {"num_envs": 8, "num_steps": 128, "total_timesteps": 102_400, "log_every": 10},
    "large": {"num_envs": 256, "num_steps": 128, "total_timesteps": 262_144, "log_every": 4},
}


def train_rlpar(name: str, config: dict, devices: int, out: Path, round_: int) -> None:
    """``train_sps.py`` for one config and device count, in a fresh process."""
    cmd = [sys.executable, str(HERE / "train_sps.py"), "--devices", str(devices)]
    for key, value in config.items():
        cmd += [f"--{key.replace('_', '-')}", str(value)]
    subprocess.run(cmd + ["--out", str(out)], check=True, stdout=subprocess.DEVNULL)
    records = read_jsonl(out)
    records[-1].update(config_name=name, round=round_)
    out.write_text("".join(json.dumps(r) + "\n" for r in records))


def train_peer(peer: str, name: str, config: dict, repeats: int, out: Path, round_: int | None) -> None:
    """One peer on one config; its record (or nothing, if the peer is not installed) appended to ``out``."""
    argv = ["--num-envs", str(config["num_envs"]), "--num-steps", str(config["num_steps"]),
            "--total-timesteps", str(config["total_timesteps"]), "--repeats", str(repeats)]
    record = peers.run_peer(peer, argv)
    if record is not None:
        emit({"benchmark": "train", "program": peer, "config_name": name, "round": round_, **host_fields(),
              **record, "command": "python benchmarks/peers.py " + " ".join([peer, *argv])}, str(out))


def _fmt(x, digits=0) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.{digits}f}"


def _k(x) -> str:
    return "n/a" if x is None else (f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.0f}k")


def rollout_table(records: list[dict]) -> list[str]:
    """Rows of (devices, num_envs): engine median [q1-q3], bare median, overhead."""
    lines = ["| devices | num_envs | engine SPS median [IQR] | bare gymnax SPS median | engine overhead | compile s |",
             "|---|---|---|---|---|---|"]
    engine = [r for r in records if r["program"] == "engine"]
    bare = {(r["num_devices"], r["num_envs"]): r for r in records if r["program"] == "bare"}
    for r in sorted(engine, key=lambda r: (r["num_devices"], r["num_envs"])):
        b = bare.get((r["num_devices"], r["num_envs"]))
        over = r.get("overhead_vs_bare")
        lines.append(f"| {r['num_devices']} | {r['num_envs']} | {_k(r['sps_median'])} "
                     f"[{_k(r['sps_q1'])}-{_k(r['sps_q3'])}] | {_k(b['sps_median']) if b else 'n/a'} | "
                     f"{'n/a' if over is None else format(100 * over, '+.0f') + '%'} | {r['compile_s']:.1f} |")
    return lines


def scaling_lines(records: list[dict]) -> list[str]:
    """Engine SPS at each num_envs >= 1024 (the two largest if none) measured on every device count, relative to
    1 device."""
    engine = [r for r in records if r["program"] == "engine"]
    by = {(r["num_devices"], r["num_envs"]): r for r in engine}
    counts = sorted({r["num_devices"] for r in engine})
    common_sizes = [n for n in sorted({r["num_envs"] for r in engine}) if all((d, n) in by for d in counts)]
    out = []
    for n in [n for n in common_sizes if n >= 1024] or common_sizes[-2:]:
        base = by[(1, n)]["sps_median"] if (1, n) in by else None
        parts = []
        for d in counts:
            sps = by[(d, n)]["sps_median"]
            parts.append(f"{d} dev {_k(sps)}" + (f" ({sps / base:.2f}x)" if base else ""))
        out.append(f"- collector, num_envs={n}: " + ", ".join(parts))
    return out


def overhead_lines(records: list[dict]) -> list[str]:
    """Median engine overhead over bare gymnax per device count, over all sizes and over num_envs >= 1024."""
    out = []
    for devices in sorted({r["num_devices"] for r in records}):
        rows = [r for r in records if r["num_devices"] == devices and r.get("overhead_vs_bare") is not None]
        if not rows:
            continue
        every = statistics.median(r["overhead_vs_bare"] for r in rows)
        large = [r["overhead_vs_bare"] for r in rows if r["num_envs"] >= 1024]
        text = f"- collector overhead vs bare gymnax, {devices} device(s): median {100 * every:+.1f}% over all num_envs"
        if large:
            text += f", {100 * statistics.median(large):+.1f}% over num_envs >= 1024"
        out.append(text)
    return out


def _sps(record: dict) -> float:
    return record.get("sps_end_to_end", record["sps_median"])


def _rows(train: list[dict]) -> dict[tuple, list[dict]]:
    """Training records grouped by (config name, program, devices), in the order first measured."""
    rows: dict[tuple, list[dict]] = {}
    for r in train:
        rows.setdefault((r.get("config_name", ""), r["program"], r["num_devices"]), []).append(r)
    return rows


def train_table(records: list[dict]) -> list[str]:
    """One row per (config, program, devices): the median run's figures, and every run's SPS."""
    lines = ["| config | program | devices | num_envs x num_steps | env steps | train SPS, median of runs | "
             "SPS of each run (round order) | time to return >= target | final return | compile s | command |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (name, program, devices), runs in _rows(records).items():
        median = statistics.median(_sps(r) for r in runs)
        r = min(runs, key=lambda run: abs(_sps(run) - median))  # the run nearest the median (itself, if odd)
        tt = r.get("time_to_target_s")
        to_target = "n/a" if tt is None else f"{tt:.1f} s ({_k(r.get('steps_to_target'))} steps)"
        lines.append(
            f"| {name} | {program} | {devices} | {r['num_envs']} x {r['num_steps']} | {_k(r['env_steps'])} | "
            f"{_k(median)} | {', '.join(_k(_sps(run)) for run in runs)} | {to_target} | "
            f"{_fmt(r.get('final_return'), 1)} | {r.get('compile_s', 0):.1f} | `{r['command']}` |")
    return lines


def ratio_lines(train: list[dict]) -> list[str]:
    """rlpar against the peers on the same config, and 1 -> 2 -> 4 devices: the median of the per-round ratios
    (each round measures both sides of a ratio minutes apart), with their range."""
    rows = _rows(train)  # keys (config name, program, devices), as ratio()'s arguments
    by_round = {key + (r["round"],): _sps(r) for key, runs in rows.items() for r in runs if r.get("round") is not None}
    rounds = sorted({key[-1] for key in by_round})

    def ratio(a: tuple, b: tuple) -> str | None:
        values = [by_round[a + (k,)] / by_round[b + (k,)] for k in rounds
                  if a + (k,) in by_round and b + (k,) in by_round]
        if values:
            spread = f" (rounds {min(values):.2f}x-{max(values):.2f}x)" if len(values) > 1 else ""
            return f"{statistics.median(values):.2f}x{spread}"
        if a in rows and b in rows:  # not measured in the same round (SB3 runs once, after the rounds)
            medians = [statistics.median(_sps(r) for r in rows[key]) for key in (a, b)]
            return f"{medians[0] / medians[1]:.2f}x (medians of all runs)"
        return None

    out = []
    for name in ("default", "large"):
        for peer in ("rejax", "sb3"):
            text = ratio((name, "rlpar", 1), (name, peer, 1))
            if text:
                out.append(f"- train SPS, {name} config, 1 device: rlpar / {peer} = {text}")
        counts = sorted({r["num_devices"] for r in train if r["program"] == "rlpar" and r.get("config_name") == name})
        for d in (d for d in counts if d != 1):
            text = ratio((name, "rlpar", d), (name, "rlpar", 1))
            if text:
                out.append(f"- train SPS, {name} config: {d} devices / 1 device = {text}")
            text = ratio((name, "rlpar", d), (name, "rejax", 1))
            if text:
                out.append(f"- train SPS, {name} config, whole host: rlpar on {d} devices / rejax = {text}")
    return out


def write_table(out_dir: Path, command: str, started: str) -> Path:
    rollout = read_jsonl(out_dir / "rollout.jsonl") if (out_dir / "rollout.jsonl").exists() else []
    train = read_jsonl(out_dir / "train.jsonl") if (out_dir / "train.jsonl").exists() else []
    first = (rollout or train or [{}])[0]

    def when(records: list[dict]) -> str:  # a part skipped with --skip keeps the rows of an earlier run
        if not records:
            return "none"
        times = sorted(r["time_utc"] for r in records)
        loads = [r["load_avg_1m"] for r in records]
        return (f"{times[0]} to {times[-1]} (1-minute load average at the start of each row "
                f"{min(loads):.1f} to {max(loads):.1f})")

    lines = [f"Written at {host_fields()['time_utc']} by `{command}` (started {started}); jax "
             f"{first.get('jax_version')}, backend {first.get('backend')} ({first.get('device_kind')}), "
             f"{first.get('host_cpus')} host CPUs ({first.get('cpu', 'CPU not recorded')}). Rollout rows measured "
             f"{when(rollout)}; training rows measured {when(train)}.", "",
             "Ratios:", *overhead_lines(rollout), *scaling_lines(rollout), *ratio_lines(train), "",
             "### Rollout (collector, no learning)", "",
             f"Each row: `{rollout[0]['command'] if rollout else ''}` (with that row's `--devices`); "
             "median over repeats, IQR in brackets.", "",
             *rollout_table(rollout), "", "### Training (end to end, compile excluded)", "", *train_table(train), ""]
    path = out_dir / "table.md"
    path.write_text("\n".join(lines))
    return path


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="benchmarks/results/", help="output directory")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--min-envs", type=int, default=1, help="smallest num_envs of the rollout sweep")
    parser.add_argument("--max-envs", type=int, default=8192, help="largest num_envs of the rollout sweep")
    parser.add_argument("--devices", default="1,2,4", help="device counts (fake CPU devices on a CPU-only host)")
    parser.add_argument("--train-devices", default="1,2,4", help="device counts for the training runs")
    parser.add_argument("--configs", default=",".join(TRAIN_CONFIGS),
                        help="comma list of training configurations to run: " + ", ".join(TRAIN_CONFIGS))
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per rollout point")
    parser.add_argument("--train-rounds", type=int, default=3,
                        help="rounds of training runs (every rlpar row and rejax once per round)")
    parser.add_argument("--peer-repeats", type=int, default=1, help="timed training runs per peer per round")
    parser.add_argument("--sb3-timesteps", type=int, default=65_536, help="SB3 is ~10x slower: fewer steps")
    parser.add_argument("--skip", default="", help="comma list of parts to skip: rollout, train, peers")
    parser.add_argument("--quick", action="store_true", help="small settings, for checking the scripts")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))
    started = host_fields()["time_utc"]
    command = common.command_line()
    names = [name for name in args.configs.split(",") if name]
    unknown = [name for name in names if name not in TRAIN_CONFIGS]
    if unknown:
        raise SystemExit(f"--configs {args.configs}: unknown {', '.join(unknown)}; known: {', '.join(TRAIN_CONFIGS)}")
    configs = {name: (QUICK_TRAIN_CONFIGS if args.quick else TRAIN_CONFIGS)[name] for name in names}
    t0 = time.perf_counter()

    if "rollout" not in skip:
        sweep.main(["--env", args.env, "--max-envs", str(64 if args.quick else args.max_envs),
                    "--min-envs", "16" if args.quick else str(args.min_envs), "--devices", args.devices,
                    "--repeats", str(2 if args.quick else args.repeats), "--quiet",
                    "--out", str(out_dir / "rollout.jsonl"), "--png", str(out_dir / "rollout_sps.png")])
        common.say(f"rollout sweep done at {time.perf_counter() - t0:.0f} s")
    train_out = out_dir / "train.jsonl"
    if "train" not in skip or "peers" not in skip:  # start afresh, keeping the rows of a skipped part
        def keep(r: dict) -> bool:  # ... if they were measured on this run's configs (not e.g. --quick's)
            config = configs.get(r.get("config_name"), {})
            same = (config.get("num_envs"), config.get("num_steps")) == (r["num_envs"], r["num_steps"])
            skipped = ("train" in skip and r["program"] == "rlpar") or ("peers" in skip and r["program"] != "rlpar")
            return same and skipped

        kept = [r for r in (read_jsonl(train_out) if train_out.exists() else []) if keep(r)]
        train_out.write_text("".join(json.dumps(r) + "\n" for r in kept))
    rounds = 0 if {"train", "peers"} <= skip else 1 if args.quick else args.train_rounds
    device_counts = [] if "train" in skip else [int(d) for d in args.train_devices.split(",")]
    peer_rows = "peers" not in skip
    per_round = sum(sum(config["num_envs"] % d == 0 for d in device_counts) + peer_rows for config in configs.values())
    progress = common.Rows(rounds * per_round + (peer_rows and "default" in configs))
    for round_ in range(rounds):
        for name, config in configs.items():
            for devices in device_counts:
                if config["num_envs"] % devices == 0:
                    progress.start(f"round {round_ + 1}/{rounds}: train {name}, rlpar on {devices} device(s)")
                    train_rlpar(name, config, devices, train_out, round_)
            if peer_rows:
                progress.start(f"round {round_ + 1}/{rounds}: train {name}, rejax")
                train_peer("rejax", name, config, args.peer_repeats, train_out, round_)
    if peer_rows and "default" in configs:
        progress.start("train default, sb3 (once, after the rounds)")
        sb3 = dict(configs["default"], total_timesteps=min(args.sb3_timesteps, configs["default"]["total_timesteps"]))
        train_peer("sb3", "default", sb3, 1, train_out, None)
    table = write_table(out_dir, command, started)
    print(table.read_text())
    common.say(f"wrote {out_dir} in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
