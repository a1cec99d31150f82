"""Probe environments whose right answers are known in closed form.

They catch sign, bootstrapping and credit-assignment bugs that "it learns CartPole" hides. Each is a gymnax 1.0
environment (six-value ``step`` with auto-reset), registered with ``envs.make`` under the ids below.

| id                      | obs            | actions | reward            | episode end               | known answer                    |
|-------------------------|----------------|---------|-------------------|---------------------------|---------------------------------|
| ``Probe-OneStep-v0``    | [0.]           | 1       | 1                 | terminates after 1 step   | V(s) = 1                        |
| ``Probe-ObsReward-v0``  | [+1.] or [-1.] | 1       | = obs             | terminates after 1 step   | V(s) = obs                      |
| ``Probe-Truncated-v0``  | [0.]           | 1       | 1                 | truncated after 5 steps   | V(s) = 1 / (1 - gamma)          |
| ``Probe-Policy-v0``     | [+1.] or [-1.] | 2       | 1 if action == (obs > 0) else 0 | terminates after 1 step | pi picks the matching action; V = 1 |
| ``Probe-Memory-v0``     | cue, then blanks | 2     | 1 if the step-3 action matches the step-1 cue | terminates after 3 steps | memoryless 0.5, recurrent 1 |
| ``Probe-TwoStep-v0``    | [0.], then [1.] | 1      | 0.5, then 1       | terminates after 2 steps  | Q(s0) = 0.5 + gamma, Q(s1) = 1 |
| ``Probe-ContinuousTwoStep-v0`` | as TwoStep | Box [-2, 2] | as TwoStep (the action changes nothing) | terminates after 2 steps | as TwoStep, for every action |
| ``Probe-ContinuousTruncated-v0`` | [0.] | Box [-2, 2] | 1             | truncated after 5 steps   | Q(s, a) = 1 / (1 - gamma)       |
| ``Probe-ContinuousBandit-v0`` | [0.]     | Box [-2, 2] | -(a - 1)^2    | terminates after 1 step   | Q(s, a) = -(a - 1)^2; best a = 1 |

``Probe-Truncated-v0`` has a constant observation, so the critic cannot see the clock: a learner that treats the time
limit as termination fits an average of truncated returns (well below 1 / (1 - gamma)); one that bootstraps from
``info["final_observation"]`` fits the infinite-horizon value.

The classes live in ``envs.probe_envs``, which subclasses gymnax and so imports it; this module only names them, so
``import envs`` starts no JAX backend. ``PROBES[id]`` (and ``envs.probes.OneStep``, ``ProbeParams``, ...) import
them on first use.
"""


from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

_IMPL = "envs.probe_envs"
# Probe id -> class name in ``envs.probe_envs``.
_PROBE_CLASSES = {
    "Probe-OneStep-v0": "OneStep",
    "Probe-ObsReward-v0": "ObsReward",
    "Probe-Truncated-v0": "Truncated",
    "Probe-TwoStep-v0": "TwoStep",
    "Probe-Policy-v0": "Policy",
    "Probe-Memory-v0": "Memory",
    "Probe-ContinuousTwoStep-v0": "ContinuousTwoStep",
    "Probe-ContinuousTruncated-v0": "ContinuousTruncated",
    "Probe-ContinuousBandit-v0": "ContinuousBandit",
}


class _LazyProbes(Mapping):
    """``{probe id: environment class}``; the classes are imported on the first lookup."""

    def __getitem__(self, env_id: str) -> type:
        return getattr(importlib.import_module(_IMPL), _PROBE_CLASSES[env_id])

    def __iter__(self) -> Iterator[str]:
        return iter(_PROBE_CLASSES)

    def __len__(self) -> int:
        return len(_PROBE_CLASSES)

    def __repr__(self) -> str:
        return f"PROBES({', '.join(_PROBE_CLASSES)})"


PROBES: Mapping[str, type] = _LazyProbes()


def __getattr__(name: str) -> Any:
    # PEP 562: ``from envs.probes import ProbeParams`` and friends still work, importing gymnax only then.
    if name.startswith("__"):
        raise AttributeError(name)
    impl = importlib.import_module(_IMPL)
    try:
        return getattr(impl, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
