"""rlpar.core.jax_internals: each private JAX use runs on the installed JAX (a release of ``CHECKED``) and falls back to
JAX's own behaviour on any other; importing rlpar changes nothing in JAX for a user's other programs."""

import subprocess
import sys
import textwrap

import jax
import pytest

from rlpar.core import cpu_paths, jax_internals

OUTSIDE = "0.12.0"  # a release after the checked ones: every use must do without jax._src


def test_the_installed_jax_is_a_checked_release():
    # The project's declared range (pyproject.toml: jax>=0.10.2,<0.12) is the checked releases; CI runs both ends.
    assert jax_internals.checked(), (jax.__version__, jax_internals.CHECKED)
    assert jax_internals.rolled_threefry_rule() is not None
    assert jax_internals.initialize_lapack()


@pytest.mark.parametrize("version, release, checked", [
    ("0.10.2", (0, 10), True), ("0.11.2", (0, 11), True), ("0.11.0rc1", (0, 11), True), ("0.9.1", (0, 9), False),
    ("0.12.0", (0, 12), False), ("1.0.0.dev20270101", (1, 0), False),
])
def test_release_and_checked_read_the_version(version, release, checked):
    assert jax_internals.release(version) == release
    assert jax_internals.checked(version) is checked


def test_declared_range_matches_the_checked_releases():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    low, high = re.search(r'"jax>=([0-9.]+),<([0-9.]+)"', text).groups()
    assert jax_internals.release(low) == min(jax_internals.CHECKED)
    assert jax_internals.release(high) == (max(jax_internals.CHECKED)[0], max(jax_internals.CHECKED)[1] + 1)


def test_outside_the_checked_releases_nothing_private_is_used(monkeypatch):
    monkeypatch.setattr(jax, "__version__", OUTSIDE)
    assert not jax_internals.checked()
    assert jax_internals.rolled_threefry_rule() is None
    assert jax_internals.initialize_lapack() is False
    assert jax_internals.backends_started()  # the public probe: this test process has started JAX


def _run(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_backends_started_before_and_after_with_and_without_jax_src():
    out = _run(textwrap.dedent(f"""
        import jax
        from rlpar.core import jax_internals
        before = jax_internals.backends_started()
        jax.__version__, real = "{OUTSIDE}", jax.__version__
        before_public = jax_internals.backends_started()
        jax.numpy.zeros(1).block_until_ready()
        after_public = jax_internals.backends_started()
        jax.__version__ = real
        print(before, before_public, after_public, jax_internals.backends_started())
    """))
    assert out.split() == ["False", "False", "True", "True"]


DRAWS = textwrap.dedent("""
    import jax, jax.numpy as jnp
    def draws(key):
        keys = jax.random.split(key, 8)
        return keys, jax.vmap(lambda k: jax.random.uniform(k, (4,)))(keys), jax.random.bits(key, (3,), jnp.uint32)
    def program_text():
        return jax.jit(draws).lower(jax.random.PRNGKey(0)).as_text()
""")


def test_importing_and_running_rlpar_changes_no_other_program():
    """A user's own program lowers the same with and without rlpar imported, and after an rlpar run in the process
    registered its threefry rule (the rule falls back to JAX's own outside rlpar's programs)."""
    alone = _run(DRAWS + "print(program_text())")
    with_rlpar = _run(DRAWS + textwrap.dedent("""
        import agents, envs, rlpar, rlpar.run, rlpar.tools.train, rlpar.evaluate
        first = program_text()
        agents.ppo.train(agents.PPOConfig(total_timesteps=512, num_envs=4, num_steps=32, num_minibatches=1,
                                          update_epochs=1), "CartPole-v1", eval_every=0)
        from rlpar.core import cpu_paths
        assert cpu_paths._installed
        assert program_text() == first
        print(first)
    """))
    assert alone == with_rlpar
    assert "while" in alone  # JAX's own CPU lowering: the rounds in a loop


def test_outside_the_checked_releases_no_rule_is_registered(monkeypatch):
    monkeypatch.setattr(jax, "__version__", OUTSIDE)
    monkeypatch.setattr(cpu_paths, "_installed", False)
    assert cpu_paths.install() is False
