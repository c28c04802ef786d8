"""`python -m benchmarks.harness`: the benchmarks, what each measures and how long it takes."""

from .catalog import listing

print(listing())
