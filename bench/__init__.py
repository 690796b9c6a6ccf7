"""Benchmark of durable agent runs: what recording and replaying costs, against a plain run and a floor.

Run it from the repository root with ``python -m bench`` (``make bench``); ``python -m bench --help``
lists the options. It is a measurement, not a test: it prints a table and writes a JSON file under
``bench/results/``, and says PASS or FAIL for each target of issue 3. ``docs/benchmarks.rst``
describes what is measured and how.
"""
