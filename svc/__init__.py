"""svc: a container engine daemon speaking the Engine Remote API v1.23."""
