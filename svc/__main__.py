"""``python -m svc`` runs the daemon, like ``svcd``."""

from svc.cli import main

raise SystemExit(main())
