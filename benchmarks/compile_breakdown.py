"""Where PPO's compile time goes: trace+lower vs XLA compile, HLO size, per program part, against rejax.

For the CartPole preset on one device, this builds the engine's chunk program (``log_every`` updates in a scan,
as the runner compiles it) and parts of it, with the compilation cache off, and times ``.lower()`` (tracing and
lowering to StableHLO) and ``.compile()`` (XLA) separately, in wall-clock seconds and in the process's CPU seconds for
both (what the compilation costs whatever else the host runs: on a shared host the wall-clock figures move with the
load, the CPU seconds much less):

- ``update``: the whole update (collect + learn), the runner's chunk;
- ``collect``: the collector alone (acting, env steps, deferred valuation of truncated steps);
- ``learn``: the learner alone on a collected batch;
- the same update with the plain flax layers (``RLPAR_PLAIN_LAYERS=1`` semantics: no CPU fast paths).

Where rejax is installed (``python benchmarks/peers.py install``), rejax's ``train`` on the same config is lowered
and compiled in its own venv in the same run. Repeats alternate; medians reported.

    python benchmarks/compile_breakdown.py --repeats 3 --out benchmarks/results/compile_breakdown.jsonl
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import common  # also puts the repository root on sys.path

os.environ.setdefault("RLPAR_CACHE_DIR", "off")


def _programs():
    import jax

    import envs
    from agents.ppo import SPEC, PPOConfig
    from rlpar.run import guard
    from rlpar.core import program, rollout
    from rlpar.core.rollout import Experience

    config = PPOConfig.for_env("CartPole-v1")
    env, env_params = envs.make("CartPole-v1")
    agent = SPEC.make(config, env, env_params, config.num_envs, None)
    prog = program.make_program(agent, env, env_params, config.num_envs, config.num_steps, None)
    collect = rollout.make_collector(env, env_params, agent.act, config.num_steps, bootstrap=agent.bootstrap,
                                     initial_carry=agent.initial_carry)
    key_params, key_device = jax.random.split(jax.random.PRNGKey(0))
    state = prog.init(key_params, key_device)
    end, traj = jax.jit(lambda a, r: collect(a, r))(state.agent, state.rollout)  # its own jit: not a cache hit below
    update = guard.with_finite_flag(prog.update, None)

    def chunk(s):
        return jax.lax.scan(lambda c, _: update(c), s, None, length=10)

    return {
        "update": (chunk, (state,)),
        "collect": (collect, (state.agent, state.rollout)),
        "learn": (agent.learn, (state.agent, Experience(traj, state.rollout, end))),
    }


def measure(name: str, fn, args, fast: bool) -> dict:
    import jax

    from agents import platform

    with platform.fast_paths(fast):  # the layers choose their path when traced
        return _measure(name, jax.jit(fn), args)


def _measure(name: str, fn, args) -> dict:
    start, cpu_start = time.perf_counter(), time.process_time()
    lowered = fn.lower(*args)
    lower_s = time.perf_counter() - start
    start = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - start
    return {"part": name, "lower_s": lower_s, "compile_s": compile_s, "cpu_s": time.process_time() - cpu_start,
            "stablehlo_lines": len(lowered.as_text().splitlines()),
            "hlo_lines": len(compiled.as_text().splitlines())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    common.add_out_argument(parser, "compile_breakdown")
    args = parser.parse_args()
    rows = []
    import jax

    jax.jit(lambda x: x + 1).lower(1.0).compile()  # the first compile in a process pays one-off set-up
    progress = common.Rows(args.repeats * 5)  # per repeat: 3 parts with fast layers, the update plain, rejax
    for repeat in range(args.repeats):
        for fast in (True, False):
            programs = _programs()
            parts = programs if fast else {"update": programs["update"]}
            for name, (fn, fn_args) in parts.items():
                progress.start(f"repeat {repeat + 1}/{args.repeats}, compiling {name} "
                               f"({'fast' if fast else 'plain'} layers)")
                row = common.record("compile_breakdown", engine="rlpar", fast_paths=fast, repeat=repeat,
                                    **measure(name, fn, fn_args, fast))
                rows.append(row)
                common.emit(row, args.out)
        progress.start(f"repeat {repeat + 1}/{args.repeats}, compiling rejax's train")
        peer = common.peer_row("rejax", ["--repeats", "1", "--total-timesteps", "10240"])
        if peer is not None:
            row = common.record("compile_breakdown", engine="rejax", part="train", repeat=repeat,
                                lower_s=peer.get("lower_s"), compile_s=peer["compile_s"] - peer.get("lower_s", 0.0),
                                cpu_s=peer.get("compile_cpu_s"), stablehlo_lines=peer.get("stablehlo_lines"),
                                hlo_lines=peer.get("hlo_lines"), command=peer["command"])
            rows.append(row)
            common.emit(row, args.out)
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["engine"], row["part"], row.get("fast_paths")), []).append(row)
    for (engine, part, fast), group in groups.items():
        label = f"{engine} {part}" + ("" if fast is None else f" ({'fast paths' if fast else 'plain layers'})")
        lower = statistics.median(r["lower_s"] for r in group if r["lower_s"] is not None) if any(
            r["lower_s"] is not None for r in group) else float("nan")
        cpu = [r["cpu_s"] for r in group if r.get("cpu_s") is not None]
        cpu_text = f"{statistics.median(cpu):5.2f}s" if cpu else "  n/a"
        compile_s = statistics.median(r["compile_s"] for r in group)
        print(f"{label:34s} lower {lower:5.2f}s  compile {compile_s:5.2f}s  CPU (lower + compile) {cpu_text}  "
              f"StableHLO {group[0]['stablehlo_lines']} lines, HLO {group[0]['hlo_lines']} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
