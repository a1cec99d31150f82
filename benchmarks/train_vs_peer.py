"""Training speed of rlpar's agents against a peer's same algorithm on the same config, in the same run.

Each round runs, in fresh processes and one after another, for every case (``--agents``) and every size
(``--num-envs``): ``python -m rlpar.train AGENT`` on each of ``--devices`` that divides the envs and with each of
``--backends``, then each of ``--peers`` on the same config (``benchmarks/peers.py``, in its own environment). Rounds
let load from elsewhere on the host fall on both sides of a ratio alike. Train SPS excludes compilation on both
sides (rlpar: all env steps over the chunks' ``time_s`` in ``timing.jsonl``, with the spread over chunks; rejax:
its compiled program's run). rlpar runs with ``--no-compile-cache`` (a real compile every time) and no evaluation.

Like for like: rlpar's side of a ratio samples minibatches as the peers do, single rows in a fresh permutation each
epoch (``--shuffle-block 1``). ``--layouts single,default`` adds rlpar with its backend's own choice (blocks of rows
on an accelerator; on a CPU the same single rows) as a row of its own, labelled ``default layout``, never the ratio's
side. Agents without a shuffled minibatch (DQN, SAC) have one rlpar row.

Reported per case and size: the median over rounds of each side's SPS, and the medians (ranges) of the per-round
ratios rlpar / peer and D devices / 1 device (and each backend / the first). ``--flops`` adds PPO's FLOPs per env
step (XLA's cost analysis of acting and the gradient) against a 2048^3 float32 matmul here, the share of the host's
limit each side reaches; ``--png`` plots SPS against num_envs.

The cases (``CONFIGS``) are rlpar's defaults for the agent's env, with the peer's settings matched field by field;
where rejax fixes something rlpar lets vary (PQN's and DQN's 64x64 network), rlpar is run with rejax's value.
Budgets are shortened for DQN and SAC: rejax's DQN and SAC run one env step per iteration.

    python benchmarks/peers.py install --peers rejax      # once
    python benchmarks/train_vs_peer.py --agents pqn,dqn,sac --rounds 3
    python benchmarks/train_vs_peer.py --agents ppo,ppo-large --devices 1,2 --peers rejax,sb3
    python benchmarks/train_vs_peer.py --agents ppo --num-envs 1,16,256,4096 --devices 1,2,4 --flops --png scaling.png
    python benchmarks/train_vs_peer.py --agents ppo --devices 2 --backends pmap,shard_map --peers none
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from pathlib import Path

import common  # also puts the repository root on sys.path

# case -> (env, total steps, rlpar flags on top of the agent's defaults, rejax flags giving the same config); the
# case's name up to a "-" is the agent. rlpar's flags give --num-envs and --num-steps where --num-envs may replace
# them (PPO's cases).
CONFIGS: dict[str, tuple[str, int, list[str], list[str]]] = {
    # PPO's CartPole defaults (8 envs x 128 steps, 4 epochs x 4 minibatches): peers.py's defaults are the same.
    "ppo": ("CartPole-v1", 1_000_000, ["--num-envs", "8", "--num-steps", "128", "--log-every", "10"],
            ["--num-envs", "8", "--num-steps", "128"]),
    # enough environments per device for compute, not per-step overhead, to dominate
    "ppo-large": ("CartPole-v1", 2_097_152, ["--num-envs", "1024", "--num-steps", "128", "--log-every", "4"],
                  ["--num-envs", "1024", "--num-steps", "128"]),
    # rlpar PQN defaults: 32 envs x 32 steps, 4 epochs x 4 minibatches, lr 1e-3, Q(0.9), epsilon 1 -> 0.05 over the
    # first 20% of training, LayerNorm MLP (rejax: 64x64 fixed).
    "pqn": ("CartPole-v1", 655_360, ["--hidden-sizes", "64,64"],
            ["--num-envs", "32", "--num-steps", "32", "--update-epochs", "4", "--num-minibatches", "4", "--lr", "1e-3",
             "--max-grad-norm", "10", "--td-lambda", "0.9", "--eps-start", "1", "--eps-end", "0.05",
             "--exploration-fraction", "0.2"]),
    # rlpar DQN defaults: 8 envs, 128 gradient steps of 64 transitions per 8 x 32 env steps (0.5 per env step; rejax:
    # 4 per step of the 8 envs), hard target update every 128 gradient steps (= 256 env steps), double DQN, relu.
    "dqn": ("CartPole-v1", 20_480, ["--hidden-sizes", "64,64"],
            ["--algo", "dqn", "--num-envs", "8", "--update-epochs", "4", "--batch-size", "64", "--buffer-size",
             "100000", "--fill-buffer", "1000", "--lr", "2.3e-3", "--max-grad-norm", "10", "--eps-start", "1",
             "--eps-end", "0.04", "--exploration-fraction", "0.1", "--target-update-freq", "256", "--polyak", "0",
             "--activation", "relu"]),
    # rlpar SAC defaults: 8 envs, 64 gradient steps of 128 transitions per 8 x 8 env steps (1 per env step; rejax:
    # 8 per step of the 8 envs), Polyak 0.005, 64x64 relu, 1024 uniform steps first.
    "sac": ("Pendulum-v1", 20_480, [],
            ["--algo", "sac", "--num-envs", "8", "--update-epochs", "8", "--batch-size", "128", "--buffer-size",
             "100000", "--fill-buffer", "1024", "--lr", "1e-3", "--polyak", "0.995", "--target-update-freq", "1",
             "--activation", "relu", "--hidden-sizes", "64,64"]),
    # PPO with rlpar's Breakout-MinAtar preset (64 envs x 128 steps, 4 epochs x 8 minibatches, lr 5e-4 constant,
    # gamma 0.999, relu MLP of 2 x 256 on the flattened image: gymnax-blines' settings) against rejax's PPO, whose
    # network is that MLP too; the convolution torso (3x3x16, then 128 units) is timed beside it on rlpar alone.
    "ppo-minatar": ("Breakout-MinAtar", 491_520, [],
                    ["--algo", "ppo", "--num-envs", "64", "--num-steps", "128", "--update-epochs", "4",
                     "--num-minibatches", "8", "--lr", "5e-4", "--gamma", "0.999", "--activation", "relu",
                     "--hidden-sizes", "256,256"]),
    "ppo-minatar-cnn": ("Breakout-MinAtar", 491_520, ["--torso", "auto", "--hidden-sizes", "128"], []),
}
for _case, (_env, _steps, _, _rejax) in CONFIGS.items():  # the shared fields once
    if _rejax:
        _rejax[:0] = ["--algo", _case.partition("-")[0]] if "--algo" not in _rejax else []
        _rejax += ["--env", _env, "--total-timesteps", str(_steps)]

SB3_TIMESTEPS = 65_536  # Stable-Baselines3 is about 10x slower: fewer steps, its PPO cases only
QUICK_TIMESTEPS = 16_384  # --quick: every case this short (checks the script, measures nothing)


LAYOUTS = ("single", "default")
LAYOUT_LABELS = {"single": "single rows", "default": "default layout"}


def shuffles(case: str) -> bool:
    """Whether the case's agent shuffles its batch into minibatches (has ``--shuffle-block``)."""
    return case.partition("-")[0] in ("ppo", "pqn")


def _flag(argv: list[str], flag: str, value: str | None = None) -> list[str]:
    """``argv`` with ``flag``'s value set to ``value`` (removed if None), added at the end if absent."""
    out = list(argv)
    if flag in out:
        i = out.index(flag)
        del out[i:i + 2]
    return out + ([flag, value] if value is not None else [])


class Row:
    """One side of a comparison: rlpar on some devices and backend, or a peer; its argv for the case and size."""

    def __init__(self, case: str, num_envs: int | None, program: str, devices: int = 1, backend: str | None = None,
                 layout: str | None = None):
        self.case, self.num_envs, self.program, self.devices, self.backend = case, num_envs, program, devices, backend
        self.layout = layout  # rlpar's minibatch sampling: "single" (the peers'), "default" (the backend's), None

    def key(self) -> tuple:
        return self.case, self.num_envs, self.program, self.devices, self.backend, self.layout

    def __str__(self) -> str:
        where = f"on {self.devices} device(s)" + (f", --backend {self.backend}" if self.backend else "")
        where += f", {LAYOUT_LABELS[self.layout]}" if self.layout else ""
        size = f", {self.num_envs} envs" if self.num_envs else ""
        return f"{self.case}{size}, {self.program}" + (f" {where}" if self.program == "rlpar" else "")


def sizes_argv(case: str, num_envs: int | None, total: int, updates: int, argv: list[str]) -> tuple[list[str], int]:
    """``argv`` at ``num_envs`` (None: the case's own) and the run's env steps: ``updates`` updates of that size."""
    if num_envs is None:
        return argv, total
    num_steps = int(argv[argv.index("--num-steps") + 1]) if "--num-steps" in argv else 128
    return _flag(argv, "--num-envs", str(num_envs)), num_envs * num_steps * updates


def run_rlpar(row: Row, args) -> dict:
    """One ``python -m rlpar.train`` in a fresh process: train SPS over the chunks, compile seconds, final return."""
    env, total, flags, _ = CONFIGS[row.case]
    agent = row.case.partition("-")[0]
    flags, total = sizes_argv(row.case, row.num_envs, total, args.updates, flags)
    if args.log_every or row.num_envs is not None:
        flags = _flag(flags, "--log-every", str(args.log_every or max(1, args.updates // 3)))
    total = QUICK_TIMESTEPS if args.quick else total
    if row.layout == "single":
        flags = _flag(flags, "--shuffle-block", "1")
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "rlpar.train", agent, "--env", env, "--total-timesteps", str(total), *flags,
                "--devices", str(row.devices), *(["--backend", row.backend] if row.backend else []),
                "--eval-every", "0", "--no-compile-cache", "--run-dir", f"{tmp}/run"]
        run = common.run_fresh(argv)
        timing = common.read_jsonl(Path(tmp) / "run" / "timing.jsonl")
        metrics = common.read_jsonl(Path(tmp) / "run" / "metrics.jsonl")
    done = next((line for line in run.stdout.splitlines()[::-1] if line.startswith("done:")), "")
    compiled = re.search(r"\+ ([0-9.]+)s compile", done)
    steps_before = [0] + [m["env_steps"] for m in metrics[:-1]]
    train_s = sum(t["time_s"] for t in timing)
    returns = [m.get("episode_return") for m in metrics if m.get("episode_return") is not None]
    return {"program": "rlpar", "num_devices": row.devices, "device_backend": row.backend,  # None: the CLI's default
            "layout": row.layout, "sampling": LAYOUT_LABELS.get(row.layout, "replay"),
            "env_steps": metrics[-1]["env_steps"], "train_s": round(train_s, 3),
            "sps": metrics[-1]["env_steps"] / train_s,
            **common.sps_stats(1, [t["time_s"] / (m["env_steps"] - b)  # over chunks: "repeats" = chunks
                                   for t, m, b in zip(timing, metrics, steps_before)]),
            "compile_s": float(compiled.group(1)) if compiled else None,
            "final_return": returns[-1] if returns else None,
            "command": " ".join(["python", *argv[1:-2]])}


def run_peer(row: Row, args) -> dict | None:
    """The peer on the case's config at the row's size, or None (not installed, or no such config for it)."""
    env, total, flags, rejax = CONFIGS[row.case]
    if row.program == "rejax":
        argv = rejax
    elif env == "CartPole-v1" and rejax[:2] == ["--algo", "ppo"]:  # SB3's PPO: peers.py's gymnasium CartPole
        argv = rejax[2:]
        argv = _flag(argv, "--total-timesteps", str(min(total, SB3_TIMESTEPS)))
    else:
        argv = []
    if not argv:
        return None
    argv, steps = sizes_argv(row.case, row.num_envs, int(argv[argv.index("--total-timesteps") + 1]), args.updates,
                             argv)
    steps = QUICK_TIMESTEPS if args.quick else steps
    found = common.peer_row(row.program, [*_flag(argv, "--total-timesteps", str(steps)), "--repeats", "1"],
                            timeout_s=1800)
    if found is None:
        return None
    return {**found, "num_devices": 1, "train_s": found.get("train_s_median"), "sps": found["sps_median"]}


def flops_per_step(sizes: list[int], num_steps: int = 128) -> tuple[dict[int, float], float]:
    """``({num_envs: FLOPs per env step of one PPO update}, matmul GFLOP/s)`` on this host, one device: XLA's cost
    analysis of the gradient (every minibatch step) and of acting (every step and the bootstrap)."""
    import jax
    import jax.numpy as jnp

    import envs
    from agents.ppo import Batch, PPOConfig, make_ppo
    from thunks import median_seconds

    env, env_params = envs.make("CartPole-v1")
    out = {}
    for n in sizes:
        config = PPOConfig(num_envs=n, num_steps=num_steps)
        ppo = make_ppo(config, env, env_params, n, None)
        state = ppo.init(jax.random.PRNGKey(0), jax.random.PRNGKey(1))
        rows = config.batch_size // config.num_minibatches
        batch = Batch(jnp.zeros((rows, 4)), jnp.zeros((rows,), jnp.int32), *[jnp.zeros((rows,))] * 4)
        cost = lambda fn, *a: float(jax.jit(fn).lower(*a).compile().cost_analysis()["flops"])  # noqa: E731
        grad = cost(ppo.grad, state.params, batch) * config.update_epochs * config.num_minibatches
        act = cost(lambda s, o: ppo.act(s, (), o, jax.random.PRNGKey(0)), state, jnp.zeros((n, 4))) * (num_steps + 1)
        out[n] = (grad + act) / config.batch_size
    a = jax.random.normal(jax.random.PRNGKey(4), (2048, 2048))
    peak = 2 * 2048**3 / median_seconds(jax.jit(lambda x: x @ x), a, repeats=5) / 1e9
    return out, peak


def _side(side: tuple) -> str:
    """``(program, devices, backend, layout)`` as ``rlpar 2 dev shard_map single rows`` (a peer: its name)."""
    program, devices, backend, layout = side
    if program != "rlpar":
        return program
    return f"rlpar {devices} dev" + (f" {backend}" if backend else "") + (f" {LAYOUT_LABELS[layout]}" if layout else "")


def summary(rows: list[dict], flops: dict[int, float] | None, peak: float | None) -> list[str]:
    """Per case and size: each side's median SPS over rounds, and the medians (ranges) of the per-round ratios."""
    by: dict[tuple, dict[int, float]] = {}
    for r in rows:
        side = (r["case"], r.get("num_envs_asked"), r["program"], r["num_devices"], r.get("device_backend"),
                r.get("layout"))
        by.setdefault(side, {})[r["round"]] = r["sps"]
    lines = []
    for case, n in dict.fromkeys((k[0], k[1]) for k in by):
        sides = {k[2:]: v for k, v in by.items() if k[:2] == (case, n)}
        rlpar = [s for s in sides if s[0] == "rlpar"]
        rlpar.sort(key=lambda s: s[3] == "default")  # the peers' sampling first: the side of every ratio
        first = rlpar[0] if rlpar else None
        share = (lambda sps: f", {100 * sps * flops[n] / 1e9 / peak:.1f}% of matmul") if flops and n in flops else (
            lambda sps: "")
        parts = [f"{_side(s)} {statistics.median(v.values()):,.0f}{share(statistics.median(v.values()))}"
                 for s, v in sides.items()]
        text = f"{case}" + (f", {n} envs" if n else "") + ": train SPS " + "; ".join(parts)
        for peer in (s for s in sides if s[0] != "rlpar" and first is not None):
            text += f"; rlpar / {peer[0]} {common.ratio_text(common.ratio(sides[first], sides[peer]))}"
        for s in rlpar[1:]:
            text += f"; {_side(s)} / {_side(first)} {common.ratio_text(common.ratio(sides[s], sides[first]))}"
        lines.append(text)
    return lines


def plot(rows: list[dict], flops: dict[int, float] | None, peak: float | None, png: Path) -> None:
    """SPS (and the share of the matmul rate, with ``--flops``) against num_envs, one line per side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2 if flops else 1, figsize=(10 if flops else 6, 4), dpi=100, squeeze=False)
    series: dict[tuple, dict[int, list[float]]] = {}
    for r in rows:
        key = (r["program"], r["num_devices"], r.get("device_backend"), r.get("layout"))
        series.setdefault(key, {}).setdefault(r["num_envs_asked"], []).append(r["sps"])
    for (program, devices, backend, layout), points in sorted(series.items(), key=lambda kv: str(kv[0])):
        xs = sorted(points)
        sps = [statistics.median(points[x]) for x in xs]
        label = f"{program}, {devices} device{'s' * (devices > 1)}" + (f", {backend}" if backend else "")
        label += f", {LAYOUT_LABELS[layout]}" if layout else ""
        style = "-o" if program == "rlpar" else "--o"
        axes[0][0].plot(xs, sps, style, markersize=3, label=label)
        if flops:
            axes[0][1].plot(xs, [100 * s * flops[x] / 1e9 / peak for x, s in zip(xs, sps)], style, markersize=3,
                            label=label)
    for axis in axes[0]:
        axis.set_xscale("log", base=2)
        axis.set_xlabel("num_envs (total over devices)")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7)
    axes[0][0].set_yscale("log")
    axes[0][0].set_ylabel("training env steps / s")
    if flops:
        axes[0][1].set_ylabel(f"% of a 2048^3 float32 matmul ({peak:.0f} GFLOP/s)")
    fig.suptitle(f"{rows[0]['env']}, {rows[0]['cpu']}", fontsize=9)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)
    plt.close(fig)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", default="pqn,dqn,sac", help="comma list of cases: " + ", ".join(CONFIGS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--devices", default="1,2", help="rlpar's device counts (fake CPU devices on a CPU host)")
    parser.add_argument("--backends", default="", help="comma list of rlpar device backends (pmap, shard_map); "
                        "default: the CLI's")
    parser.add_argument("--peers", default="rejax", help="comma list of rejax, sb3 (PPO on CartPole-v1); none: rlpar only")
    parser.add_argument("--layouts", default="single", help="comma list of rlpar's minibatch sampling for the PPO "
                        "and PQN cases: single (single rows, the peers' sampling: the ratios' side), default (the "
                        "backend's own choice, a row of its own)")
    parser.add_argument("--num-envs", default="", help="comma list of sizes replacing the case's num_envs (PPO's "
                        "cases); each run trains --updates updates")
    parser.add_argument("--updates", type=int, default=6, help="with --num-envs: updates per run")
    parser.add_argument("--log-every", type=int, default=0, help="rlpar's updates per timed chunk (0: the case's; "
                        "with --num-envs, a third of --updates)")
    parser.add_argument("--flops", action="store_true", help="PPO's FLOPs per env step against the host's matmul rate")
    parser.add_argument("--png", default=None, help="with --num-envs: plot SPS against num_envs here")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_TIMESTEPS:,} steps a run: checks the script")
    common.add_out_argument(parser, "train_vs_peer")
    args = parser.parse_args(argv)
    args.agents = [a for a in args.agents.split(",") if a]
    unknown = [a for a in args.agents if a not in CONFIGS]
    if unknown:
        parser.error(f"--agents: unknown {', '.join(unknown)}; known: {', '.join(CONFIGS)}")
    args.devices = [int(d) for d in args.devices.split(",") if d]
    args.backends = [b for b in args.backends.split(",") if b] or [None]
    args.peers = [p for p in args.peers.split(",") if p and p != "none"]
    if set(args.peers) - {"rejax", "sb3"}:
        parser.error(f"--peers: unknown {', '.join(sorted(set(args.peers) - {'rejax', 'sb3'}))}; known: rejax, sb3")
    args.layouts = [x for x in args.layouts.split(",") if x]
    if not args.layouts or set(args.layouts) - set(LAYOUTS):
        parser.error(f"--layouts {','.join(args.layouts)!r}: expected a comma list of {', '.join(LAYOUTS)}")
    args.num_envs = [int(n) for n in args.num_envs.split(",") if n] or [None]
    if args.num_envs != [None] and any(not a.startswith("ppo") or "--torso" in CONFIGS[a][2] for a in args.agents):
        parser.error("--num-envs: PPO's MLP cases only (ppo, ppo-large, ppo-minatar)")
    if args.flops and args.agents != ["ppo"]:
        parser.error("--flops: the ppo case only (CartPole-v1's network)")
    return args


def case_num_envs(case: str) -> int | None:
    """The num_envs rlpar's flags give the case, None where it is the agent's default."""
    flags = CONFIGS[case][2]
    return int(flags[flags.index("--num-envs") + 1]) if "--num-envs" in flags else None


def main(argv=None) -> int:
    args = parse_args(argv)
    sides = [Row(case, n, "rlpar", d, b, layout) for case in args.agents for n in args.num_envs for d in args.devices
             for b in args.backends if (n or case_num_envs(case) or d) % d == 0
             for layout in (args.layouts if shuffles(case) else [None])]
    sides += [Row(case, n, peer) for case in args.agents for n in args.num_envs for peer in args.peers]
    sides.sort(key=lambda s: (args.agents.index(s.case), s.num_envs or 0))  # a case's and size's sides together
    rows = []
    for round_, side in common.interleave(args.rounds, sides):
        run = run_rlpar(side, args) if side.program == "rlpar" else run_peer(side, args)
        if run is None:
            continue
        fields = {"case": side.case, "agent": side.case.partition("-")[0], "env": CONFIGS[side.case][0],
                  "round": round_, "num_envs_asked": side.num_envs}
        row = common.record("train_vs_peer", **{**fields, **run})  # a peer's record names its env (the same) too
        rows.append(row)
        common.emit(row, args.out)
    flops = peak = None
    if args.flops:
        common.say("FLOPs per env step (XLA's cost analysis) and the host's matmul rate")
        sizes = [n for n in args.num_envs if n] or [8]
        flops, peak = flops_per_step(sizes)
        common.emit(common.record("train_vs_peer", program="flops", flops_per_env_step={str(k): v for k, v in
                                                                                         flops.items()},
                                  matmul_gflops=peak), args.out)
    if rows and args.png and args.num_envs != [None]:
        plot(rows, flops, peak, Path(args.png))
    print("\n".join(summary(rows, flops, peak)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
