"""The runtime's settings (the server's command line sets them: README, Operating it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class RuntimeSettings:
    lease_ttl: float = 10.0  # seconds a lease lasts without renewal
    poll_interval: float = 0.25  # how often a live stream re-reads the log without a wake-up
    cancel_wait: float = 10.0  # how long cancel waits for a running turn to stop
    model_retries: int = 4  # retries of a failed model call (429, 5xx, resets, timeouts)
    retry_base_delay: float = 0.5  # first backoff; doubles per retry, with jitter
    retry_max_delay: float = 8.0
    ambiguous_calls: Literal["fail", "report"] = "fail"  # G4: fail closed, or tell the model
    max_recoveries: int = 3  # G1: recoveries of one response before it fails for good
    scan_interval: float = 1.0  # seconds between recovery scans
    heartbeat_interval: float = 1.0  # seconds between checks for stops asked elsewhere
    loop_blocked_warning: float = 1.0  # seconds the event loop may be blocked unreported
    shutdown_grace: float = 10.0  # seconds running turns get to reach a step boundary (G8)
    multitask_strategy: Literal["reject", "enqueue", "interrupt", "rollback"] = "enqueue"
    max_queued: int = 100  # queued turns one lane may hold
    max_queued_per_tenant: int = 1000  # queued background responses one tenant may have
    max_pending_steers: int = 16  # steers (response.steer) one response may have waiting
    retention: float = 30 * 86400.0  # seconds finished responses and their data are kept
    purge_interval: float = 3600.0  # seconds between retention purges
    chore_retry_max: float = 10.0  # longest pause of a chore retrying a failed store
