"""Benchmarks of prisample against cpprb, TorchRL and a plain numpy sum tree (not part of the tests).

Run ``python -m benchmarks.run_all`` (or ``make bench``); ``--quick`` for a smoke run on small sizes.
The full run writes ``docs/benchmarks.md`` and ``benchmarks/results.json``.
"""
