"""One-line errors for the command line, and ``RLPAR_TRACEBACK=1`` to see the whole traceback instead.

Every tool (``rlpar.train``, ``rlpar.evaluate``, ``rlpar.plot``) reports bad input as one line on stderr naming the
value, the underlying error and what is accepted, and exits 2. Errors raised by a user's own code (an env factory, an
agent's ``make``, an env's ``step`` while the program is traced) are wrapped into such a line by ``from_user_code`` (in
``envs.errors``: the env registry is the first place a user's code runs); with ``RLPAR_TRACEBACK=1`` in the
environment the tools print the full chain of tracebacks too, to debug that code.
"""

from __future__ import annotations

import os
import sys
import traceback

from envs.errors import TRACEBACK_ENV, describe, from_user_code, one_line  # noqa: F401 -- the tools' own use


def wants_traceback() -> bool:
    return os.environ.get(TRACEBACK_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def fail(err: BaseException | str, code: int = 2) -> int:
    """Print ``error: ...`` in one line on stderr (and, with ``RLPAR_TRACEBACK=1``, the traceback first); return
    ``code`` for the tool to exit with."""
    if isinstance(err, BaseException) and wants_traceback():
        traceback.print_exception(err, file=sys.stderr)
    print(f"error: {one_line(err, 2000)}", file=sys.stderr, flush=True)
    return code


def out_of_memory(err: BaseException, what: str) -> ValueError | None:
    """A one-line ``ValueError`` for XLA's out-of-memory errors (``RESOURCE_EXHAUSTED``, raised when a program that
    cannot fit is compiled, or when an allocation fails), naming ``what`` was being run (the env count and steps) and
    the memory it asked for; ``None`` for any other error."""
    import re

    text = str(err)
    if "RESOURCE_EXHAUSTED" not in text and "Out of memory" not in text:
        return None
    asked = re.search(r"\(([\d.]+\s*[KMGT]?i?B?)\) exceeds available \w+ \(([\d.]+\s*[KMGT]?i?B?)\)", text)
    amount = re.search(r"allocate (\d+) bytes", text)
    if asked:
        need = f"it asked for {asked.group(1)} of temporaries where the device has {asked.group(2)}"
    elif amount:
        need = f"an allocation of {int(amount.group(1)) / 2 ** 20:,.0f} MiB failed"
    else:
        need = describe(err)
    return ValueError(f"{what} does not fit the device's memory: {need}; lower --num-envs or --num-steps, or use "
                      f"more devices")
