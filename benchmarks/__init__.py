"""uac's benchmark suite: ``python -m benchmarks.run`` (``make bench``).

Prints a table of figures against the project's targets and writes
``benchmarks/results.json``. See :mod:`benchmarks.run` for what is measured.
"""
