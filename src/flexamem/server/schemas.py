"""The request and response bodies of the HTTP routes (pydantic models: the OpenAPI document's schemas).

Each response model mirrors what the library already gives as JSON: ``rendering_json`` (``RenderOut``),
``render.result.Hit`` (``HitOut``), ``notes.note_json`` (``NoteOut``, ``NoteFull``), ``Head.as_json``
(``HeadOut``), ``Erasure.as_json`` (``ErasureOut``). Request models forbid unknown fields (``Strict``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from flexamem.budget import MAX_BUDGET
from flexamem.chat import depth_problem

HISTORY = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
SESSION = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
MAX_QUERY = 1000  # characters of an inspector link's query: the link stays within the head limit
Mode = Literal["auto", "pieces", "units"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def shallow(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Free-form chat messages refused (422) when one nests deeper than ``flexamem.chat.MAX_DEPTH``
    levels, before anything walks them (checked without recursion)."""
    for i, m in enumerate(messages):
        problem = depth_problem(m)
        if problem:
            raise ValueError(f"message {i} {problem}")
    return messages


ChatMessages = Annotated[list[dict[str, Any]], AfterValidator(shallow)]


class Turn(Strict):
    speaker: str = Field(min_length=1, max_length=200)
    text: str = Field(min_length=1)
    id: str | None = Field(default=None, max_length=200)
    role: str | None = Field(default=None, max_length=40)


class SessionIn(Strict):
    turns: list[Turn] = Field(min_length=1)
    session_id: str | None = Field(default=None, max_length=200)
    date: str | None = Field(default=None, max_length=100)


class MessagesIn(Strict):
    messages: ChatMessages = Field(min_length=1, description="OpenAI chat messages")
    session_id: str | None = Field(default=None, max_length=200)
    date: str | None = Field(default=None, max_length=100)


class BatchIn(Strict):
    sessions: list[SessionIn] = Field(min_length=1)


class Units(BaseModel):
    history: str
    units: list[str]


class Batch(BaseModel):
    history: str
    sessions: list[list[str]]


class RenderIn(Strict):
    query: str = Field(min_length=1)
    budget: int = Field(
        ge=1, le=MAX_BUDGET, strict=True, description="tokens of the whole context (memory gets 0.95 x budget)"
    )
    mode: Mode | None = Field(default=None, description="default: the profile's (auto)")
    prompt: str = ""
    order: list[str] | None = Field(default=None, description="unit ids or labels, most relevant first (units)")
    profile: str | None = Field(
        default=None, max_length=100, description="a named profile (flexamem.profiles); default: the server's"
    )


class SearchIn(Strict):
    query: str = Field(min_length=1)
    mode: Literal["auto", "pieces"] = "auto"
    limit: int = Field(default=10, ge=1, le=1000)


class HitOut(BaseModel):
    seq: int
    unit_id: str
    block: int
    turn_id: str | None
    text: str


class Shown(BaseModel):
    unit_id: str
    label: str
    resolution: str
    pieces: list[int]
    verbatim_turns: list[str] = []


class RenderOut(BaseModel):
    text: str
    tokens: int
    allowance: int
    mode: str
    pass_through: bool
    composition: dict[str, int]
    shown: list[Shown]
    merges_written: int = 0
    timeline_spans: list[tuple[int, int, int]] = []
    profile: str | None = None
    overrides: dict[str, Any] = {}


class HistoryOut(BaseModel):
    history: str
    kind: str
    notes: int


class NoteOut(BaseModel):
    unit_id: str
    label: str
    kind: str
    session_id: str | None
    date: str | None
    record: str
    keywords: list[str]
    raw_tokens: int
    record_tokens: int
    pieces: int  # how many (NoteFull: each one)
    links: list[str]
    writer: str


class PieceOut(BaseModel):
    index: int
    text: str
    tokens: int
    turn: str | None


class NoteFull(NoteOut):
    raw: str
    fields: str
    pieces: list[PieceOut]  # type: ignore[assignment]  # the notes list counts them; a whole note lists them
    digest: str
    exact: dict[str, Any] = Field(
        description="every field of the note but its raw text (above) and its pieces' texts (slices of it): "
        "flexamem.notes.note_from_json(exact, raw) reads it"
    )


class AgentIn(Strict):
    task: str = Field(min_length=1)
    budget: int = Field(ge=1, le=MAX_BUDGET, strict=True)
    system: str = ""
    session_id: str | None = Field(default=None, pattern=SESSION)


class AgentOut(BaseModel):
    session_id: str
    steps: int
    messages: int = Field(description="chat messages recorded by the steps so far")
    task: str
    system: str
    budget: int


class StepIn(Strict):
    action: str = Field(min_length=1)
    observation: str = ""
    messages: ChatMessages | None = None
    step_id: str | None = Field(default=None, max_length=200)
    actor: str = Field(default="assistant", min_length=1, max_length=40)


class StepOut(BaseModel):
    step: int
    messages: int = Field(description="chat messages recorded by the session's steps so far")


class ContextOut(BaseModel):
    messages: list[dict[str, Any]]
    tokens: int
    ceiling: int
    memory_active: bool
    cut: bool = False
    notes: int = 0


class VerifyOut(BaseModel):
    history: str
    problems: list[str]


class HeadOut(BaseModel):
    """A history's head (``Memory.head()``): each chain's length and last digest, its state's digest."""

    history: str
    epoch: str
    notes: int
    note: str
    steps: int
    step: str
    requests: int
    request: str
    state: str
    legacy: list[int] | None
    digest: str
    signature: str | None
    erasures: int = 0
    erasure: str = ""
    version: int = 1  # 2: it covers the history row (row) and the merged records (merges, merge) too
    row: str = ""
    merges: int = 0
    merge: str = ""


class EraseIn(Strict):
    """What to erase: one ``turn`` (its id, or ``unit#n``), one ``session``, or step ``step`` of agent
    session ``agent``; why (``reason``, kept in the chain: never the words themselves); whether renders
    show ``(erased)`` where the words were."""

    turn: str | None = Field(default=None, min_length=1, max_length=300)
    session: str | None = Field(default=None, min_length=1, max_length=300)
    agent: str | None = Field(default=None, min_length=1, max_length=300)
    step: int | None = Field(default=None, ge=1)
    reason: str = Field(default="", max_length=2000)
    marker: bool = True


class ErasureOut(BaseModel):
    """One erasure as the chain keeps it (``Memory.erasures()``)."""

    n: int
    kind: str
    ids: list[str]
    reason: str
    at: float
    units: list[str]
    steps: list[int]
    digest: str


class HeadsIn(BaseModel):
    heads: list[dict[str, Any]] = Field(max_length=1000)


class Dropped(BaseModel):
    history: str
    dropped: bool


class LinkIn(Strict):
    query: str = Field(min_length=1, max_length=MAX_QUERY)
    budget: int = Field(default=4096, ge=1, le=MAX_BUDGET)
    mode: Mode = "auto"
    seconds: int = Field(default=300, ge=10, le=3600, description="how long the link works")


class LinkOut(BaseModel):
    url: str = Field(description="the inspector page, relative to the server (no API key in it)")
    expires: int = Field(description="when the link stops working (Unix time)")


class ErrorBody(BaseModel):
    type: str = Field(description="the error's class (InvalidInputError, NotFoundError, StoreUnavailableError, ...)")
    message: str
    details: list[dict[str, str]] | None = None


class ErrorOut(BaseModel):
    error: ErrorBody
