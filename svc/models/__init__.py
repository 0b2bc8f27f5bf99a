"""Pydantic v2 wire models, under the Engine API's own field names. No logic, no I/O."""
