"""A re-export, kept for ``python -m rlpar.evaluate`` and ``from rlpar.evaluate import load_policy``: the evaluation
command is ``rlpar.tools.evaluate`` (loading a run's policy: ``rlpar.tools.policy``; GIFs: ``rlpar.tools.gif``)."""

import sys

from rlpar.tools.evaluate import Evaluation, Policy, evaluate, load_policy, main, make_episodes, write_gif

__all__ = ["Evaluation", "Policy", "evaluate", "load_policy", "main", "make_episodes", "write_gif"]

if __name__ == "__main__":
    sys.exit(main())
