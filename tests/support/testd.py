"""The test daemon: svcd with the probe routes added. Same flags as svcd."""

from __future__ import annotations

import sys

from svc.cli import main
from tests.support import probe

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], extensions=[probe.install]))
