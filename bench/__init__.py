"""Benchmarks: each case measures ours against Spark's own baseline in the same run."""
