"""PPO's training speed against the amount of work: SPS over num_envs and devices, rlpar beside rejax, and how close
each config gets to the host's limit.

For each ``--num-envs`` (CartPole-v1, 128 steps per env per update, PPOConfig's defaults otherwise), in one process
each: rlpar's end-to-end training (``train_sps.py``) on 1 device and on each of ``--devices`` that divides it, and
rejax's PPO on the same config (``peers.py``, one device). Each run trains ``--updates`` updates after compiling
(at least 2 logged chunks). The host's limit: FLOPs per environment step (XLA's cost analysis of PPO's acting and
gradient programs, as ``profile_update.py`` counts them) times the measured SPS gives GFLOP/s, set against a 2048^3
float32 matmul on the same host. The collector's own scaling is ``sweep.py`` (same env, same sizes).

Writes ``--out``/scaling.jsonl (one line per run, and one for the FLOP counts), ``scaling.png`` (SPS and share of
the matmul rate against num_envs) and ``table.md``.

    python benchmarks/scaling.py --out benchmarks/results/2026-12-04/scaling
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import common  # also puts the repository root on sys.path
import peers
from common import emit, read_jsonl

HERE = Path(__file__).resolve().parent
NUM_STEPS = 128


def flops_per_step(sizes: list[int]) -> tuple[dict[int, float], float]:
    """``({num_envs: FLOPs per env step of one PPO update}, matmul GFLOP/s)`` on this host, one device."""
    import jax
    import jax.numpy as jnp

    import envs
    from agents.ppo import Batch, PPOConfig, make_ppo
    from thunks import median_seconds

    env, env_params = envs.make("CartPole-v1")
    out = {}
    for n in sizes:
        config = PPOConfig(num_envs=n, num_steps=NUM_STEPS)
        ppo = make_ppo(config, env, env_params, n, None)
        state = ppo.init(jax.random.PRNGKey(0), jax.random.PRNGKey(1))
        rows = config.batch_size // config.num_minibatches
        batch = Batch(jnp.zeros((rows, 4)), jnp.zeros((rows,), jnp.int32), *[jnp.zeros((rows,))] * 4)
        cost = lambda fn, *a: float(jax.jit(fn).lower(*a).compile().cost_analysis()["flops"])
        grad = cost(ppo.grad, state.params, batch) * config.update_epochs * config.num_minibatches
        act = cost(lambda s, o: ppo.act(s, (), o, jax.random.PRNGKey(0)), state, jnp.zeros((n, 4))) * (NUM_STEPS + 1)
        out[n] = (grad + act) / config.batch_size
    a = jax.random.normal(jax.random.PRNGKey(4), (2048, 2048))
    peak = 2 * 2048**3 / median_seconds(jax.jit(lambda x: x @ x), a, repeats=5) / 1e9
    return out, peak


def plot(records: list[dict], flops: dict[int, float], peak: float, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4), dpi=100)
    series = sorted({(r["program"], r["num_devices"]) for r in records})
    for program, devices in series:
        rows = sorted((r for r in records if (r["program"], r["num_devices"]) == (program, devices)),
                      key=lambda r: r["num_envs"])
        xs, sps = [r["num_envs"] for r in rows], [r["sps"] for r in rows]
        label = f"{program}, {devices} device{'s' if devices > 1 else ''}"
        style = "--o" if program == "rejax" else "-o"
        ax.plot(xs, sps, style, markersize=3, label=label)
        ax2.plot(xs, [100 * s * flops[x] / 1e9 / peak for x, s in zip(xs, sps)], style, markersize=3, label=label)
    for axis in (ax, ax2):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("num_envs (total over devices), 128 steps each per update")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("PPO training env steps / s")
    ax2.set_ylabel(f"% of a 2048^3 float32 matmul ({peak:.0f} GFLOP/s)")
    first = records[0]
    fig.suptitle(f"PPO on CartPole-v1 against the work, {first['cpu']}, jax {first.get('jax_version', '')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)


def table(records: list[dict], flops: dict[int, float], peak: float) -> list[str]:
    lines = ["| num_envs | FLOPs / env step | rlpar 1 device SPS | % of matmul | more devices | rejax SPS | % of matmul "
             "| rlpar / rejax |", "|---|---|---|---|---|---|---|---|"]
    by = {(r["program"], r["num_devices"], r["num_envs"]): r["sps"] for r in records}
    for n in sorted(flops):
        one, rejax = by.get(("rlpar", 1, n)), by.get(("rejax", 1, n))
        pct = lambda s: f"{100 * s * flops[n] / 1e9 / peak:.1f}%" if s else "n/a"
        more = ", ".join(f"{d} dev {by[('rlpar', d, n)] / 1e3:,.0f}k" for d in (2, 4) if ("rlpar", d, n) in by)
        lines.append(f"| {n} | {flops[n] / 1e3:,.0f}k | {one / 1e3:,.1f}k | {pct(one)} | {more or '-'} | "
                     f"{rejax / 1e3 if rejax else float('nan'):,.1f}k | {pct(rejax)} | "
                     f"{one / rejax if rejax else float('nan'):.2f}x |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", default="1,4,16,64,256,1024,4096,8192")
    parser.add_argument("--devices", default="2,4", help="more device counts for rlpar, where they divide num_envs")
    parser.add_argument("--updates", type=int, default=6, help="updates per run (after compiling)")
    parser.add_argument("--out", default="benchmarks/results/scaling")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    jsonl = out / "scaling.jsonl"
    jsonl.unlink(missing_ok=True)
    sizes = [int(n) for n in args.num_envs.split(",")]
    extra = [int(d) for d in args.devices.split(",") if d]
    runs = [(n, 1) for n in sizes] + [(n, d) for n in sizes for d in extra if n % d == 0 and n >= 4 * d]
    progress = common.Rows(len(runs) + len(sizes) + 1)
    for n, devices in runs:
        steps = n * NUM_STEPS * args.updates
        progress.start(f"rlpar, {n} envs on {devices} device(s), {steps:,} steps")
        tmp = out / "train_sps.tmp.jsonl"
        tmp.unlink(missing_ok=True)
        subprocess.run([sys.executable, str(HERE / "train_sps.py"), "--devices", str(devices), "--num-envs", str(n),
                        "--total-timesteps", str(steps), "--log-every", str(max(1, args.updates // 3)),
                        "--out", str(tmp)], check=True, stdout=subprocess.DEVNULL)
        record = read_jsonl(tmp)[-1]
        tmp.unlink()
        emit({"benchmark": "scaling", "program": "rlpar", "num_envs": n, "num_devices": devices,
              "sps": record["sps_end_to_end"], "env_steps": record["env_steps"], "compile_s": record["compile_s"],
              **{k: record[k] for k in ("jax_version", "backend")}, **common.host_fields(),
              "command": record["command"]}, str(jsonl))
    for n in sizes:
        progress.start(f"rejax, {n} envs")
        argv_peer = ["--num-envs", str(n), "--num-steps", str(NUM_STEPS), "--total-timesteps",
                     str(n * NUM_STEPS * args.updates), "--repeats", "1"]
        record = peers.run_peer("rejax", argv_peer)
        if record is not None:
            emit({"benchmark": "scaling", "program": "rejax", "num_envs": n, "num_devices": 1,
                  "sps": record["sps_median"], "env_steps": record["env_steps"], "compile_s": record["compile_s"],
                  "jax_version": record["jax_version"], **common.host_fields(),
                  "command": "python benchmarks/peers.py rejax " + " ".join(argv_peer)}, str(jsonl))
    progress.start("FLOPs per env step (XLA's cost analysis) and the host's matmul rate")
    flops, peak = flops_per_step(sizes)
    emit({"benchmark": "scaling", "program": "flops", "flops_per_env_step": {str(k): v for k, v in flops.items()},
          "matmul_gflops": peak, **common.host_fields()}, str(jsonl))
    records = [r for r in read_jsonl(jsonl) if r["program"] != "flops"]
    plot(records, flops, peak, out / "scaling.png")
    lines = [f"Written by `python benchmarks/scaling.py {' '.join(argv or sys.argv[1:])}`; host {records[0]['cpu']}, "
             f"{records[0]['host_cpus']} CPUs; a 2048^3 float32 matmul here: {peak:.0f} GFLOP/s.", "",
             *table(records, flops, peak)]
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
