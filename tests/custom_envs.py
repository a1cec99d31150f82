"""A factory that ``tests/test_env_adapters.py`` reaches as ``"tests.custom_envs:make_short_cartpole"``.

It lives in its own module because ``tests`` is not a package: pytest imports test files under their bare names, so
naming a test file as ``tests.<file>`` would import it a second time.
"""


def make_short_cartpole(max_steps: int = 500):
    """CartPole with a ``max_steps``-step time limit: returns ``(env, env_params)``."""
    import gymnax

    env, params = gymnax.make("CartPole-v1")
    return env, params.replace(max_steps_in_episode=max_steps)
