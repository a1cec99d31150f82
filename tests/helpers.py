"""Shared test data."""

import signal

import jax
import jax.numpy as jnp

from agents.ppo import Batch


def jaxpr_eqns(jaxpr):
    """Every equation of ``jaxpr`` and of the jaxprs inside it (scan bodies, cond branches, ...)."""
    import jax.extend.core

    for eqn in jaxpr.eqns:
        yield eqn
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            yield from jaxpr_eqns(sub)


def random_batch(key, n, obs_dim=4):
    """A PPO minibatch of ``n`` random CartPole-shaped transitions."""
    k = jax.random.split(key, 6)
    return Batch(
        obs=jax.random.normal(k[0], (n, obs_dim)),
        action=jax.random.randint(k[1], (n,), 0, 2),
        log_prob=jnp.log(jax.random.uniform(k[2], (n,), minval=0.3, maxval=0.7)),
        value=jax.random.normal(k[3], (n,)),
        advantage=jax.random.normal(k[4], (n,)) * 2 + 0.5,
        target=jax.random.normal(k[5], (n,)),
    )


def assert_one_line_error(captured, says) -> None:
    """``captured`` (pytest's ``capsys.readouterr()``) holds one ``error: ...`` line on stderr, no traceback, and that
    line contains every string of ``says``."""
    assert "Traceback" not in captured.err + captured.out
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    for part in says:
        assert part in lines[0], lines[0]


def sigint_as_in_a_terminal() -> None:
    """A child process's ``preexec_fn``: SIGINT back to its default action, as a terminal's foreground job has it.

    A test run started in the background of a non-interactive shell (``python -m pytest &``, nohup) has SIGINT
    ignored, every child inherits that, and Python then installs no ``KeyboardInterrupt`` handler: a Ctrl-C test would
    see its signal do nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
