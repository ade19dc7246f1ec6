"""Tests of the stores (`core.base.state`, the Chroma adapter, each wing's `stores`): every store on
real files, a real embedded Chroma, a real `chroma run` or PostgreSQL.
"""
