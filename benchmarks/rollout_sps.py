"""Environment steps per second of the engine's collector, against a bare gymnax vmap + scan loop.

Both programs step ``num_envs`` environments (split evenly over the devices) for ``num_steps`` steps per call with
the same PPO actor-critic network choosing the actions; nothing learns. They differ only in what the engine adds:

- engine: ``envs.make`` (FlattenObservation + EpisodeStatistics) and ``rlpar.core.rollout.make_collector`` driven by the
  PPO agent's own ``act`` and ``bootstrap`` (``agents.ppo.make_ppo``, state from its ``init``), exactly as
  ``rlpar.core.program`` builds it for training; its ``Transition`` also carries episode statistics, ``final`` (the
  critic at the final observation of truncated steps) and ``extras`` (log-prob and value);
- bare: raw ``gymnax.make`` stepped by ``jax.vmap`` inside ``jax.lax.scan``, keeping obs, action, log-prob, value,
  reward, terminated and truncated; ``bare`` as gymnax's examples write it (keys split every step, one step per
  iteration), ``bare-tuned`` with the engine's schedule (keys split before the scan, the engine's unroll).

Both are mapped over devices with ``rlpar.core.parallel`` and keep their whole trajectory as output (so XLA cannot drop
any of it). Compilation is timed separately; after one warm-up call, each repeat runs enough calls to last about
``--min-repeat-s`` and is timed with ``jax.block_until_ready``; the two programs take turns repeat by repeat, and
the median over repeats is reported.

    python benchmarks/rollout_sps.py --env CartPole-v1 --num-envs 1024 --devices 2
    python benchmarks/rollout_sps.py --num-envs 1,8,64,512,4096 --devices 1
    python benchmarks/rollout_sps.py --num-envs 1..8192 --devices 1,2,4 --png rollout_sps.png

``--num-envs LO..HI`` is every power of two from LO to HI. Several device counts (``--devices 1,2,4``) run one fresh
process each (on a CPU-only host the number of CPU devices is fixed when JAX starts its backend), each over the
sizes it splits evenly; ``--png`` plots SPS against num_envs, one line per device count and program.

``--deadline`` (Unix time) leaves the sizes not started by then unmeasured, and a size that fails does not stop the
next; either way a ``{"not_measured": reason, ...}`` line on stdout says so.

Each measurement is one JSON line (``program`` = ``engine``, ``bare`` or ``bare-tuned``); the engine line also has
``overhead_vs_bare`` = the faster bare loop's SPS / engine SPS - 1 and ``best_bare``, which loop that was.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
import traceback
from pathlib import Path
from typing import Any, NamedTuple

import common  # also puts the repository root on sys.path
from common import command_line, emit, platform_fields, sps_stats


class BareTraj(NamedTuple):
    """What the bare loop keeps per step, every leaf ``[T, B, ...]``."""

    obs: Any
    action: Any
    log_prob: Any
    value: Any
    reward: Any
    terminated: Any
    truncated: Any


NETWORK: dict = {}  # PPOConfig fields the scripts may set for both programs' network (torso, activation)


def ppo_config(num_envs: int, num_steps: int, hidden_sizes):
    """The ``PPOConfig`` both programs take their network from (PPO's default activation and torso unless
    ``NETWORK`` names others).

    ``total_timesteps`` is at least one rollout so that the (unused) optimizer's schedule is well defined."""
    from agents.ppo import PPOConfig

    return PPOConfig(num_envs=num_envs, num_steps=num_steps, hidden_sizes=tuple(hidden_sizes),
                     total_timesteps=max(PPOConfig().total_timesteps, num_envs * num_steps), **NETWORK)


def make_policy(env, env_params, hidden_sizes):
    """The PPO actor-critic for ``env`` (as ``agents.ppo.make_ppo`` builds it) and a plain acting function for the
    bare loop: ``(network, policy_fn)`` with ``policy_fn(params, obs [B, d], key) -> (action, log_prob, value)``,
    the call PPO's ``act`` makes (without observation normalisation, which PPO's default config leaves off).
    """
    from agents.networks import ActorCritic, make_network

    config = ppo_config(1, 1, hidden_sizes)
    network = make_network(env.observation_space(env_params), env.action_space(env_params), config.hidden_sizes,
                           config.activation, config.torso)

    def policy_fn(params, obs, key):
        pi, value = network.apply(params, obs, method=ActorCritic.distribution)
        action = pi.sample(seed=key)
        return action, pi.log_prob(action), value

    return network, policy_fn


def _repeated(collect, calls: int):
    """``step((agent, carry, traj)) -> ((agent, carry, traj), {})``: ``calls`` collects in one ``lax.scan``, keeping
    the last trajectory as output so XLA cannot drop the work. Shared by the engine and the bare program."""
    import jax

    def step(state):
        agent, carry, traj = state

        def one(inner, _):
            carry, _ = inner
            return collect(agent, carry), None

        (carry, traj), _ = jax.lax.scan(one, (carry, traj), None, length=calls)
        return (agent, carry, traj), {}

    return step


def make_engine(env_id: str, num_local_envs: int, num_steps: int, hidden_sizes, calls: int):
    """``(make_init, make_step)`` for ``rlpar.core.parallel``: the engine's collector with PPO's ``act`` and
    ``bootstrap``, as ``rlpar.core.program.make_program`` wires them, ``calls`` collects per step."""
    import jax
    import jax.numpy as jnp

    import envs
    from agents.ppo import make_ppo
    from rlpar.core import rollout

    env, env_params = envs.make(env_id)
    config = ppo_config(num_local_envs, num_steps, hidden_sizes)

    def build(axis_name):
        ppo = make_ppo(config, env, env_params, num_local_envs, axis_name)
        collect = rollout.make_collector(env, env_params, ppo.act, num_steps, bootstrap=ppo.bootstrap,
                                         initial_carry=ppo.initial_carry)
        return ppo, collect

    def make_init(axis_name):
        ppo, collect = build(axis_name)

        def init(key_params, key_device):
            key_env, key_agent = jax.random.split(key_device)  # as rlpar.core.program's init
            agent = ppo.init(key_params, key_agent)
            state = rollout.reset(env, env_params, key_env, num_local_envs, ppo.initial_carry(num_local_envs))
            traj_shape = jax.eval_shape(collect, agent, state)[1]
            return agent, state, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), traj_shape)

        return init

    return make_init, (lambda axis_name: _repeated(build(axis_name)[1], calls))


def make_bare(env_id: str, num_local_envs: int, num_steps: int, hidden_sizes, calls: int, tuned: bool = False):
    """``(make_init, make_step)``: raw gymnax env, ``jax.vmap`` over envs in ``jax.lax.scan``, same network.

    As gymnax's examples write it, each step splits its keys from the carried key and the scan steps once per
    iteration. ``tuned``: the engine's schedule instead, every step's keys split before the scan and the scan
    unrolled by the engine's ``rlpar.core.platform.collector_unroll()``, so that the engine's overhead is measured
    against the best of the two loops, not a loop it beats by its schedule alone."""
    import gymnax
    import jax
    import jax.numpy as jnp

    import envs
    from rlpar.core import platform

    env, env_params = gymnax.make(env_id)
    network, policy_fn = make_policy(*envs.make(env_id), hidden_sizes)  # flat observations, as the engine's
    obs_dim = (math.prod(env.observation_space(env_params).shape),)
    reset_envs = jax.vmap(env.reset, in_axes=(0, None))
    step_envs = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    flat = lambda obs: obs.reshape((num_local_envs, -1)).astype(jnp.float32)  # noqa: E731

    def env_step(carry, params):
        env_state, obs, key = carry
        key, key_act, key_env = jax.random.split(key, 3)
        action, log_prob, value = policy_fn(params, obs, key_act)
        next_obs, env_state, reward, terminated, truncated, _ = step_envs(
            jax.random.split(key_env, num_local_envs), env_state, action, env_params
        )
        out = BareTraj(obs, action, log_prob, value, reward, terminated, truncated)
        return (env_state, flat(next_obs), key), out

    def tuned_step(carry, params, keys):  # keys [1 + B]: the action's, then each env's
        env_state, obs, key = carry
        action, log_prob, value = policy_fn(params, obs, keys[0])
        next_obs, env_state, reward, terminated, truncated, _ = step_envs(keys[1:], env_state, action, env_params)
        out = BareTraj(obs, action, log_prob, value, reward, terminated, truncated)
        return (env_state, flat(next_obs), key), out

    def collect(params, carry):
        if not tuned:
            return jax.lax.scan(lambda c, _: env_step(c, params), carry, None, length=num_steps)
        env_state, obs, key = carry
        key, key_steps = jax.random.split(key)
        keys = jax.random.split(key_steps, num_steps * (1 + num_local_envs))
        keys = keys.reshape((num_steps, 1 + num_local_envs) + keys.shape[1:])
        return jax.lax.scan(lambda c, k: tuned_step(c, params, k), (env_state, obs, key), keys,
                            unroll=platform.collector_unroll())

    def init(key_params, key_device):
        params = network.init(key_params, jnp.zeros((1, *obs_dim), jnp.float32))
        key_reset, key = jax.random.split(key_device)
        obs, env_state = reset_envs(jax.random.split(key_reset, num_local_envs), env_params)
        carry = (env_state, flat(obs), key)
        traj_shape = jax.eval_shape(collect, params, carry)[1]
        return params, carry, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), traj_shape)

    return (lambda axis_name: init), (lambda axis_name: _repeated(collect, calls))


class Program(NamedTuple):
    """A compiled, warmed-up program ready to time."""

    step: Any  # compiled mapped step: state -> (state, {})
    state: Any  # its current state (donated to each call, so always the latest)
    compile_s: float
    dispatches: int  # compiled calls per timed repeat


def prepare(make, devices, env_id, num_envs, num_steps, hidden_sizes, calls, min_repeat_s, seed=0) -> Program:
    """Build, compile (timed) and warm up one program; size its repeats to last about ``min_repeat_s``."""
    import jax

    from rlpar.core import parallel

    make_init, make_step = make(env_id, num_envs // len(devices), num_steps, hidden_sizes, calls)
    state = parallel.map_init(make_init, devices)(jax.random.PRNGKey(seed), jax.random.PRNGKey(seed + 1))
    start = time.perf_counter()
    step = parallel.map_step(make_step, devices).lower(state).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    state, _ = step(state)  # warm-up
    jax.block_until_ready(state)
    dispatches = max(1, math.ceil(min_repeat_s / max(time.perf_counter() - start, 1e-6)))
    return Program(step, state, compile_s, dispatches)


def time_interleaved(programs: dict[str, Program], repeats: int) -> dict[str, list[float]]:
    """Seconds per repeat of each program, the programs taking turns so that load from other processes on the
    host falls on all of them alike (their ratio is then steadier than either figure alone)."""
    import jax

    times = {name: [] for name in programs}
    for _ in range(repeats):
        for name, program in programs.items():
            state = program.state
            start = time.perf_counter()
            for _ in range(program.dispatches):
                state, _ = program.step(state)
            jax.block_until_ready(state)
            times[name].append(time.perf_counter() - start)
            programs[name] = program._replace(state=state)
    return times


def measure(args, num_envs: int, devices) -> list[dict]:
    """Engine and (unless ``--no-bare``) bare records for one ``num_envs``."""
    makers = {"engine": make_engine}
    if not args.no_bare:
        makers.update(bare=make_bare, **{"bare-tuned": functools.partial(make_bare, tuned=True)})
    calls = args.calls or max(1, args.min_steps_per_call // (num_envs * args.num_steps))
    base = {
        "benchmark": "rollout",
        **platform_fields(devices),
        "env": args.env,
        "num_envs": num_envs,
        "num_envs_per_device": num_envs // len(devices),
        "num_steps": args.num_steps,
        "hidden_sizes": list(args.hidden_sizes),
        "collects_per_call": calls,
        "command": command_line(),
    }
    programs = {name: prepare(make, devices, args.env, num_envs, args.num_steps, args.hidden_sizes, calls,
                              args.min_repeat_s) for name, make in makers.items()}
    times = time_interleaved(programs, args.repeats)
    records = {}
    for name, program in programs.items():
        steps = program.dispatches * calls * num_envs * args.num_steps
        records[name] = {**base, "program": name, "compile_s": round(program.compile_s, 3), "steps_per_repeat": steps,
                         "calls_per_repeat": program.dispatches, **sps_stats(steps, times[name])}
    if "bare" in records:  # against the faster of the two bare loops
        best = max(("bare", "bare-tuned"), key=lambda name: records[name]["sps_median"])
        ratio = records[best]["sps_median"] / records["engine"]["sps_median"]
        records["engine"]["overhead_vs_bare"] = ratio - 1.0
        records["engine"]["best_bare"] = best
    return list(records.values())


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CartPole-v1", help="gymnax environment id")
    parser.add_argument("--num-envs", default="1024",
                        help="total environments; a comma list measures each, LO..HI every power of two between")
    parser.add_argument("--num-steps", type=int, default=128, help="steps per collect (rollout length T)")
    parser.add_argument("--devices", default="1",
                        help="devices (on a CPU-only host this many CPU devices); a comma list: a process each")
    parser.add_argument("--hidden-sizes", default="64,64", help="actor and critic MLP widths")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats; the median is reported")
    parser.add_argument("--min-repeat-s", type=float, default=0.2, help="each repeat runs calls for at least this")
    parser.add_argument("--min-steps-per-call", type=int, default=16384,
                        help="collects are scanned inside one compiled call until it holds this many env steps")
    parser.add_argument("--calls", type=int, default=0,
                        help="collects per compiled call (0: from --min-steps-per-call)")
    parser.add_argument("--no-bare", action="store_true", help="time only the engine")
    common.add_out_argument(parser, "rollout")
    parser.add_argument("--png", default=None, help="plot the records of --out (this run's) against num_envs here")
    parser.add_argument("--deadline", type=float, default=None,
                        help="Unix time after which no further --num-envs is started (a not_measured line each)")
    args = parser.parse_args(argv)
    args.num_envs = parse_sizes(args.num_envs)
    args.devices = [int(d) for d in args.devices.split(",")]
    args.hidden_sizes = tuple(int(h) for h in args.hidden_sizes.split(","))
    return args


def parse_sizes(text: str) -> list[int]:
    """``"1,8,64"`` as ``[1, 8, 64]``; ``"LO..HI"`` as every power of two from LO to HI (``1..8`` is 1, 2, 4, 8)."""
    if ".." not in text:
        return [int(n) for n in text.split(",")]
    lo, hi = (int(n) for n in text.split(".."))
    return [2**k for k in range(hi.bit_length()) if lo <= 2**k <= hi]


def plot(records: list[dict], png: Path) -> None:
    """SPS against num_envs, log-log: one solid line per device count (engine), dashed and dotted for the bare
    gymnax loops."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, devices in enumerate(sorted({r["num_devices"] for r in records})):
        for program, style in (("engine", "-o"), ("bare", "--"), ("bare-tuned", ":")):
            rows = sorted((r for r in records if r["num_devices"] == devices and r["program"] == program),
                          key=lambda r: r["num_envs"])
            if not rows:
                continue
            xs = [r["num_envs"] for r in rows]
            label = f"{devices} device{'s' * (devices > 1)}" + {"bare": " (bare gymnax)", "bare-tuned": " (bare gymnax, the engine's schedule)"}.get(program, "")
            ax.plot(xs, [r["sps_median"] for r in rows], style, color=colors[i % len(colors)], markersize=3,
                    label=label, alpha=1.0 if program == "engine" else 0.6)
            ax.fill_between(xs, [r["sps_min"] for r in rows], [r["sps_max"] for r in rows],
                            color=colors[i % len(colors)], alpha=0.12 if program == "engine" else 0.0)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("num_envs (total over devices)")
    ax.set_ylabel("env steps / s (median; band: min-max)")
    first = records[0]
    ax.set_title(f"{first['env']} collector, T={first['num_steps']}, {first['backend']} ({first['device_kind']}), "
                 f"jax {first['jax_version']}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)
    plt.close(fig)


def each_device_count(args, argv: list[str]) -> int:
    """One fresh process of this script per device count, over the sizes it splits evenly; their records are
    passed on (printed and appended to ``--out``), then plotted with ``--png``."""
    rows, failed = [], False
    progress = common.Rows(len(args.devices))
    for devices in args.devices:
        counted = [n for n in args.num_envs if n % devices == 0]
        progress.start(f"{devices} device(s), in a process of its own: num_envs {counted}")
        if not counted:
            continue
        child = _without(argv, ("--devices", "--png", "--out", "--num-envs"))
        run = common.run_fresh([sys.executable, __file__, *child, "--devices", str(devices), "--num-envs",
                                ",".join(map(str, counted)), "--out", ""], check=False)
        sys.stderr.write(run.stderr)
        failed |= run.stdout == "" or any("not_measured" in r for r in run.records)
        for record in run.records:
            if "not_measured" in record:
                print(json.dumps(record), flush=True)
            else:
                emit(record, args.out)
                rows.append(record)
    if args.png and rows:
        plot(rows, Path(args.png))
    return 1 if failed else 0


def _without(argv: list[str], flags: tuple[str, ...]) -> list[str]:
    """``argv`` without ``flags`` and their values (given as ``--flag value`` or ``--flag=value``)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in flags:
            skip = True
        elif not arg.startswith(tuple(f + "=" for f in flags)):
            out.append(arg)
    return out


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if len(args.devices) > 1:
        return each_device_count(args, argv)
    from rlpar.core import hosts

    hosts.request_cpu_devices(args.devices[0])  # before the first JAX computation
    devices = hosts.select_devices(args.devices[0])
    sizes = [n for n in args.num_envs if n % len(devices) == 0]
    for num_envs in sorted(set(args.num_envs) - set(sizes)):
        print(f"# skip num_envs={num_envs}: not divisible by {len(devices)} devices", flush=True)
    progress = common.Rows(len(sizes))
    failed, done = False, []
    for num_envs in sizes:
        what = dict(benchmark="rollout", env=args.env, num_envs=num_envs)
        if common.past_deadline(args.deadline):
            common.say(f"not started, past the deadline: num_envs={num_envs}")
            common.not_measured("not started: out of time", **what)
            continue
        progress.start(f"num_envs={num_envs} on {len(devices)} device(s): compiling, then timing")
        try:
            records = measure(args, num_envs, devices)
        except Exception as error:  # the next size may still run (a smaller one after running out of memory)
            traceback.print_exc()
            common.not_measured(common.failure(error), **what)
            failed = True
            continue
        for record in records:
            emit(record, args.out)
            done.append(record)
    if args.png and done:
        plot(done, Path(args.png))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
