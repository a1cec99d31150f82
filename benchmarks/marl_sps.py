"""IPPO on a JaxMARL env (default MPE simple spread, JaxMARL's ``ippo_ff_mpe`` sizes): collector overhead against a
bare vmap + scan loop over the same jaxmarl env, and end-to-end training SPS, on 1 and 2 devices, in one run.

- ``engine``: ``envs.make("marl-...")`` (the team adapter + EpisodeStatistics) and ``rlpar.core.rollout.make_collector``
  driven by the ippo agent's own ``act`` and ``bootstrap``, as ``rlpar.core.program`` builds it for training;
- ``bare``: ``jaxmarl.make(NAME)`` with JaxMARL's own auto-resetting ``step`` (dicts keyed by agent) under
  ``jax.vmap`` inside ``jax.lax.scan``, the same shared network acting on the agents' stacked observations, keeping
  observations, actions, log-probs, values, rewards and dones;
- ``train``: ``agents.team.train_ippo`` with the env's preset (16 envs x 128 steps, 4 epochs x 4 minibatches) for
  ``--train-steps`` env steps, SPS from the run's own timing (compilation apart).

Steps are env (team) steps, as JaxMARL counts them. The engine and bare programs are timed interleaved
(``rollout_sps.time_interleaved``), medians over repeats.

    python benchmarks/marl_sps.py --devices 1,2 --out benchmarks/results/marl_sps.jsonl
"""

from __future__ import annotations

import argparse
import time

import common  # also puts the repository root on sys.path
import rollout_sps
from common import command_line, emit, platform_fields, sps_stats


def _config(env_id: str, num_local_envs: int, num_steps: int):
    from agents.team import TeamConfig

    config = TeamConfig.for_env(env_id)
    return config.replace(num_envs=num_local_envs, num_steps=num_steps,
                          total_timesteps=max(config.total_timesteps, num_local_envs * num_steps))


def make_engine(env_id: str, num_local_envs: int, num_steps: int, hidden_sizes, calls: int):
    import jax
    import jax.numpy as jnp

    import envs
    from agents.team import make_ippo
    from rlpar.core import rollout

    env, env_params = envs.make(env_id)
    config = _config(env_id, num_local_envs, num_steps)

    def build(axis_name):
        ippo = make_ippo(config, env, env_params, num_local_envs, axis_name)
        return ippo, rollout.make_collector(env, env_params, ippo.act, num_steps, bootstrap=ippo.bootstrap,
                                            initial_carry=ippo.initial_carry)

    def make_init(axis_name):
        ippo, collect = build(axis_name)

        def init(key_params, key_device):
            key_env, key_agent = jax.random.split(key_device)
            agent = ippo.init(key_params, key_agent)
            state = rollout.reset(env, env_params, key_env, num_local_envs, ippo.initial_carry(num_local_envs))
            traj_shape = jax.eval_shape(collect, agent, state)[1]
            return agent, state, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), traj_shape)

        return init

    return make_init, (lambda axis_name: rollout_sps._repeated(build(axis_name)[1], calls))


def make_bare(env_id: str, num_local_envs: int, num_steps: int, hidden_sizes, calls: int):
    import jax
    import jax.numpy as jnp

    import envs
    from agents.networks import ActorCritic
    from agents.team import make_ippo
    from envs.marl_suite import PREFIX, import_package

    raw = import_package().make(env_id[len(PREFIX):])
    team, team_params = envs.make(env_id)
    config = _config(env_id, num_local_envs, num_steps)
    ippo = make_ippo(config, team, team_params, num_local_envs)  # its network and init; acting below is bare
    names = list(raw.agents)
    eye = jnp.eye(len(names))

    def policy(params, obs_dict, key):
        obs = jnp.stack([obs_dict[a] for a in names], axis=1)  # [B, A, D]
        from agents.team.network import AgentInputs

        inputs = AgentInputs(obs, jnp.broadcast_to(eye, obs.shape[:2] + eye.shape[1:]),
                             jnp.ones(obs.shape[:2] + (team.num_actions,)), jnp.zeros(obs.shape[:2] + (0,)))
        pi, value = ippo.network.apply(params, inputs, method=ActorCritic.distribution)
        action = pi.sample(seed=key)
        return action, pi.log_prob(action), value

    reset_envs = jax.vmap(raw.reset)
    step_envs = jax.vmap(raw.step)

    def env_step(carry, params):
        env_state, obs, key = carry
        key, key_act, key_env = jax.random.split(key, 3)
        action, log_prob, value = policy(params, obs, key_act)
        actions = {a: action[:, i] for i, a in enumerate(names)}
        next_obs, env_state, reward, done, _ = step_envs(jax.random.split(key_env, num_local_envs), env_state,
                                                         actions)
        out = (obs, action, log_prob, value, jnp.stack([reward[a] for a in names], 1), done["__all__"])
        return (env_state, next_obs, key), out

    def collect(params, carry):
        return jax.lax.scan(lambda c, _: env_step(c, params), carry, None, length=num_steps)

    def init(key_params, key_device):
        params = ippo.init(key_params, key_device).params
        key_reset, key = jax.random.split(key_device)
        obs, env_state = reset_envs(jax.random.split(key_reset, num_local_envs))
        carry = (env_state, obs, key)
        traj_shape = jax.eval_shape(collect, params, carry)[1]
        return params, carry, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), traj_shape)

    return (lambda axis_name: init), (lambda axis_name: rollout_sps._repeated(collect, calls))


def train_sps(env_id: str, devices: int, steps: int) -> dict:
    import agents.team
    from agents.team import TeamConfig

    config = TeamConfig.for_env(env_id).replace(total_timesteps=steps)
    start = time.perf_counter()
    result = agents.team.train_ippo(config, env_id, devices=devices, log_every=max(1, config.num_updates // 4),
                                    eval_every=0)
    wall = time.perf_counter() - start
    timed = result.metrics[1:]  # the first chunk's time holds the first call's dispatch; the rest is steady
    seconds = sum(r["time_s"] for r in timed)
    counted = result.metrics[-1]["env_steps"] - result.metrics[0]["env_steps"]
    return {"sps": counted / seconds, "compile_s": result.compile_s, "wall_s": wall, "env_steps": steps}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="marl-MPE_simple_spread_v3")
    parser.add_argument("--devices", default="1,2", help="device counts, a comma list (CPU devices on a CPU host)")
    parser.add_argument("--num-envs", type=int, default=16, help="environments in total (JaxMARL's ippo_ff_mpe: 16)")
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--calls", type=int, default=8, help="collects per compiled call")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--min-repeat-s", type=float, default=0.5)
    parser.add_argument("--train-steps", type=int, default=409_600, help="env steps of each end-to-end run")
    common.add_out_argument(parser, "marl_sps")
    args = parser.parse_args(argv)
    counts = [int(d) for d in args.devices.split(",")]

    from rlpar.core import hosts

    hosts.request_cpu_devices(max(counts))
    progress = common.Rows(2 * len(counts))
    for count in counts:
        devices = hosts.select_devices(count)
        progress.start(f"collector, engine and bare, {count} device(s)")
        programs = {name: rollout_sps.prepare(make, devices, args.env, args.num_envs, args.num_steps, None,
                                              args.calls, args.min_repeat_s)
                    for name, make in (("engine", make_engine), ("bare", make_bare))}
        times = rollout_sps.time_interleaved(programs, args.repeats)
        base = {"benchmark": "marl_sps", **platform_fields(devices), "env": args.env, "num_envs": args.num_envs,
                "num_steps": args.num_steps, "command": command_line()}
        records = {}
        for name, program in programs.items():
            steps = program.dispatches * args.calls * args.num_envs * args.num_steps
            records[name] = {**base, "program": name, "compile_s": round(program.compile_s, 3),
                             **sps_stats(steps, times[name])}
        records["engine"]["overhead_vs_bare"] = records["bare"]["sps_median"] / records["engine"]["sps_median"] - 1
        for record in records.values():
            emit(record, args.out)
        progress.start(f"end-to-end ippo training, {count} device(s)")
        emit({**base, "program": "train", **train_sps(args.env, count, args.train_steps)}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
