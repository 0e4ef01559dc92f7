"""The command-line tools behind ``python -m arena``: the demo, the benchmark and its
workloads."""
