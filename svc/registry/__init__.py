"""The registry adapter (Registry HTTP API v2 client and its auth): arrives with issue 15.
The image reference grammar it uses lives in ``svc.wire.reference``."""
