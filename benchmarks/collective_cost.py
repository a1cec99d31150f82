"""What a gradient all-reduce costs on this host: one PPO minibatch gradient step on 2 devices, with the gradient
and loss statistics reduced leaf by leaf (``jax.lax.pmean`` on the pytree), raveled (``rlpar.core.collectives.pmean``),
or not at all; plus one isolated all-reduce of a single float.

Each figure is the median over ``--repeats`` calls of a compiled ``scan`` of ``--steps`` steps, divided by the steps.

    python benchmarks/collective_cost.py --devices 2

One JSON line per figure (``us_per_step``); each also said on stderr.
"""

from __future__ import annotations

import argparse

import common
from thunks import median_seconds


def per_step_us(fn, args, steps: int, repeats: int) -> float:
    return 1e6 * median_seconds(fn, *args, repeats=repeats) / steps


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--minibatch", type=int, default=256, help="transitions per step, over all devices")
    parser.add_argument("--steps", type=int, default=160)
    parser.add_argument("--repeats", type=int, default=7)
    common.add_out_argument(parser, "collective_cost")
    args = parser.parse_args(argv)

    from rlpar.core import hosts, parallel

    hosts.request_cpu_devices(args.devices)
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.flatten_util import ravel_pytree

    import envs
    from agents.ppo import Batch, PPOConfig, make_ppo
    from agents.ppo.loss import ppo_loss
    from agents.networks import ActorCritic
    from rlpar.core import collectives

    devices, axis = hosts.select_devices(args.devices), parallel.AXIS_NAME
    config = PPOConfig()
    env, env_params = envs.make("CartPole-v1")
    network = make_ppo(config, env, env_params, config.num_envs, None).network
    params = network.init(jax.random.PRNGKey(0), jnp.zeros((1, 4)))
    n = args.minibatch // len(devices)
    keys = jax.random.split(jax.random.PRNGKey(1), 4)
    batch = Batch(jax.random.normal(keys[0], (n, 4)), jax.random.randint(keys[1], (n,), 0, 2), jnp.full((n,), -0.69),
                  jax.random.normal(keys[2], (n,)), jax.random.normal(keys[3], (n,)), jnp.zeros(n))

    def loss(p):
        pi, value = network.apply(p, batch.obs, method=ActorCritic.distribution)
        return ppo_loss(pi.log_prob(batch.action), pi.entropy(), value, batch.log_prob, batch.value, batch.advantage,
                        batch.target, clip_eps=0.2, vf_clip_eps=0.2, vf_coef=0.5, ent_coef=0.01)

    reductions = {
        "leaf by leaf (jax.lax.pmean on the pytree)": lambda t: jax.lax.pmean(t, axis),
        "raveled (rlpar.core.collectives.pmean)": lambda t: collectives.pmean(t, axis),
        "none (arithmetic only)": lambda t: t,
    }
    rows = lambda tree: jax.tree.map(lambda x: np.stack([np.asarray(x)] * len(devices)), tree)  # noqa: E731
    common.say(common.host_line())
    common.say(f"{len(devices)} {devices[0].platform} devices, minibatch {args.minibatch}, PPO 64x64 actor-critic")

    def report(what: str, us: float) -> None:
        common.emit(common.record("collective_cost", what=what, us_per_step=round(us, 2), steps=args.steps,
                                  repeats=args.repeats, minibatch=args.minibatch, **common.platform_fields(devices)),
                    args.out)
        common.say(f"  {what}: {us:7.1f} us")

    progress = common.Rows(len(reductions) + 1)
    for name, reduce in reductions.items():
        progress.start(f"compiling and timing {args.steps} gradient steps, reduced {name}")

        def steps(p, reduce=reduce):
            def body(p, _):
                (_, info), grads = jax.value_and_grad(loss, has_aux=True)(p)
                grads, info = reduce((grads, info))
                flat, unravel = ravel_pytree(p)
                return unravel(flat - 1e-4 * ravel_pytree(grads)[0]), info.total
            return jax.lax.scan(body, p, None, length=args.steps)

        mapped = jax.pmap(steps, axis_name=axis, devices=devices)
        us = per_step_us(mapped, (rows(params),), args.steps, args.repeats)
        report(f"gradient step, reduced {name}", us)

    def all_reduces(x):
        return jax.lax.scan(lambda c, _: (jax.lax.psum(c, axis) * 0.5, None), x, None, length=args.steps)[0]

    progress.start(f"compiling and timing {args.steps} all-reduces of one float")
    one = jax.pmap(all_reduces, axis_name=axis, devices=devices)
    us = per_step_us(one, (np.ones((len(devices), 1), np.float32),), args.steps, args.repeats)
    report("one all-reduce of one float", us)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
