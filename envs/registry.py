"""``envs.make``: one entry point for gymnax environments, the probes, registered ids, the suites (Craftax, brax;
``envs.suites``) and users' own envs.

gymnax (and a suite's package) is imported inside the functions that need it: ``import gymnax`` starts JAX's
backends, and importing ``envs`` must not.
"""

from __future__ import annotations

import difflib
import functools
import importlib
from collections.abc import Callable
from typing import Any

from envs import suites
from envs.adapters import adapt_step
from envs.deferred import import_gymnax
from envs.errors import from_user_code
from envs.probes import PROBES
from envs.wrappers import EpisodeStatistics, FlattenObservation, RescaleAction

# id -> factory(**env_kwargs) returning an env or (env, env_params); the probes first, then ids added by register.
_FACTORIES: dict[str, Callable[..., Any]] = {}

_ACCEPTED = (
    "a gymnax id, a probe id, an id added with envs.register, 'package.module:attribute' (a factory or an "
    "environment class), an environment instance, or a JaxMARL-style multi-agent env instance"
)


def _make_probe(env_id: str, **env_kwargs):
    return PROBES[env_id](**env_kwargs)


for _probe_id in PROBES:
    _FACTORIES[_probe_id] = functools.partial(_make_probe, _probe_id)


# gymnax ids that cannot work here, and why: listed by gymnax, but refused with this reason before anything builds.
UNSUPPORTED = {
    "MNISTBandit-bsuite": "it downloads the MNIST dataset when built, and rlpar runs offline-first; use another "
                          "bsuite env (e.g. Catch-bsuite), or wrap a local copy of MNIST in your own env and pass it "
                          "to envs.register",
}


def _gymnax_ids() -> list[str]:
    gymnax = import_gymnax()

    return [i for i in gymnax.registered_envs if i not in UNSUPPORTED]


def env_ids() -> list[str]:
    """Every id ``make`` accepts: gymnax's registered environments, then the probes, then ids added by ``register``.

    (``make`` also accepts ``"package.module:attribute"`` strings and environment instances, not listed here.)
    """
    return [i for i in _gymnax_ids() if i not in _FACTORIES] + list(_FACTORIES)


def register(env_id: str, factory: Callable[..., Any], *, overwrite: bool = False) -> None:
    """Add ``env_id`` to ``make`` and ``env_ids``.

    Args:
      env_id: the new id, e.g. ``"MyGrid-v0"``.
      factory: ``factory(**env_kwargs)`` returns a gymnax-API environment instance, or ``(env, env_params)``; an
        environment class works as it is. Called by each ``make(env_id, **env_kwargs)``.
      overwrite: replace an id that already exists (a gymnax id, a probe, or an earlier registration).

    Raises:
      ValueError: ``env_id`` is not a non-empty string without ``":"`` (that form names a module), or already
        exists and ``overwrite`` is False.
      TypeError: ``factory`` is not callable.
    """
    if not isinstance(env_id, str) or not env_id or ":" in env_id:
        raise ValueError(f"env id must be a non-empty string without ':', got {env_id!r}")
    if not callable(factory):
        raise TypeError(f"factory for {env_id!r} must be callable, got {type(factory).__name__}")
    if not overwrite and (env_id in _FACTORIES or env_id in _gymnax_ids()):
        raise ValueError(f"env id {env_id!r} is already registered; pass overwrite=True to replace it")
    _FACTORIES[env_id] = factory


def _is_env(obj: Any) -> bool:
    """Duck-typed check for a gymnax-API environment instance (classes are factories, not instances)."""
    return not isinstance(obj, type) and all(hasattr(obj, m) for m in ("reset", "step", "action_space"))


def _is_team_env(obj: Any) -> bool:
    """Duck-typed check for a JaxMARL-style multi-agent env instance (``agents``, ``reset(key)``, ``step_env``)."""
    return (not isinstance(obj, type) and hasattr(obj, "agents") and callable(getattr(obj, "step_env", None))
            and callable(getattr(obj, "reset", None)))


def _team(env: Any) -> Any:
    from envs import marl_suite

    return marl_suite.wrap_instance(env)


def _from_spec(spec: str) -> Callable[..., Any] | Any:
    """The object ``"package.module:attribute"`` names (a factory, an environment class or an instance)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"env {spec!r}: expected 'package.module:attribute'; accepted: {_ACCEPTED}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"env {spec!r}: cannot import module {module_name!r} ({err}); accepted: {_ACCEPTED}") from err
    except Exception as err:  # noqa: BLE001 -- the user's module failed while importing
        raise from_user_code(f"env {spec!r}: importing module {module_name!r}", err, _ACCEPTED) from err
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"env {spec!r}: module {module_name!r} has no attribute {attr!r}; accepted: {_ACCEPTED}") \
            from None


def _unknown(env_id: Any) -> ValueError:
    known = env_ids()
    close = difflib.get_close_matches(str(env_id), known + list(suites.CRAFTAX_IDS), n=3, cutoff=0.4)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return ValueError(f"unknown env {env_id!r}.{hint} Known envs: {', '.join(known)}; suites: {suites.DESCRIPTION}; "
                      f"also accepted: {_ACCEPTED}")


def _call_factory(what: str, factory: Any, env_kwargs: dict) -> tuple[Any, Any]:
    """``(env, env_params or None)`` from a factory, a class, or an instance (which takes no kwargs); a JaxMARL-style
    env comes back adapted (``envs.marl_suite.TeamEnv``)."""
    if _is_team_env(factory):
        if env_kwargs:
            raise ValueError(f"env {what}: env_kwargs {sorted(env_kwargs)} given for an environment instance")
        return _team(factory), None
    if _is_env(factory):
        if env_kwargs:
            raise ValueError(f"env {what}: env_kwargs {sorted(env_kwargs)} given for an environment instance")
        return factory, None
    if not callable(factory):
        raise ValueError(f"env {what}: {type(factory).__name__} is neither callable nor an environment; "
                         f"accepted: {_ACCEPTED}")
    try:
        made = factory(**env_kwargs)
    except Exception as err:  # noqa: BLE001 -- a user's factory (or a suite's constructor) failed
        raise from_user_code(f"env {what}: calling {getattr(factory, '__qualname__', type(factory).__name__)}"
                             f"({', '.join(f'{k}=...' for k in env_kwargs)})", err, _ACCEPTED) from err
    if _is_team_env(made):
        return _team(made), None
    if isinstance(made, tuple) and len(made) == 2 and _is_env(made[0]):
        return made
    if _is_env(made):
        return made, None
    raise ValueError(f"env {what}: the factory returned {type(made).__name__}, expected an environment instance "
                     f"or (env, env_params); accepted: {_ACCEPTED}")


def _make_built_in(env_id: str, make: Callable[[], tuple[Any, Any]], env_kwargs: dict) -> tuple[Any, Any]:
    """``make()`` of a gymnax or suite id; a ``ValueError`` it raises already names the env and what it accepts, any
    other error (a keyword argument the constructor does not take) becomes one such line."""
    try:
        return make()
    except ValueError:
        raise
    except Exception as err:  # noqa: BLE001
        raise from_user_code(f"env {env_id!r}: building it with env_kwargs {sorted(env_kwargs)}", err,
                             "the keyword arguments its constructor or parameters take") from err


def _resolve(env: Any, env_kwargs: dict) -> tuple[Any, Any]:
    """``(raw env, env_params or None)`` for anything ``make`` accepts."""
    if not isinstance(env, str):
        if _is_env(env) or _is_team_env(env):
            return _call_factory(type(env).__name__, env, env_kwargs)
        raise _unknown(env)
    if env in _FACTORIES:
        return _call_factory(repr(env), _FACTORIES[env], env_kwargs)
    if env in UNSUPPORTED:
        raise ValueError(f"env {env!r} is not supported: {UNSUPPORTED[env]}")
    if ":" in env:
        return _call_factory(repr(env), _from_spec(env), env_kwargs)
    suite = suites.suite_of(env)
    if suite is not None:
        return _make_built_in(env, lambda: suites.make(env, suite, **env_kwargs), env_kwargs)
    if env in _gymnax_ids():
        return _make_built_in(env, lambda: import_gymnax().make(env, **env_kwargs), env_kwargs)
    raise _unknown(env)


def make(env: Any, *, flatten: bool | None = None, env_params: Any = None, **env_kwargs):
    """Build an environment ready for the engine.

    Args:
      env: a gymnax id (``"CartPole-v1"``, ``"Breakout-MinAtar"``, ...), a probe id (``"Probe-OneStep-v0"``), a
        suite id (``"Craftax-Classic-Symbolic-v1"``, ``"brax-ant"``, ``"brax-ant@spring"``: ``envs.suites``, each
        needing its extra), an id added with ``register``, ``"package.module:attribute"`` naming a factory or
        environment class (called with ``**env_kwargs``, see ``register``), a gymnax-API environment instance, or
        a JaxMARL-style multi-agent env instance (``envs.marl_suite.TeamEnv`` adapts it; ids ``marl-NAME``).
        Five-value ``step`` envs (gymnax 0.0.x style) are adapted to six values by ``envs.adapters.FiveToSixStep``.
      flatten: flatten observations to float32 vectors (for MLP policies); ``None`` (default) flattens everything
        but images ``[H, W, C]``, which CNN policies take as they are. Dict and tuple observations are always
        flattened.
      env_params: parameters to use instead of the env's own (those a factory returned, else ``default_params``).
      **env_kwargs: passed to the environment's constructor or factory (not accepted with an instance).

    Returns:
      ``(env, env_params)``: the env wrapped in ``EpisodeStatistics`` (and ``FlattenObservation``; and, for
      ``Box`` action spaces, ``RescaleAction`` so the agent acts in ``[-1, 1]^d``), with gymnax 1.0's six-value
      ``step``.

    Raises:
      ValueError: for an unknown id (listing the closest known ids), a bad ``module:attribute``, a factory that
        returns no environment, or a suite id whose extra is not installed (naming the pip command).
    """
    import_gymnax()
    raw, made_params = _resolve(env, env_kwargs)
    try:
        return _wrap(raw, made_params, env_params, flatten)
    except ValueError:  # already says what is wrong (e.g. a step that returns neither 5 nor 6 values)
        raise
    except Exception as err:  # noqa: BLE001 -- the env's own methods (params, spaces) failed
        what = env if isinstance(env, str) else type(env).__name__
        raise from_user_code(f"env {what!r}: checking its API (parameters, spaces, a step)", err,
                             "an environment with gymnax's API (default_params, action_space, observation_space, "
                             "reset, step)") from err


def _wrap(raw, made_params, env_params, flatten):
    from gymnax.environments import spaces

    if env_params is None:
        env_params = raw.default_params if made_params is None else made_params
    wrapped = adapt_step(raw, env_params)
    if isinstance(wrapped.action_space(env_params), spaces.Box):
        wrapped = RescaleAction(wrapped)
    if flatten is None and getattr(wrapped, "agent_names", None):
        flatten = False  # a team env (envs.marl_suite): its observation already has the agents' arrays
    if flatten is None:
        obs_space = wrapped.observation_space(env_params)
        flatten = isinstance(obs_space, (spaces.Dict, spaces.Tuple)) or len(obs_space.shape) != 3
    if flatten:
        wrapped = FlattenObservation(wrapped)
    return EpisodeStatistics(wrapped), env_params
