"""Mean episode return of a uniformly random policy: the floor a learning curve should clear.

    python benchmarks/random_baseline.py --env Breakout-MinAtar --episodes 256

One JSON line: env, episodes, mean and std of the return, mean length, the host (``common.record``).
"""

from __future__ import annotations

import argparse

import common  # also puts the repository root on sys.path
import jax
import jax.numpy as jnp
import numpy as np


def random_returns(env_id: str, episodes: int, seed: int = 0, max_steps: int = 10_000):
    import envs

    env, params = envs.make(env_id)
    steps = min(int(getattr(params, "max_steps_in_episode", max_steps)), max_steps)
    space = env.action_space(params)
    keys = jax.random.split(jax.random.PRNGKey(seed), episodes)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)

    def step(carry, key):
        state, ret, length, alive = carry
        k_act, k_env = jax.random.split(key)
        action = jax.vmap(space.sample)(jax.random.split(k_act, episodes))
        _, state, reward, terminated, truncated, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(k_env, episodes), state, action, params)
        ret = ret + jnp.where(alive, reward, 0.0)
        length = length + alive
        alive = alive & ~(terminated | truncated)
        return (state, ret, length, alive), None

    init = (state, jnp.zeros(episodes), jnp.zeros(episodes, jnp.int32), jnp.ones(episodes, bool))
    (_, ret, length, alive), _ = jax.jit(lambda c: jax.lax.scan(step, c, jax.random.split(jax.random.PRNGKey(seed + 1),
                                                                                         steps)))(init)
    return np.asarray(ret), np.asarray(length), np.asarray(alive)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Breakout-MinAtar")
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    common.add_out_argument(parser, "random_baseline")
    args = parser.parse_args()
    ret, length, unfinished = random_returns(args.env, args.episodes, args.seed)
    common.emit(common.record("random_baseline", env=args.env, episodes=args.episodes, policy="uniform random",
                              return_mean=float(ret.mean()), return_std=float(ret.std()),
                              length_mean=float(length.mean()), unfinished=int(unfinished.sum())), args.out)


if __name__ == "__main__":
    main()
