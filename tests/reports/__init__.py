"""Tests of `core.reports`: status, health and the terminal text they print."""
