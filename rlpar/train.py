"""A re-export, kept for ``python -m rlpar.train``: the training command is ``rlpar.tools.train``."""

from rlpar.tools.train import console, main

__all__ = ["console", "main"]

if __name__ == "__main__":
    console()
