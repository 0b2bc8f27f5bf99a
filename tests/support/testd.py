"""The test daemon: svcd with the probe routes added. Same flags as svcd.

It also reports any fork that is not followed by an exec (``os.fork``, or a subprocess with a
``preexec_fn``): svcd is threaded, and such a child inherits the locks other threads held and
every descriptor, the root's lock among them. The fixtures fail a test run whose daemon log
carries ``FORK_MARK``.
"""

from __future__ import annotations

import os
import sys
import traceback

from svc.cli import main
from tests.support import probe

FORK_MARK = "svcd forked without exec"


def _report_fork() -> None:
    sys.stderr.write(f"{FORK_MARK}:\n{''.join(traceback.format_stack())}\n")
    sys.stderr.flush()


if __name__ == "__main__":
    os.register_at_fork(before=_report_fork)
    sys.exit(main(sys.argv[1:], extensions=[probe.install]))
