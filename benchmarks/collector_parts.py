"""What each part of the engine's collector costs against the bare gymnax loop, one part taken out at a time.

``rollout_sps.py`` times the engine's collector against a bare ``vmap`` + ``scan`` loop; this script splits the
difference. Every variant below is timed in one process, the variants taking turns repeat by repeat
(``rollout_sps.time_interleaved``), at each ``--num-envs``:

- ``engine``: the collector as training builds it (PPO's ``act`` and ``bootstrap``, ``envs.make``'s wrappers);
- ``engine, keys up front`` / ``engine, keys per step``: each key schedule forced (the platform picks one by size,
  ``rlpar.core.rollout.keys_up_front``): every step's keys split before the scan, or each step splitting its own;
- ``engine, unroll 1`` / ``2`` / ``4`` / ``8``: the collect's scan one, two, four or eight steps per iteration (the
  platform picks one, ``rlpar.core.rollout.scan_unroll``);
- ``engine, no final``: no ``bootstrap`` (no final observation held, no truncation bootstrap after the scan);
- ``engine, no spill branch``: the ``lax.cond`` that bootstraps an environment truncated twice in one collect
  replaced by its idle branch (what the branch costs when it is never taken; not a correct collector);
- ``bare``: ``rollout_sps.py``'s bare loop on the raw gymnax env;
- ``bare, engine env``: the same bare loop on ``envs.make``'s env (flattening and episode statistics), so that
  ``bare, engine env`` / ``bare`` is what the wrappers cost.

Each variant's line has ``sps_median`` and ``vs_bare`` = bare SPS / its SPS - 1 (the overhead).

    python benchmarks/collector_parts.py --num-envs 1024,32768 --out benchmarks/results/2026-12-05/collector_parts.jsonl
"""

from __future__ import annotations

import argparse
import contextlib

import common  # also puts the repository root on sys.path
import rollout_sps
from common import command_line, emit, platform_fields, sps_stats


@contextlib.contextmanager
def _no_spill_branch():
    """The collector's twice-truncated branch replaced by its idle branch while programs are traced."""
    import jax

    from rlpar.core import rollout

    saved = rollout.hold_final_observation

    def hold_final(bootstrap, agent_state, pending, truncated, final_obs, agent_carry):
        cond = jax.lax.cond
        jax.lax.cond = lambda pred, busy, idle: idle()
        try:
            return saved(bootstrap, agent_state, pending, truncated, final_obs, agent_carry)
        finally:
            jax.lax.cond = cond

    rollout.hold_final_observation = hold_final
    try:
        yield
    finally:
        rollout.hold_final_observation = saved


def _keys(up_front: bool):
    from rlpar.core import platform

    return platform.forcing(keys_up_front=up_front)


def _unrolled(steps: int):
    from rlpar.core import platform

    return platform.forcing(collector_unroll=steps)


def make_engine_without_final(env_id, num_local_envs, num_steps, hidden_sizes, calls):
    """``rollout_sps.make_engine`` with no ``bootstrap`` handed to the collector."""
    from rlpar.core import rollout

    saved = rollout.make_collector

    def no_bootstrap(*args, **kwargs):
        kwargs["bootstrap"] = None
        return saved(*args, **kwargs)

    make_init, make_step = rollout_sps.make_engine(env_id, num_local_envs, num_steps, hidden_sizes, calls)

    def patched(make):
        def build(axis_name):
            rollout.make_collector = no_bootstrap
            try:
                return make(axis_name)
            finally:
                rollout.make_collector = saved

        return build

    return patched(make_init), patched(make_step)


def make_bare_engine_env(env_id, num_local_envs, num_steps, hidden_sizes, calls):
    """``rollout_sps.make_bare`` stepping ``envs.make(env_id)``'s env instead of the raw gymnax one."""
    import gymnax

    import envs

    made = envs.make(env_id)
    saved = gymnax.make
    gymnax.make = lambda name, **kw: made
    try:
        return rollout_sps.make_bare(env_id, num_local_envs, num_steps, hidden_sizes, calls)
    finally:
        gymnax.make = saved


def variants() -> dict:
    """name -> (make, context manager to trace it under)."""
    return {
        "engine": (rollout_sps.make_engine, contextlib.nullcontext),
        "engine, keys up front": (rollout_sps.make_engine, lambda: _keys(True)),
        "engine, keys per step": (rollout_sps.make_engine, lambda: _keys(False)),
        "engine, unroll 1": (rollout_sps.make_engine, lambda: _unrolled(1)),
        "engine, unroll 2": (rollout_sps.make_engine, lambda: _unrolled(2)),
        "engine, unroll 4": (rollout_sps.make_engine, lambda: _unrolled(4)),
        "engine, unroll 8": (rollout_sps.make_engine, lambda: _unrolled(8)),
        "engine, no final": (make_engine_without_final, contextlib.nullcontext),
        "engine, no spill branch": (rollout_sps.make_engine, _no_spill_branch),
        "bare": (rollout_sps.make_bare, contextlib.nullcontext),
        "bare, engine env": (make_bare_engine_env, contextlib.nullcontext),
    }


def measure(args, num_envs: int, devices) -> list[dict]:
    from rlpar.core import rollout

    calls = args.calls or max(1, args.min_steps_per_call // (num_envs * args.num_steps))
    chosen = variants()
    if args.only:
        chosen = {name: chosen[name] for name in chosen if name in args.only or name == "bare"}
    programs = {}
    for name, (make, context) in chosen.items():
        common.say(f"{num_envs} envs: compiling {name}")
        with context():
            programs[name] = rollout_sps.prepare(make, devices, args.env, num_envs, args.num_steps, args.hidden_sizes,
                                                 calls, args.min_repeat_s)
    times = rollout_sps.time_interleaved(programs, args.repeats)
    base = {"benchmark": "collector_parts", **platform_fields(devices), "env": args.env, "num_envs": num_envs,
            "num_steps": args.num_steps, "hidden_sizes": list(args.hidden_sizes), **rollout_sps.NETWORK,
            "collects_per_call": calls,
            "keys_up_front_by_platform": rollout.keys_up_front(args.num_steps * (1 + num_envs)),
            "command": command_line()}
    records = []
    for name, program in programs.items():
        steps = program.dispatches * calls * num_envs * args.num_steps
        records.append({**base, "program": name, "compile_s": round(program.compile_s, 3), **sps_stats(steps, times[name])})
    bare = next(r["sps_median"] for r in records if r["program"] == "bare")
    for record in records:
        record["vs_bare"] = bare / record["sps_median"] - 1.0
    return records


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--num-envs", default="1024,32768", help="comma list")
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--hidden-sizes", default="64,64")
    parser.add_argument("--torso", default="auto", help="PPOConfig.torso (mlp: images flattened)")
    parser.add_argument("--activation", default="tanh")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--min-repeat-s", type=float, default=0.2)
    parser.add_argument("--min-steps-per-call", type=int, default=16384)
    parser.add_argument("--calls", type=int, default=0)
    parser.add_argument("--only", default="", help="semicolon list of variants (bare is always timed)")
    common.add_out_argument(parser, "collector_parts")
    args = parser.parse_args(argv)
    args.hidden_sizes = tuple(int(h) for h in args.hidden_sizes.split(","))
    args.only = [s.strip() for s in args.only.split(";") if s.strip()]
    unknown = sorted(set(args.only) - set(variants()))
    if unknown:
        parser.error(f"--only: {unknown[0]!r} is not a variant; expected some of: {'; '.join(variants())}")
    from rlpar.core import hosts

    devices = hosts.select_devices(1)
    saved = dict(rollout_sps.NETWORK)
    rollout_sps.NETWORK.update(torso=args.torso, activation=args.activation)  # both loops' network, for this call
    try:
        for num_envs in (int(n) for n in args.num_envs.split(",")):
            records = measure(args, num_envs, devices)
            for record in records:
                emit(record, args.out)
            common.say(f"{num_envs} envs: " + "; ".join(f"{r['program']} {r['sps_median'] / 1e6:.1f}M "
                                                        f"({100 * r['vs_bare']:+.1f}%)" for r in records))
    finally:
        rollout_sps.NETWORK.clear()
        rollout_sps.NETWORK.update(saved)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
