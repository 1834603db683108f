"""An agent whose one tool raises an exception that nothing in the runtime handles (a
BaseException, as a bug might let escape), for the test that a runtime that stops for
good takes its process down with it (issue 12)."""

from __future__ import annotations

from recovery import Agent, tool


class Escaped(BaseException):
    """Stands for a bug: not an Exception, so no tool error handling catches it."""


@tool
async def escape() -> str:
    """Raises what the runtime cannot survive."""
    raise Escaped("a failure the runtime does not handle")


agent = Agent(tools=[escape])
