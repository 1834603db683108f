"""Named crash points (docs/guarantees.md), in the style of fail-rs: inert unless the
environment variable DURABLE_RESPONSES_FAILPOINT names one, as `name` or `name:N`; then
the process exits at once (`os._exit`, no clean-up) the Nth time it reaches that point.
Each point is used at exactly one call site."""

from __future__ import annotations

import os

ACCEPTED = "accepted"  # create committed, run not started
MODEL_STREAM = "model_stream"  # in the middle of a model stream, after some events
STEP_STREAMED = "step_streamed"  # a step's stream ended with calls, not yet recorded
ANSWER_STREAMED = "answer_streamed"  # the last step's answer streamed, its close and end not
STEP_RECORDED = "step_recorded"  # step record committed, no tool claimed yet
TOOL_CLAIMED = "tool_claimed"  # journal claim committed, tool body not started
TOOL_EFFECT = "tool_effect"  # tool body returned (effect done), result not recorded
TOOL_RECORDED = "tool_recorded"  # tool result committed, checkpoint not yet written
CHECKPOINT = "checkpoint"  # checkpoint committed, next model call not started
COMPACTED = "compacted"  # a compaction committed, the step's model call not started
TERMINAL = "terminal"  # terminal status committed, last events not yet delivered
STEER_COMMITTED = "steer_committed"  # a response.steer committed, not yet acknowledged
STEER_SETTLING = "steer_settling"  # a steered response ended, its successor not committed

ALL = (
    ACCEPTED,
    MODEL_STREAM,
    STEP_STREAMED,
    ANSWER_STREAMED,
    STEP_RECORDED,
    TOOL_CLAIMED,
    TOOL_EFFECT,
    TOOL_RECORDED,
    CHECKPOINT,
    COMPACTED,
    TERMINAL,
    STEER_COMMITTED,
    STEER_SETTLING,
)

ENV = "DURABLE_RESPONSES_FAILPOINT"
EXIT_CODE = 86  # distinguishable from a signal or an error exit in crash tests


def _armed() -> tuple[str | None, int]:
    name, _, count = os.environ.get(ENV, "").partition(":")
    if not name:
        return None, 0
    if name not in ALL:
        raise ValueError(f"{ENV}={name!r} names no failpoint; known: {', '.join(ALL)}")
    return name, int(count or 1)


_name, _remaining = _armed()


def armed(name: str) -> bool:
    """Whether `name` is the armed point (to reach its worst moment first)."""
    return name == _name


def failpoint(name: str) -> None:
    """Exit the process here if this point is armed (and its count is reached)."""
    global _remaining
    if name != _name:
        return
    _remaining -= 1
    if _remaining <= 0:
        os._exit(EXIT_CODE)
