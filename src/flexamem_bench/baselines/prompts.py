"""The baselines' prompts (our wording). The first line names the task, so the stand-in model can answer
each deterministically; real models read it as a heading."""

NOTE = """TASK: note
Write a memory note for the part of a conversation below. Answer with JSON only:
{{"keywords": [up to 8 words or phrases], "tags": [up to 5 short categories],
 "context": "one sentence on what it is about"}}

PART:
{raw}"""

LINKS = """TASK: links
A new memory note and earlier notes close to it. Which earlier notes concern the same people, events,
things or plans? Answer with JSON only: {{"links": [ids of the related notes]}}

NEW NOTE:
{note}

EARLIER NOTES:
{candidates}"""

EVOLVE = """TASK: evolve
A new memory note was linked to the earlier notes below. Rewrite each earlier note's tags and context in
the light of the new one, keeping what is still true. Answer with JSON only:
{{"updates": [{{"id": id, "tags": [...], "context": "..."}}]}}

NEW NOTE:
{note}

LINKED NOTES:
{linked}"""

SUMMARY = """TASK: summary
Update the running summary of a history with its next part. Keep names, numbers, dates, identifiers,
file paths and error messages exactly as written. At most {words} words. Answer with the summary only.

SUMMARY SO FAR:
{summary}

NEXT PART:
{raw}"""

IMPORTANCE = """TASK: importance
How important is this part of a history for questions asked later? Answer with one word: high, medium or low.

PART:
{raw}"""

COMPRESS = """TASK: compress
Compress this part of a history to about 100 tokens. Keep names, numbers, dates and identifiers exactly.
Answer with the compressed text only.

PART:
{raw}"""

GIST = """TASK: gist
Shorten this page of a long history to a gist of at most {words} words: who did or said what, and when.
Answer with the gist only.

PAGE {page}:
{raw}"""

PICK = """TASK: pick
Below are the gists of the pages of a long history, then a question. Which pages should be read in full
to answer it? Answer with JSON only: {{"pages": [page numbers]}} (at most {k}).

GISTS:
{gists}

QUESTION: {question}"""

SUMMARIZE = """TASK: summarize
Summarize this part of a history in at most 60 words and list its keywords. Answer with JSON only:
{{"summary": "...", "keywords": [up to 10 words or phrases]}}

PART:
{raw}"""

FILTER = """TASK: filter
Below are candidate parts of a long history, then a question. Which parts help to answer it? Answer
with JSON only: {{"keep": [ids]}}

CANDIDATES:
{candidates}

QUESTION: {question}"""

SCULPT = """TASK: sculpt
You manage the memory of a long history, shown below as fragments (ids u1, u2, ...): each is full,
summarized or folded to a one-line stub. The memory holds at most {budget} tokens. Use the tools to
make it serve the goal: restore fragments you need in full, fold or summarize those you do not, search
to find which fragments mention something. Call tools, or answer DONE when the memory is ready.

MEMORY:
{view}

DONE SO FAR:
{done}

GOAL: {goal}"""

FRAGMENT_SUMMARY = """TASK: fragment-summary
Summarize this fragment of a history in at most {words} words. Keep names, numbers, dates, identifiers,
file paths and error messages exactly. Answer with the summary only.

PART:
{raw}"""
