"""A load process: `python -m bench._load` reads one JSON spec on stdin, runs that
workload's client side (see `_clients.WORKLOADS`) and prints one JSON result.

The orchestrator starts one per measured run, so the client has its own interpreter
(and, on a 2-core machine, in effect its own core) apart from the server's.
"""

from __future__ import annotations

import asyncio
import json
import sys

from ._clients import WORKLOADS


def main() -> None:
    spec = json.load(sys.stdin)
    result = asyncio.run(WORKLOADS[spec["workload"]](spec))
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
