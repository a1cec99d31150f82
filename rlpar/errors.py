"""One-line errors for the command line, and ``RLPAR_TRACEBACK=1`` to see the whole traceback instead.

Every tool (``rlpar.train``, ``rlpar.evaluate``, ``rlpar.plot``) reports bad input as one line on stderr naming the
value, the underlying error and what is accepted, and exits 2. Errors raised by a user's own code (an env factory, an
agent's ``make``, an env's ``step`` while the program is traced) are wrapped into such a line by ``from_user_code``;
with ``RLPAR_TRACEBACK=1`` in the environment the tools print the full chain of tracebacks too, to debug that code.
"""

from __future__ import annotations

import os
import sys
import traceback

TRACEBACK_ENV = "RLPAR_TRACEBACK"


def one_line(text: str, limit: int = 400) -> str:
    """``text`` with its white space folded into one line, cut at ``limit`` characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def describe(err: BaseException) -> str:
    """``"TypeError: join() missing 1 required positional argument"``: the type and the first line of the message
    (JAX's tracing errors go on for pages)."""
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {one_line(first, 300)}" if first else type(err).__name__


def from_user_code(what: str, err: BaseException, accepted: str = "") -> ValueError:
    """A ``ValueError`` (raise it ``from err``) saying ``what`` failed with ``err``, and what is accepted."""
    hint = f"; accepted: {accepted}" if accepted else ""
    return ValueError(f"{what} raised {describe(err)}{hint} ({TRACEBACK_ENV}=1 shows the traceback)")


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
