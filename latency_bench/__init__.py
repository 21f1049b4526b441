"""Honest per-block latency measurement of rtamt models (``python -m latency_bench``)."""
