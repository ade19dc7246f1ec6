"""Tests of `core.rules`: pure decisions, so nothing here loads a store (tests/test_structure.py
checks it).
"""
