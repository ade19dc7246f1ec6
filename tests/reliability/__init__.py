"""The reliability suite: crashes, concurrency, store faults and bad input, with nothing lost.

`make test` runs the quick versions (the `test_reliability_*.py` beside this file);
`make test-reliability` runs the long ones through `python -m tests.reliability` and prints the
table.
"""
