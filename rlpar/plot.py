"""A re-export, kept for ``python -m rlpar.plot``: the plotting command is ``rlpar.tools.plot``."""

import sys

from rlpar.tools.plot import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
