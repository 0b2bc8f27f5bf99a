"""svc's benchmark suite: run it with ``.venv/bin/nox -s bench`` or ``python bench/run.py``."""
