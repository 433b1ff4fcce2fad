"""Benchmarks shared by `samchat bench` and docs/benchmarks.md."""
