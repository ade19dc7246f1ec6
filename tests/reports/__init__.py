"""Tests of the reports: status, health and the terminal text they print."""
