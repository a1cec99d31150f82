"""Where one PPO update's time goes: collect vs gradient steps vs the rest (advantages, shuffling, metrics).

Times, on one device under ``jax.jit`` (compile excluded, median of repeats, ``--updates`` per compiled call):

- ``update``: ``rlpar.program.make_program(agent, ...).update`` for the PPO agent (``agents.ppo.make_ppo``), the
  whole per-device step the runner maps: collect, then ``PPO.learn``;
- ``collect``: ``rlpar.rollout.make_collector`` with PPO's ``act`` and ``bootstrap``, as the program builds it;
- ``grad steps``: ``PPO.fit``, the ``update_epochs * num_minibatches`` shuffled minibatch gradient + optimizer
  steps on one update's batch;
- ``rest`` = update - collect - grad steps (GAE, the last observation's value, batch flattening, loss and episode
  statistics).

Throughput in FLOP/s: XLA's cost analysis (``compiled.cost_analysis()["flops"]``) of one minibatch gradient
(``PPO.grad``, a loop-free program) and of one acting step (``PPO.act`` on this device's envs) gives the update's
FLOPs (``epochs * minibatches`` gradients, ``num_steps`` acting steps, one bootstrap); divided by the measured times
they give the achieved GFLOP/s, set beside the GFLOP/s of a large float32 matmul (``jnp.dot`` of 2048^3, the best
this backend does on this host: the practical peak).

    python benchmarks/profile_update.py                    # PPOConfig defaults: 8 envs x 128 steps
    python benchmarks/profile_update.py --num-envs 1024
    python benchmarks/profile_update.py --env Breakout-MinAtar --preset   # the env's preset (64 envs x 128 steps)
    python benchmarks/profile_update.py --env Breakout-MinAtar --preset --torso auto --hidden-sizes 128  # convolution
"""

from __future__ import annotations

import argparse
import statistics
import time

import common


def median_seconds(fn, *args, repeats: int) -> float:
    import jax

    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--preset", action="store_true", help="start from the env's PPO preset (PPOConfig.for_env)")
    parser.add_argument("--num-envs", type=int, default=None, help="default: 8, or the preset's")
    parser.add_argument("--num-steps", type=int, default=None, help="default: 128, or the preset's")
    parser.add_argument("--torso", default=None, help="auto (convolution for images) or mlp; default: the preset's")
    parser.add_argument("--hidden-sizes", default=None, help="e.g. 128 or 256,256; default: the preset's")
    parser.add_argument("--updates", type=int, default=10, help="updates per compiled call")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)

    import jax
    import jax.numpy as jnp

    import envs
    from agents.ppo import Batch, PPOConfig, make_ppo
    from rlpar import rollout
    from rlpar.program import make_program

    config = PPOConfig.for_env(args.env) if args.preset else PPOConfig()
    hidden = tuple(int(h) for h in args.hidden_sizes.split(",")) if args.hidden_sizes else None
    config = config.replace(**{k: v for k, v in (("num_envs", args.num_envs), ("num_steps", args.num_steps),
                                                 ("torso", args.torso), ("hidden_sizes", hidden)) if v is not None})
    env, env_params = envs.make(args.env)
    ppo = make_ppo(config, env, env_params, config.num_envs, None)
    program = make_program(ppo, env, env_params, config.num_envs, config.num_steps, None)
    state = program.init(jax.random.PRNGKey(0), jax.random.PRNGKey(1))  # TrainState(agent: PPOState, rollout)
    k = args.updates

    def scan(body, carry, length):
        return jax.lax.scan(lambda c, _: (body(c), None), carry, None, length=length)[0]

    progress = common.Rows(4)
    progress.start(f"compiling and timing {k} whole updates")
    update = jax.jit(lambda s: scan(lambda s: program.update(s)[0], s, k))
    t_update = median_seconds(update, state, repeats=args.repeats) / k

    collect = rollout.make_collector(env, env_params, ppo.act, config.num_steps, bootstrap=ppo.bootstrap,
                                     initial_carry=ppo.initial_carry)
    progress.start(f"compiling and timing {k} collects")
    collect_k = jax.jit(lambda a, r: scan(lambda r: collect(a, r)[0], r, k))
    t_collect = median_seconds(collect_k, state.agent, state.rollout, repeats=args.repeats) / k

    n = config.batch_size  # one update's batch on this device
    obs_dim = env.observation_space(env_params).shape
    keys = jax.random.split(jax.random.PRNGKey(2), 3)
    num_actions = getattr(env.action_space(env_params), "n", 2)
    batch = Batch(jax.random.normal(keys[0], (n, *obs_dim)), jax.random.randint(keys[1], (n,), 0, num_actions),
                  jnp.full((n,), -0.69), jnp.zeros(n), jax.random.normal(keys[2], (n,)), jnp.zeros(n))

    def fit(carry):
        params, opt_state, key = carry
        key, key_fit = jax.random.split(key)
        params, opt_state, _ = ppo.fit(params, opt_state, batch, key_fit)
        return params, opt_state, key

    steps = config.update_epochs * config.num_minibatches
    progress.start(f"compiling and timing {k} updates' gradient steps")
    grads_k = jax.jit(lambda c: scan(fit, c, k))
    t_grads = median_seconds(grads_k, (state.agent.params, state.agent.opt_state, jax.random.PRNGKey(3)),
                             repeats=args.repeats) / k

    rest = t_update - t_collect - t_grads

    def flops(fn, *fn_args) -> float:
        return float(jax.jit(fn).lower(*fn_args).compile().cost_analysis()["flops"])

    progress.start("counting FLOPs (XLA's cost analysis) and timing a 2048^3 matmul")
    minibatch = jax.tree.map(lambda x: x[: n // config.num_minibatches], batch)
    grad_flops = flops(ppo.grad, state.agent.params, minibatch) * steps
    obs = state.rollout.obs
    act_flops = flops(lambda a, o: ppo.act(a, ppo.initial_carry(config.num_envs), o, jax.random.PRNGKey(0)),
                      state.agent, obs) * (config.num_steps + 1)  # + the bootstrap's forward pass
    size = 2048
    a = jax.random.normal(jax.random.PRNGKey(4), (size, size))
    t_matmul = median_seconds(jax.jit(lambda x: x @ x), a, repeats=args.repeats)
    peak = 2 * size**3 / t_matmul / 1e9
    print(common.host_line(), flush=True)
    print(f"{args.env}, torso {config.torso}, hidden {config.hidden_sizes}, {config.num_envs} envs x {config.num_steps} steps, {config.update_epochs} epochs x "
          f"{config.num_minibatches} minibatches of {n // config.num_minibatches}, backend {jax.devices()[0].platform}")
    print(f"update     {1e3 * t_update:8.2f} ms  ({config.batch_size / t_update:,.0f} env steps/s)")
    for name, t in (("collect", t_collect), (f"{steps} grad steps", t_grads), ("rest", rest)):
        print(f"{name:15s}{1e3 * t:8.2f} ms  {100 * t / t_update:5.1f}%")
    print(f"FLOPs per update: {steps} grad steps {grad_flops / 1e9:.2f} G, acting {act_flops / 1e9:.3f} G; achieved: "
          f"grad steps {grad_flops / t_grads / 1e9:.1f} GFLOP/s, whole update {(grad_flops + act_flops) / t_update / 1e9:.1f} "
          f"GFLOP/s; float32 matmul {size}^3 here: {peak:.1f} GFLOP/s (grad steps at {100 * grad_flops / t_grads / 1e9 / peak:.0f}% of it)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
