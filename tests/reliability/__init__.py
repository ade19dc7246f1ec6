"""The reliability suite: crashes, concurrency, store faults and bad input, with nothing lost.

`make test` runs the quick versions (tests/test_reliability_*.py); `make test-reliability`
runs the long ones through `python -m tests.reliability` and prints the table.
"""
