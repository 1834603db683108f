"""How long a failed model call waits before it is tried again (G6): the model's own
`retry_after` when it gave one, else exponential backoff with jitter, up to
`model_retries` retries of one call. A model step and a compaction's summary share it."""

from __future__ import annotations

import random

from ._errors import ModelError
from ._settings import RuntimeSettings


def retry_delay(settings: RuntimeSettings, error: ModelError, attempt: int) -> float | None:
    """Seconds to wait before retry `attempt` (1, 2, ...) of a call that failed with
    `error`; None when it is not retried (not retryable, or past `model_retries`)."""
    if not error.retryable or attempt > settings.model_retries:
        return None
    if error.retry_after is not None:
        return error.retry_after
    delay: float = min(settings.retry_max_delay, settings.retry_base_delay * 2 ** (attempt - 1))
    return delay * random.uniform(0.5, 1.0)
