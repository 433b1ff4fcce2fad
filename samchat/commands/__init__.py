"""CLI sub-commands: every module here exposes `register(subparsers)` and is found automatically.

A module that adds a `bench` benchmark exposes `register_bench(bench_subparsers)` instead.
"""
