"""One-line descriptions of errors raised by a user's own code (an env factory, an agent's ``make``, an env's
``step`` while the program is traced), for ``envs`` and ``rlpar`` alike.

Here, at the bottom of the layers, because the env registry is the first place a user's module runs; the command
line's own error printing (``fail``, and the traceback ``RLPAR_TRACEBACK=1`` asks for) is ``rlpar.tools.errors``.
"""

from __future__ import annotations

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
