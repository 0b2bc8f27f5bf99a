"""Plugins written in the tests: real processes speaking the engines' plugin protocol.

``server`` is the process (run as ``python -m tests.support.plugins.server``); each driver
kind is a module here with ``IMPLEMENTS`` and ``make(state, args)``; ``process`` starts,
kills and restarts one and reads what it was asked.
"""
