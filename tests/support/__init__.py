"""The test kit: the fault-injecting loopback server, generated sites, a pseudo-terminal runner.

Only the tests and the benchmarks use it, so it ships in no package (tests/conftest.py and
benchmarks/common.py put tests/ on ``sys.path``).
"""
