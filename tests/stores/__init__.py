"""Tests of `core.stores`: every store on real files, a real embedded Chroma, a real `chroma run`
or PostgreSQL.
"""
