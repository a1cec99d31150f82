"""Sweep the collector's steps per second over num_envs (powers of two) and device counts; write JSON and a plot.

Each device count runs in its own process (``rollout_sps.py --devices D``): on a CPU-only host the number of CPU
devices is fixed when JAX starts its backend, so one process cannot measure 1, 2 and 4 devices.

    python benchmarks/sweep.py --max-envs 8192 --devices 1,2,4 --out benchmarks/results/rollout.jsonl \\
        --png benchmarks/results/rollout_sps.png
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import common  # also puts the repository root on sys.path
from common import read_jsonl

HERE = Path(__file__).resolve().parent


def powers_of_two(lo: int, hi: int) -> list[int]:
    """``lo, 2 lo, ... <= hi`` for ``lo`` rounded up to a power of two."""
    n = 1
    while n < lo:
        n *= 2
    out = []
    while n <= hi:
        out.append(n)
        n *= 2
    return out


def run_device_count(devices: int, args, out: Path) -> None:
    """One ``rollout_sps.py`` process for ``devices`` devices over every num_envs it can split evenly."""
    sizes = [n for n in powers_of_two(args.min_envs, args.max_envs) if n % devices == 0]
    cmd = [sys.executable, str(HERE / "rollout_sps.py"), "--env", args.env, "--devices", str(devices),
           "--num-envs", ",".join(map(str, sizes)), "--num-steps", str(args.num_steps),
           "--repeats", str(args.repeats), "--min-repeat-s", str(args.min_repeat_s), "--out", str(out)]
    if args.no_bare:
        cmd.append("--no-bare")
    common.say(" ".join(cmd[1:]))
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL if args.quiet else None)


def plot(records: list[dict], png: Path, title: str = "") -> None:
    """SPS against num_envs, log-log: one solid line per device count (engine), dashed for bare gymnax."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    counts = sorted({r["num_devices"] for r in records})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, devices in enumerate(counts):
        for program, style in (("engine", "-o"), ("bare", "--")):
            rows = sorted((r for r in records if r["num_devices"] == devices and r["program"] == program),
                          key=lambda r: r["num_envs"])
            if not rows:
                continue
            xs = [r["num_envs"] for r in rows]
            label = f"{devices} device{'s' if devices > 1 else ''}" + (" (bare gymnax)" if program == "bare" else "")
            ax.plot(xs, [r["sps_median"] for r in rows], style, color=colors[i % len(colors)], markersize=3,
                    label=label, alpha=1.0 if program == "engine" else 0.6)
            ax.fill_between(xs, [r["sps_min"] for r in rows], [r["sps_max"] for r in rows],
                            color=colors[i % len(colors)], alpha=0.12 if program == "engine" else 0.0)
    ax.set_xscale("log", base=2)
    sizes = sorted({r["num_envs"] for r in records})
    ax.set_xticks(sizes, [str(n) for n in sizes], fontsize=7)
    ax.minorticks_off()
    ax.set_yscale("log")
    ax.set_xlabel("num_envs (total over devices)")
    ax.set_ylabel("env steps / s (median; band: min-max)")
    first = records[0]
    ax.set_title(title or f"{first['env']} collector, T={first['num_steps']}, {first['backend']} "
                 f"({first['device_kind']}), jax {first['jax_version']}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)
    plt.close(fig)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--min-envs", type=int, default=1)
    parser.add_argument("--max-envs", type=int, default=8192, help="largest num_envs (a power of two)")
    parser.add_argument("--devices", default="1,2,4", help="comma list of device counts, one process each")
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--min-repeat-s", type=float, default=0.2)
    parser.add_argument("--no-bare", action="store_true", help="skip the bare gymnax loop")
    parser.add_argument("--quiet", action="store_true", help="don't echo each JSON line")
    parser.add_argument("--out", default="benchmarks/results/rollout.jsonl", help="JSON lines (overwritten)")
    parser.add_argument("--png", default="benchmarks/results/rollout_sps.png")
    parser.add_argument("--plot-only", action="store_true", help="redraw the PNG from --out without measuring")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    if not args.plot_only:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("")
        counts = [int(d) for d in args.devices.split(",")]
        progress = common.Rows(len(counts))
        for devices in counts:
            progress.start(f"{devices} device(s), every num_envs from {args.min_envs} to {args.max_envs}")
            run_device_count(devices, args, out)
    plot([r for r in read_jsonl(out) if r.get("benchmark") == "rollout"], Path(args.png))
    common.say(f"wrote {out} and {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
