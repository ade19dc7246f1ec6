"""Tests of the pure rules (every `core.*.rules`, `core.base.config`): pure decisions, so nothing
here loads a store (tests/test_structure.py checks it).
"""
