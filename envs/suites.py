"""Environment suites beyond gymnax, each behind an optional extra: Craftax, brax and JaxMARL.

``envs.make`` asks ``suite_of(env_id)`` before gymnax; a suite's adapter module (``envs.craftax_suite``,
``envs.brax_suite``) is imported only when one of its envs is built, and imports its package then. Without the
package, naming one of its envs is a one-line ``ValueError`` with the pip command.

| ids | extra | adapter |
|---|---|---|
| ``Craftax-Classic-Symbolic-v1``, ``Craftax-Symbolic-v1`` (Craftax's names) | ``craftax`` | ``envs.craftax_suite`` |
| ``brax-NAME`` with brax's env names (``brax-ant``, ...), ``brax-NAME@BACKEND`` | ``brax`` | ``envs.brax_suite`` |
| ``marl-NAME`` with JaxMARL's env names (``marl-MPE_simple_spread_v3``), ``marl-NAME@MAP`` (SMAX) | ``marl`` | ``envs.marl_suite`` |
"""

from __future__ import annotations

import importlib
from typing import Any, NamedTuple


class Suite(NamedTuple):
    extra: str  # pip install -e ".[extra]"
    package: str  # the import that needs the extra
    requirement: str  # what the extra installs, for the message
    module: str  # the adapter module: import_package() (ImportError without the extra) and
    # make(env_id, **env_kwargs) -> (env, params)


SUITES = {
    "craftax": Suite("craftax", "craftax", "craftax>=1.6.1,<1.7", "envs.craftax_suite"),
    "brax": Suite("brax", "brax", "brax>=0.14.2,<0.15", "envs.brax_suite"),
    "marl": Suite("marl", "jaxmarl", "jaxmarl==0.2.0", "envs.marl_suite"),
}
CRAFTAX_IDS = ("Craftax-Classic-Symbolic-v1", "Craftax-Symbolic-v1")  # as envs.craftax_suite.IDS, without importing it
BRAX_PREFIX = "brax-"
MARL_PREFIX = "marl-"  # as envs.marl_suite.PREFIX

# For the unknown-id message.
DESCRIPTION = (f"{', '.join(CRAFTAX_IDS)} (the craftax extra), {BRAX_PREFIX}NAME[@BACKEND] with brax's env names, "
               f"e.g. {BRAX_PREFIX}ant (the brax extra), {MARL_PREFIX}NAME[@MAP] with JaxMARL's env names, e.g. "
               f"{MARL_PREFIX}MPE_simple_spread_v3 (the marl extra)")


def suite_of(env_id: str) -> Suite | None:
    """The suite an id belongs to, or ``None`` for any other id."""
    if env_id in CRAFTAX_IDS:
        return SUITES["craftax"]
    if env_id.startswith(BRAX_PREFIX):
        return SUITES["brax"]
    if env_id.startswith(MARL_PREFIX):
        return SUITES["marl"]
    return None


def make(env_id: str, suite: Suite, **env_kwargs) -> tuple[Any, Any]:
    """``(env, env_params)`` from the suite's adapter; a one-line ``ValueError`` if its package cannot be imported."""
    adapter = importlib.import_module(suite.module)
    try:
        adapter.import_package()
    except ImportError as err:
        raise ValueError(f"env {env_id!r} needs the {suite.extra} extra: pip install -e \".[{suite.extra}]\" "
                         f"(or pip install \"{suite.requirement}\"); importing {suite.package} failed: {err}") \
            from None
    return adapter.make(env_id, **env_kwargs)
