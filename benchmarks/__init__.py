"""Overhead and throughput measurements; `make bench` writes BENCHMARKS.md."""
