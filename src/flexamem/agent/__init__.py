"""Agent sessions: steps in, a budgeted chat context out (:class:`AgentSession`).

The session (:mod:`.session`) opens, records and erases steps and hands out contexts; its rooms:
:mod:`.window` (the one list of recorded steps, their units, the recent window), :mod:`.trace` (a
shell agent's command trace), :mod:`.query` (what memory is recovered against) and :mod:`.context`
(assembling the context within the ceiling, and the cuts when the newest unit alone does not fit).
"""

from flexamem.agent.context import MEMORY_HEADER, AgentContext
from flexamem.agent.session import AGENT_DEFAULT_MODE, AgentSession, check_resumed
from flexamem.agent.trace import TRACE_FIRST_LINE_TOKENS, TRACE_HEADER
from flexamem.agent.window import Recorded

__all__ = [
    "AGENT_DEFAULT_MODE",
    "MEMORY_HEADER",
    "TRACE_FIRST_LINE_TOKENS",
    "TRACE_HEADER",
    "AgentContext",
    "AgentSession",
    "Recorded",
    "check_resumed",
]
