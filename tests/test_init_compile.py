"""The run's init program is compiled for compile time (``rlpar.run.build.compile_init``): its state is the one a
default compile gives, the CPU-only option goes to XLA:CPU alone, and an XLA without that option still compiles it."""

import jax
import numpy as np
import pytest

import agents
from agents.ppo import PPOConfig
from rlpar.core import jax_internals, platform
from rlpar.run import build, prepare
from rlpar.run.runner import RunConfig

# A default compile is the reference the init's own options are checked against: XLA's optimisations on.
pytestmark = pytest.mark.full_optimization

CONFIG = PPOConfig(num_envs=4, num_steps=8, total_timesteps=64)


class FakeLowered:
    """Records the options each ``compile`` gets; raises ``error`` while the options hold ``refuse``."""

    def __init__(self, refuse: str | None = None, error: str = "INVALID_ARGUMENT: No such compile option: '{}'"):
        self.calls, self.refuse, self.error = [], refuse, error

    def compile(self, options):
        self.calls.append(dict(options))
        if self.refuse is not None and self.refuse in options:
            raise jax.errors.JaxRuntimeError(self.error.format(self.refuse))
        return "compiled"


def test_cpu_gets_the_older_emitters_other_platforms_the_optimisation_level_only():
    cpu, gpu = FakeLowered(), FakeLowered()
    assert build.compile_init(cpu, "cpu") == build.compile_init(gpu, "gpu") == "compiled"
    assert cpu.calls == [{"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}]
    assert gpu.calls == [{"xla_backend_optimization_level": 0}]


def test_an_xla_without_the_cpu_option_compiles_with_the_others():
    lowered = FakeLowered(refuse="xla_cpu_use_fusion_emitters")
    assert build.compile_init(lowered, "cpu") == "compiled"
    assert lowered.calls[-1] == {"xla_backend_optimization_level": 0}


def test_any_other_compile_error_is_raised():
    lowered = FakeLowered(refuse="xla_cpu_use_fusion_emitters", error="RESOURCE_EXHAUSTED: out of memory ({})")
    with pytest.raises(jax.errors.JaxRuntimeError, match="RESOURCE_EXHAUSTED"):
        build.compile_init(lowered, "cpu")
    assert len(lowered.calls) == 1


def test_this_jax_takes_the_options_and_the_state_matches_a_default_compile():
    run_config = RunConfig(env="CartPole-v1", eval_every=0)
    prepared = prepare.prepare_run(agents.ppo.SPEC, CONFIG, run_config, None, None)
    init = build.Init(prepared, CONFIG, run_config)
    traced, _ = init._trace()
    lowered = traced.lower()
    # the real compile with the first CPU options this JAX takes (JAX 0.11's XLA has no xla_cpu_use_fusion_emitters:
    # the fallback's level 0 alone; on 0.10 the CPU options themselves, or an XLA refusing them would raise here)
    if jax_internals.release() == (0, 10):
        state = lowered.compile(platform.INIT_CPU_COMPILER_OPTIONS)(*init.args)
    else:
        state = build.compile_init(lowered, "cpu")(*init.args)
    default = lowered.compile()(*init.args)
    leaves, expected = jax.tree.leaves(jax.device_get(state)), jax.tree.leaves(jax.device_get(default))
    assert len(leaves) == len(expected) > 5
    for got, want in zip(leaves, expected):
        assert got.dtype == want.dtype and got.shape == want.shape
        if np.issubdtype(got.dtype, np.floating):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)  # last-bit differences of level 0 only
        else:
            np.testing.assert_array_equal(got, want)  # keys, counters, env states' integers
    params = jax.tree.leaves(state.agent.params)
    assert any(float(np.abs(p).max()) > 0.1 for p in params)  # initialised, not zeros
