"""Import gymnax without paying for its plotting libraries.

gymnax 1.0's package import runs every environment module, and two of them import plotting libraries at module level
for their ``render`` methods: ``bsuite/catch.py`` (``matplotlib.pyplot``) and ``misc/pong.py`` (``seaborn``, which
brings scipy and pandas). Together that is most of ``import gymnax``'s time, and a training run never renders.
``import_gymnax`` puts a stand-in module for each of those two into ``sys.modules`` first; the stand-in imports the
real module at its first attribute access, hands everything on to it and leaves ``sys.modules`` to the real one,
so rendering, ``rlpar.plot`` and a user's own ``import matplotlib.pyplot`` work as before, only later.
(``importlib.util.LazyLoader`` cannot do this on Python 3.11: the import statement reads the lazy module's
``__spec__``, which loads it.)
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

DEFERRED = ("seaborn", "matplotlib.pyplot")  # imported by gymnax's environment modules, used only to render


def import_gymnax() -> ModuleType:
    """``import gymnax`` with the ``DEFERRED`` modules imported at their first use; returns the gymnax module."""
    if "gymnax" not in sys.modules:
        for name in DEFERRED:
            _register_lazy(name)
    import gymnax

    return gymnax


class _StandIn(ModuleType):
    """Stands for the module ``name`` until an attribute is asked for; then imports it and delegates."""

    def __getattr__(self, attr: str):  # only for attributes this empty module lacks: all of the real module's
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]  # the real import must not find the stand-in
        return getattr(importlib.import_module(name), attr)


def _register_lazy(name: str) -> None:
    """Put a stand-in for ``name`` into ``sys.modules`` (nothing when it is imported already or not installed)."""
    if name in sys.modules or importlib.util.find_spec(name.partition(".")[0]) is None:
        return
    sys.modules[name] = _StandIn(name)
