"""Tests of the wings' jobs: the drain, the reconcile pass, restore, alerting and back-fill on real
stores.
"""
