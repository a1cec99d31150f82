"""JaxMARL's multi-agent environments as engine envs (the ``marl`` extra): ids ``marl-NAME[@MAP]``.

``NAME`` is any ``jaxmarl.make`` name (``marl-MPE_simple_spread_v3``, ``marl-overcooked``, ``marl-hanabi``);
``@MAP`` picks a SMAX scenario (``marl-HeuristicEnemySMAX@3m``, the map JaxMARL's MAPPO trains on; a ``scenario``
keyword argument does the same from Python, as a name or a ``Scenario``). ``TeamEnv`` also wraps a user's own
JaxMARL-style env instance (``reset(key)``, ``step_env(key, state, actions)``, ``agents``, per-agent spaces).

What JaxMARL's API says in dicts keyed by agent name, ``TeamEnv`` says in arrays with an agent axis ``A`` (the
order of ``env.agents``):

- observation: a ``TeamObservation``: ``obs [A, D]`` (each agent's observation flattened to float32 and
  zero-padded to the longest, ``D``), ``agent_id [A, A]`` (one-hot), ``action_mask [A, n]`` (1 where the action
  is available: the env's ``get_avail_actions`` where it has one, else every action the agent's own space has)
  and ``world_state [W]`` for a centralised critic (the env's ``obs["world_state"]`` where it gives one, as SMAX
  does; else every agent's padded observation concatenated, as JaxMARL's MAPPO does for MPE);
- action ``[A]`` int32 (``n``: the largest action count; an agent with fewer has the rest masked out);
- reward ``[A]`` float32 per agent; ``terminated`` and ``truncated`` one per team.

It steps ``step_env`` and resets where ``dones["__all__"]`` is set, so the finished episode's last observation
reaches the agent as ``info["final_observation"]`` (JaxMARL's own ``step`` throws it away). Where the env's step
limit is known (MPE, SMAX, Overcooked: ``state.step`` against ``env.max_steps``; a user's env that declares
``time_limit``, against that) a team episode cut there is
``truncated`` (bootstrapped) unless it also ended on its own (SMAX: one side wiped out), which is ``terminated``.
For other envs every end is ``terminated``. Episode metrics (``info["episode_metrics"]``): each agent's return as
``agent_NAME_return`` and, for SMAX, ``won`` (every enemy dead and some ally alive when the episode ended).

Reward shaping (``reward_shaping_horizon=H``, env steps of each env; Overcooked, or any env whose ``step_env``
gives ``info["shaped_reward"]`` per agent): the reward returned for learning is the env's reward plus its shaped
reward weighted by ``max(0, 1 - k / H)``, ``k`` the steps this env has taken since its first reset (the count lives
in the env state, so it survives episodes, checkpoints and resumes). The env's own reward goes to
``info["unshaped_reward"]``, which the episode statistics and evaluations count: ``episode_return`` stays the
env's true (sparse) return. JaxMARL's IPPO anneals the same way over its ``REW_SHAPING_HORIZON`` of team steps
summed over envs, its weight held for each update: ``H`` here is that horizon divided by the number of envs.
"""

from __future__ import annotations

import difflib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from envs.wrappers import UNSHAPED_REWARD

PREFIX = "marl-"


def import_package():
    """``import jaxmarl``, without the lines it prints about its optional submodules (the tools' stdout is theirs).
    Its import sets ``sys.stdout`` and ``sys.stderr`` back to ``sys.__stdout__`` and ``sys.__stderr__`` on the way
    (its MABrax module), which ``contextlib.redirect_stdout`` cannot survive: file descriptor 1 points at the null
    device meanwhile, and both streams are put back as they were after."""
    import os
    import sys

    if "jaxmarl" in sys.modules:
        return sys.modules["jaxmarl"]
    stdout, stderr = sys.stdout, sys.stderr
    stdout.flush()
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        import jaxmarl
    finally:
        sys.stdout.flush()
        sys.__stdout__.flush()
        sys.stdout, sys.stderr = stdout, stderr
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)
    return jaxmarl


@struct.dataclass
class TeamObservation:
    """One environment's observation of the whole team; agents on the leading axis ``A``."""

    obs: jax.Array  # [A, D] float32, each agent's observation flattened and zero-padded to D
    agent_id: jax.Array  # [A, A] float32 one-hot of the agent's index
    action_mask: jax.Array  # [A, n] float32, 1 where the action is available to that agent
    world_state: jax.Array  # [W] float32, the team's state for a centralised critic


@struct.dataclass
class TeamState:
    env_state: Any  # the JaxMARL env's own state
    agent_returns: jax.Array  # [A] float32 each agent's return in the current episode so far (the env's reward)
    steps_taken: jax.Array  # int32 steps this env has taken since its first reset (the reward shaping's clock)


class TeamActionSpace:
    """``A`` discrete actions, one per agent, each in ``0..n-1``: what ``TeamEnv.step`` takes."""

    def __init__(self, num_agents: int, n: int):
        self.num_agents, self.n = num_agents, n
        self.shape = (num_agents,)
        self.dtype = jnp.int32

    def sample(self, key: jax.Array) -> jax.Array:
        return jax.random.randint(key, self.shape, 0, self.n, jnp.int32)

    def contains(self, x) -> jax.Array:
        x = jnp.asarray(x)
        return jnp.logical_and(x.shape == self.shape, jnp.all((x >= 0) & (x < self.n)))

    def __repr__(self) -> str:
        return f"TeamActionSpace(agents={self.num_agents}, n={self.n})"


def _flat_size(space) -> int:
    return int(np.prod(getattr(space, "shape", ()) or (1,)))


class TeamEnv:
    """A JaxMARL(-style) env with gymnax 1.0's six-value ``step`` and agent-axis arrays (module docstring).

    ``env_params`` are ``None`` (JaxMARL envs keep their settings on the instance). Attributes the engine and the
    team agents read: ``agent_names`` (declares the agent axis), ``num_agents``, ``obs_size`` (``D``),
    ``world_state_size`` (``W``), ``num_actions`` (``n``), ``has_action_masks``, ``time_limit``.
    """

    def __init__(self, env: Any, name: str | None = None, reward_shaping_horizon: int = 0):
        self._env = env
        self.agent_names = tuple(env.agents)
        self.num_agents = len(self.agent_names)
        self._name = name or getattr(env, "name", type(env).__name__)
        obs0, state0 = jax.eval_shape(env.reset, jax.ShapeDtypeStruct((2,), jnp.uint32))
        self.reward_shaping_horizon = _shaping_horizon(self._name, env, state0, reward_shaping_horizon)
        self._obs_sizes = [_flat_size(obs0[a]) for a in self.agent_names]  # what reset gives, whatever the spaces say
        self.obs_size = max(self._obs_sizes)
        action_spaces = [env.action_space(a) for a in self.agent_names]
        if not all(hasattr(s, "n") for s in action_spaces):
            raise ValueError(f"env {self._name!r}: its agents' action spaces are {action_spaces}; the team agents "
                             "take discrete actions only (Discrete(n) for every agent)")
        self._action_counts = [int(s.n) for s in action_spaces]
        self.num_actions = max(self._action_counts)
        self._smax = _inner_smax(env)
        self.time_limit = _time_limit(env)
        self._own_world_state = isinstance(obs0, dict) and "world_state" in obs0
        self.world_state_size = (_flat_size(obs0["world_state"]) if self._own_world_state
                                 else self.num_agents * self.obs_size)
        self.has_action_masks = _has_avail_actions(env, state0)

    @property
    def max_steps_in_episode(self) -> int | None:
        """Steps every episode ends within (evaluation's cap): JaxMARL's MPE and SMAX end an episode on the step
        their counter passes ``max_steps``, one after it; ``None`` without a known limit."""
        return None if self.time_limit is None else self.time_limit + 1

    # ---- GIFs (rlpar.evaluate --gif): JaxMARL's own visualisers, MPE's and Overcooked's from the states, SMAX's
    # replaying the steps ----
    @property
    def renders_from_actions(self) -> bool:
        """Whether ``render_frames`` needs each step's actions and key (SMAX's world ticks several times a step, and
        JaxMARL's ``SMAXVisualizer`` replays those ticks from them)."""
        return self._smax is not None

    def check_render(self) -> None:
        import importlib.util

        try:
            family = _family(self._env)
        except ImportError:
            family = None
        if family not in ("mpe", "smax", "overcooked"):
            raise ValueError(f"--gif: rlpar draws JaxMARL's MPE, SMAX and Overcooked envs (through JaxMARL's "
                             f"MPEVisualizer, SMAXVisualizer and OvercookedVisualizer); {self._name!r} is none of them")
        if importlib.util.find_spec("matplotlib") is None:
            raise ValueError('--gif needs matplotlib: pip install -e ".[extras]" (or pip install matplotlib)')

    def render_frames(self, states: Any, on_frame=None, actions=None, keys=None) -> np.ndarray:
        """``[F, H, W, 3]`` uint8 frames of an episode: ``states`` are JaxMARL states stacked ``[T, ...]``; for SMAX
        also ``actions [T, A]`` and ``keys [T]`` (what ``step`` was given), one frame per world tick."""
        import contextlib
        import io

        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        count = int(np.shape(jax.tree.leaves(states)[0])[0])
        sequence = [jax.tree.map(lambda x: np.asarray(x[t]), states) for t in range(count)]
        if _family(self._env) == "overcooked":
            return self._overcooked_frames(sequence, on_frame)
        if self._smax is not None:
            vis = self._smax_visualizer(sequence, actions, keys)
        else:
            from jaxmarl.environments.mpe.mpe_visualizer import MPEVisualizer

            with contextlib.redirect_stdout(io.StringIO()):  # it prints whether agents communicate
                vis = MPEVisualizer(self._env, sequence)
        frames = []
        try:
            if self._smax is not None:
                vis.init()
            for t in range(len(vis.state_seq)):
                vis.update(t)
                vis.fig.canvas.draw()
                frames.append(np.asarray(vis.fig.canvas.buffer_rgba())[..., :3].copy())
                if on_frame is not None:
                    on_frame(t, len(vis.state_seq))
        finally:
            plt.close(vis.fig)
        return np.stack(frames)

    def _overcooked_frames(self, sequence: list, on_frame=None) -> np.ndarray:
        """The frames JaxMARL's ``OvercookedVisualizer.animate`` draws: each state's grid, without the padding the
        env keeps around it (``agent_view_size - 2`` cells a side), through its grid renderer."""
        from jaxmarl.viz.overcooked_visualizer import TILE_PIXELS, OvercookedVisualizer

        pad = self._env.agent_view_size - 2
        frames = []
        for t, state in enumerate(sequence):
            grid = np.asarray(state.maze_map[pad:-pad, pad:-pad, :])
            frames.append(OvercookedVisualizer._render_grid(grid, tile_size=TILE_PIXELS, highlight_mask=None,
                                                            agent_dir_idx=state.agent_dir_idx,
                                                            agent_inv=state.agent_inv))
            if on_frame is not None:
                on_frame(t, len(sequence))
        return np.stack(frames).astype(np.uint8)

    def _smax_visualizer(self, sequence: list, actions, keys):
        """JaxMARL's ``SMAXVisualizer`` with its state sequence expanded to world ticks. Its ``expand_state_seq``
        steps each recorded ``(key, state, actions)`` again: ``EnemySMAX`` splits the key as ``step`` does, plain
        ``SMAX`` takes ``step_env``'s key, so each is handed the key this adapter gave it."""
        from jaxmarl.viz.visualizer import SMAXVisualizer

        if actions is None or keys is None:
            raise ValueError(f"env {self._name!r}: drawing SMAX replays its steps, so it needs each step's actions "
                             "and key")
        steps = []
        for t, state in enumerate(sequence):
            key_step = jax.random.split(jnp.asarray(keys[t]))[0]
            key = jnp.asarray(keys[t]) if self._smax is not self._env else key_step
            steps.append((key, state, {a: jnp.asarray(actions[t][i]) for i, a in enumerate(self.agent_names)}))
        vis = SMAXVisualizer(self._env, steps)
        vis.expand_state_seq()
        return vis

    # ---- gymnax's duck-typed interface ----
    @property
    def name(self) -> str:
        return self._name

    @property
    def default_params(self):
        return None

    @property
    def unwrapped(self):
        return self._env

    def action_space(self, params=None) -> TeamActionSpace:
        return TeamActionSpace(self.num_agents, self.num_actions)

    def observation_space(self, params=None):
        from gymnax.environments import spaces

        a, box = self.num_agents, lambda shape, low=-jnp.inf, high=jnp.inf: spaces.Box(low, high, shape, jnp.float32)
        return spaces.Dict({"obs": box((a, self.obs_size)), "agent_id": box((a, a), 0.0, 1.0),
                            "action_mask": box((a, self.num_actions), 0.0, 1.0),
                            "world_state": box((self.world_state_size,))})

    def reset(self, key: jax.Array, params=None) -> tuple[TeamObservation, TeamState]:
        obs, env_state = self._env.reset(key)
        return self._observe(obs, env_state), TeamState(env_state, jnp.zeros(self.num_agents, jnp.float32),
                                                        jnp.int32(0))

    def step(self, key: jax.Array, state: TeamState, action: jax.Array, params=None):
        key_step, key_reset = jax.random.split(key)
        actions = {a: action[i] for i, a in enumerate(self.agent_names)}
        obs_st, env_st, rewards, dones, env_info = self._env.step_env(key_step, state.env_state, actions)
        done = jnp.asarray(dones["__all__"]).astype(bool)
        truncated = done & self._cut(env_st)
        terminated = done & ~truncated
        reward = self._per_agent(rewards)
        returns = state.agent_returns + reward
        metrics = {f"agent_{a}_return": returns[i] for i, a in enumerate(self.agent_names)}
        if self._smax is not None:
            metrics["won"] = _smax_won(self._smax, env_st).astype(jnp.float32)
        final_obs = self._observe(obs_st, env_st)
        obs_re, env_re = self._env.reset(key_reset)
        pick = lambda re, st: jax.lax.select(done, re, st)
        env_state = jax.tree.map(pick, env_re, env_st)
        obs = jax.tree.map(pick, self._observe(obs_re, env_re), final_obs)
        info = {"final_observation": final_obs, "episode_metrics": metrics}
        if self.reward_shaping_horizon:
            info[UNSHAPED_REWARD] = reward
            weight = shaping_weight(state.steps_taken, self.reward_shaping_horizon)
            reward = reward + weight * self._per_agent(env_info["shaped_reward"])
        state = TeamState(env_state, jnp.where(done, 0.0, returns), state.steps_taken + 1)
        return obs, state, reward, terminated, truncated, info

    def _per_agent(self, values: dict) -> jax.Array:
        """``[A]`` float32 from a dict of per-agent scalars."""
        return jnp.stack([jnp.asarray(values[a], jnp.float32).reshape(()) for a in self.agent_names])

    # ---- translation ----
    def _observe(self, obs: dict, env_state: Any) -> TeamObservation:
        rows = [jnp.pad(jnp.reshape(obs[a], (-1,)).astype(jnp.float32), (0, self.obs_size - size))
                for a, size in zip(self.agent_names, self._obs_sizes)]
        stacked = jnp.stack(rows)
        world = (jnp.reshape(obs["world_state"], (-1,)).astype(jnp.float32) if self._own_world_state
                 else stacked.reshape(-1))
        return TeamObservation(stacked, jnp.eye(self.num_agents, dtype=jnp.float32), self._mask(env_state), world)

    def _mask(self, env_state: Any) -> jax.Array:
        own = jnp.asarray(np.arange(self.num_actions)[None, :] < np.asarray(self._action_counts)[:, None],
                          jnp.float32)
        if not self.has_action_masks:
            return own
        avail = self._env.get_avail_actions(env_state)
        rows = [jnp.pad(jnp.asarray(avail[a], jnp.float32).reshape(-1), (0, self.num_actions - n))
                for a, n in zip(self.agent_names, self._action_counts)]
        return jnp.stack(rows) * own

    def _cut(self, env_state: Any) -> jax.Array:
        """Whether a team episode that ended in ``env_state`` (before the reset) was cut by the step limit."""
        if self.time_limit is None:
            return jnp.zeros((), bool)
        inner = env_state.state if self._smax is not None and hasattr(env_state, "state") else env_state
        at_limit = inner.step >= self.time_limit
        if self._smax is not None:
            at_limit = at_limit & ~_smax_wiped(self._smax, inner)
        return at_limit


def shaping_weight(steps_taken: jax.Array, horizon: int) -> jax.Array:
    """The shaped reward's weight after ``steps_taken`` steps of an env: ``max(0, 1 - steps_taken / horizon)``, 1 at
    the start, 0 from ``horizon`` steps on (``horizon=4``: 1, 0.75, 0.5, 0.25, 0, 0, ...)."""
    return jnp.maximum(0.0, 1.0 - steps_taken.astype(jnp.float32) / horizon)


def _shaping_horizon(name: str, env: Any, state0: Any, horizon: Any) -> int:
    """``horizon`` checked: a non-negative int, and positive only for an env whose step gives a shaped reward."""
    if not isinstance(horizon, (int, np.integer)) or isinstance(horizon, bool) or horizon < 0:
        raise ValueError(f"env {name!r}: reward_shaping_horizon={horizon!r}; accepted: a whole number of env steps "
                         ">= 0 (0: no shaping)")
    if horizon:
        key = jax.ShapeDtypeStruct((2,), jnp.uint32)
        actions = {a: jax.ShapeDtypeStruct((), jnp.int32) for a in env.agents}
        info = jax.eval_shape(env.step_env, key, state0, actions)[-1]
        if not isinstance(info, dict) or "shaped_reward" not in info:
            raise ValueError(f"env {name!r}: reward_shaping_horizon={horizon} but its step gives no "
                             "info['shaped_reward']; accepted: 0 (no shaping), or an env with a shaped reward "
                             "(marl-overcooked)")
    return int(horizon)


# ---- what the adapter knows about JaxMARL's families ----
def _family(env: Any) -> str | None:
    """``"mpe"``, ``"smax"`` or ``"overcooked"`` for the envs whose step limit ``TeamEnv`` knows; else ``None``."""
    import_package()
    from jaxmarl.environments.mpe.simple import SimpleMPE
    from jaxmarl.environments.overcooked.overcooked import Overcooked
    from jaxmarl.environments.smax.heuristic_enemy_smax_env import EnemySMAX
    from jaxmarl.environments.smax.smax_env import SMAX

    if isinstance(env, SimpleMPE):
        return "mpe"
    if isinstance(env, (SMAX, EnemySMAX)):
        return "smax"
    if isinstance(env, Overcooked):
        return "overcooked"
    return None


def _inner_smax(env: Any):
    """The ``SMAX`` instance behind ``env`` (itself, or the one an ``EnemySMAX`` drives), else ``None``."""
    try:
        import_package()
        from jaxmarl.environments.smax.heuristic_enemy_smax_env import EnemySMAX
        from jaxmarl.environments.smax.smax_env import SMAX
    except ImportError:  # a user's env without jaxmarl installed
        return None
    if isinstance(env, EnemySMAX):
        return env._env
    return env if isinstance(env, SMAX) else None


def _time_limit(env: Any) -> int | None:
    """The step at which ``env`` cuts an episode: ``env.max_steps`` for MPE, SMAX and Overcooked, an env's own
    declared ``time_limit`` (a user's env, the probes), else ``None``."""
    declared = getattr(env, "time_limit", None)
    if declared is not None:
        return int(declared)
    try:
        family = _family(env)
    except ImportError:
        return None
    return int(env.max_steps) if family is not None else None


def _smax_wiped(smax: Any, inner_state: Any) -> jax.Array:
    allies = inner_state.unit_alive[: smax.num_allies]
    enemies = inner_state.unit_alive[smax.num_allies:]
    return jnp.logical_or(~jnp.any(allies), ~jnp.any(enemies))


def _smax_won(smax: Any, env_state: Any) -> jax.Array:
    inner = env_state.state if hasattr(env_state, "state") and hasattr(env_state.state, "unit_alive") else env_state
    return jnp.any(inner.unit_alive[: smax.num_allies]) & ~jnp.any(inner.unit_alive[smax.num_allies:])


def _has_avail_actions(env: Any, state: Any) -> bool:
    method = getattr(env, "get_avail_actions", None)
    if method is None:
        return False
    try:
        jax.eval_shape(method, state)
    except (NotImplementedError, AttributeError, TypeError, ValueError, KeyError):
        return False
    return True


# ---- ids ----
def make(env_id: str, **env_kwargs) -> tuple[TeamEnv, None]:
    """``(TeamEnv, None)`` for ``marl-NAME[@MAP]``; a one-line ``ValueError`` naming close JaxMARL names."""
    jaxmarl = import_package()
    name, _, map_name = env_id[len(PREFIX):].partition("@")
    known = list(jaxmarl.registered_envs)
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(PREFIX + c) for c in close)}?" if close else ""
        raise ValueError(f"unknown JaxMARL env {env_id!r}.{hint} Accepted: {PREFIX}NAME with NAME one of "
                         f"{', '.join(known)}")
    scenario = env_kwargs.pop("scenario", None) or map_name or None
    if scenario is not None:
        env_kwargs["scenario"] = _scenario(env_id, name, scenario)
    horizon = env_kwargs.pop("reward_shaping_horizon", 0)
    return TeamEnv(jaxmarl.make(name, **env_kwargs), name=env_id, reward_shaping_horizon=horizon), None


def _scenario(env_id: str, name: str, scenario: Any) -> Any:
    if "SMAX" not in name:
        raise ValueError(f"env {env_id!r}: a map or scenario is only taken by the SMAX envs (e.g. "
                         f"{PREFIX}HeuristicEnemySMAX@3m)")
    if not isinstance(scenario, str):
        return scenario
    from jaxmarl.environments.smax import smax_env

    maps = sorted(getattr(smax_env, "MAP_NAME_TO_SCENARIO", {}))
    if maps and scenario not in maps:
        raise ValueError(f"env {env_id!r}: unknown SMAX map {scenario!r}; accepted: {', '.join(maps)}")
    return smax_env.map_name_to_scenario(scenario)


def wrap_instance(env: Any) -> TeamEnv:
    """A user's JaxMARL-style env instance as a ``TeamEnv``."""
    return env if isinstance(env, TeamEnv) else TeamEnv(env)


def is_jaxmarl_style(obj: Any) -> bool:
    """Duck-typed: an instance with JaxMARL's ``agents``, ``step_env`` and ``reset`` (not already a gymnax env)."""
    return (not isinstance(obj, type) and hasattr(obj, "agents") and callable(getattr(obj, "step_env", None))
            and callable(getattr(obj, "reset", None)) and not hasattr(obj, "default_params"))

