"""Registry side: image reference grammar, later the registry v2 client and its auth."""
