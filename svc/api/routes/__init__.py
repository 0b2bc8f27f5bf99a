"""One module per resource; each exposes a Blueprint ``bp``."""
