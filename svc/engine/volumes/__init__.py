"""Volumes: the local driver's volumes."""
