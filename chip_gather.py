import sys
import jax, jax.numpy as jnp, numpy as np
sys.path.insert(0, ".")
from agents import shuffle
from rlpar.core import platform
N, M, B = 16384, 8, 8
key = jax.random.key(3)
perm = shuffle.epoch_orders(key, N, 1, B)[0]
perm2 = jax.vmap(lambda k: shuffle.epoch_orders(k, N, 1, B)[0])(jnp.stack([key, key]))
print("perm single == vmapped:", bool((np.asarray(perm) == np.asarray(perm2[0])).all()), "is a permutation:", sorted(np.asarray(perm).tolist()) == list(range(N // B)))
p = np.asarray(perm)
rows = (p[:, None] * B + np.arange(B)[None, :]).reshape(-1)  # the rows in gathered order
for width in (400, 1, 4):
    x = (jnp.arange(N, dtype=jnp.float32)[:, None] * 1000 + jnp.arange(width, dtype=jnp.float32)[None, :]) if width > 1 else jnp.arange(N, dtype=jnp.float32)
    ref = np.asarray(x)[rows].reshape(M, N // M, -1)
    for layout in ("flat", "blocks", "shaped"):
        with platform.forcing(gather_layout=layout):
            one = np.asarray(jax.jit(lambda x, p: shuffle.minibatches(x, p, M, B))(x, perm)).reshape(M, N // M, -1)
            two = np.asarray(jax.jit(jax.vmap(lambda x, p: shuffle.minibatches(x, p, M, B)))(jnp.stack([x, x]), jnp.stack([perm, perm])))[0].reshape(M, N // M, -1)
        print(f"width {width} {layout}: single wrong {int((one != ref).sum())}, vmapped wrong {int((two != ref).sum())} of {ref.size}")
import agents.ppo, envs
from agents.ppo import PPOConfig
from rlpar.core import seeds
from rlpar.run.prepare import make_program_factory
config = PPOConfig.for_env("Breakout-MinAtar", platform="tpu").replace(num_envs=1024, num_steps=16)
env, env_params = envs.make("Breakout-MinAtar")
def program(n):
    return make_program_factory(agents.ppo.SPEC, config, seeds.make_slots(n, ""), env, env_params, config.num_envs)(None)
kp, kd = jax.random.split(jax.random.key(0))
for forced in ({}, {"shuffle_block": 1}, {"gather_layout": "flat"}, {"gather_layout": "shaped"}):
    with platform.forcing(**forced):
        single, two = program(1), program(2)
        s = jax.jit(single.init)(jax.random.fold_in(kp, 0), jax.random.fold_in(kd, 0)); t = jax.jit(two.init)(kp, kd)
        s1, m1 = jax.jit(single.update)(s); t1, m2 = jax.jit(two.update)(t)
    apart = max(float(np.abs(np.asarray(a) - np.asarray(b)[0]).max()) for a, b in zip(jax.tree.leaves(s1.agent.params), jax.tree.leaves(t1.agent.params)))
    moved = max(float(np.abs(np.asarray(a) - np.asarray(b)).max()) for a, b in zip(jax.tree.leaves(s1.agent.params), jax.tree.leaves(s.agent.params)))
    print(f"forced {forced}: moved {moved:.3g} apart {apart:.3g}; kl {float(m1['loss/approx_kl']):.5f} vs {float(np.asarray(m2['loss/approx_kl']).ravel()[0]):.5f}", flush=True)
