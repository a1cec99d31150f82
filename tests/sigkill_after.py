"""Run ``python -m rlpar.train`` and SIGKILL the process right after the chunk that reaches update N is logged.

usage: python tests/sigkill_after.py N [rlpar.train arguments]

For the kill-and-resume tests: the process dies at an exact point between two checkpoints (after that chunk's
metrics line is written, before its checkpoint would be saved), as a crash or ``kill -9`` there would leave it. The
hook is installed here, in the test harness, by wrapping the chunk loop's ``_finish_chunk``; the production loop has no
test hooks.
"""

from __future__ import annotations

import os
import signal
import sys


def main(argv: list[str]) -> int:
    kill_at, flags = int(argv[0]), argv[1:]
    from rlpar.run import chunks
    from rlpar.tools import train

    finish_chunk = chunks.finish_chunk

    def finish_then_maybe_die(record, records, out):
        finish_chunk(record, records, out)
        if record["update"] >= kill_at:
            if out.logger is not None:
                out.logger.sync()  # what a crash leaves on disk: the lines already written
            os.kill(os.getpid(), signal.SIGKILL)

    chunks.finish_chunk = finish_then_maybe_die
    return train.main(flags)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
