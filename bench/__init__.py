"""The benchmark suite: `python -m bench --help`.

The orchestrator (`_cli`, `_workloads`) starts servers and hands each measured run to a
load process (`_load`) so that the client never shares a Python interpreter with the
server it measures. See bench/README.md.
"""
