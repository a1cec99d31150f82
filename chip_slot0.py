import os, sys
import jax, numpy as np
sys.path.insert(0, ".")
import agents.ppo
from agents.ppo import PPOConfig
import envs
from rlpar.core import seeds
from rlpar.run.prepare import make_program_factory
n = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
config = PPOConfig.for_env("Breakout-MinAtar", platform="tpu").replace(num_envs=n, num_steps=16)
env, env_params = envs.make("Breakout-MinAtar")
def program(num_seeds):
    slots = seeds.make_slots(num_seeds, "")
    return make_program_factory(agents.ppo.SPEC, config, slots, env, env_params, config.num_envs)(None)
leaves = lambda t: [np.asarray(x) for x in jax.tree.leaves(t)]
single, two = program(1), program(2)
kp, kd = jax.random.split(jax.random.key(0))
s = jax.jit(single.init)(jax.random.fold_in(kp, 0), jax.random.fold_in(kd, 0))
t = jax.jit(two.init)(kp, kd)
before = leaves(s.agent.params)
for i in range(3):
    s, m1 = jax.jit(single.update)(s)
    t, m2 = jax.jit(two.update)(t)
    moved = max(float(np.abs(a - b).max()) for a, b in zip(leaves(s.agent.params), before))
    apart = max(float(np.abs(a - b[0]).max()) for a, b in zip(leaves(s.agent.params), leaves(t.agent.params)))
    print(jax.default_backend(), os.environ.get("RLPAR_PLAIN_LAYERS"), "update", i, "moved", moved, "apart", apart, flush=True)
