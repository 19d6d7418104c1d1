"""The memory inspector: one rendering drawn as people would rather read it (served at ``/inspect/...``).

A budget bar (the fixed prompt, each part of the memory, the room left, the 5% margin), the timeline
with every unit coloured by how it appears (raw, excerpt, record, merged, only some pieces, hidden), the
verbatim pieces
with their BM25 scores, and the links between units. Plain HTML and CSS, no script, escaped text.
"""

from __future__ import annotations

from html import escape

from flexamem.budget import ceiling as budget_ceiling
from flexamem.memory import Memory
from flexamem.text import query_terms, stemmed

COLOURS = {
    "prompt": "#6b7280",
    "records": "#60a5fa",
    "merged": "#a78bfa",
    "raw": "#34d399",
    "excerpts": "#fbbf24",
    "pieces": "#f472b6",
    "other": "#94a3b8",
    "free": "#e5e7eb",
    "margin": "#fca5a5",
}
RESOLUTION_COLOURS = {
    "raw": "#34d399",
    "excerpt": "#fbbf24",
    "pieces": "#f472b6",
    "record": "#60a5fa",
    "merged": "#a78bfa",
    "hidden": "#d1d5db",
}

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #111827; max-width: 1100px; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 24px 0 8px; }
.meta { color: #4b5563; }
#budget-bar { display: flex; height: 28px; border: 1px solid #9ca3af; border-radius: 4px; overflow: hidden; }
#budget-bar .part { height: 100%; min-width: 2px; }
.legend span { display: inline-block; margin-right: 14px; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 4px;
  vertical-align: -1px; }
#timeline { display: flex; flex-wrap: wrap; gap: 4px; }
#timeline .unit { padding: 4px 6px; border-radius: 4px; font-size: 12px; min-width: 34px; text-align: center; }
table { border-collapse: collapse; width: 100%; }
td, th { border-bottom: 1px solid #e5e7eb; padding: 4px 6px; vertical-align: top; text-align: left; }
td.score { font-variant-numeric: tabular-nums; white-space: nowrap; }
pre { white-space: pre-wrap; background: #f9fafb; padding: 8px; border-radius: 4px; }
"""


def _swatch(colour: str) -> str:
    return f'<span class="swatch" style="background:{colour}"></span>'


def inspector_page(mem: Memory, history: str, query: str, budget: int, mode: str) -> str:
    """The HTML page of ``mem.render(query, budget, mode=mode)``."""
    r = mem.render(query, budget, mode=mode)
    ceiling = budget_ceiling(budget)
    prompt = ceiling - r.allowance
    parts = [("prompt", prompt)] + [(k, v) for k, v in r.composition.items() if v > 0]
    used = prompt + sum(v for k, v in r.composition.items())
    parts += [("free", max(ceiling - used, 0)), ("margin", budget - ceiling)]
    bar = "".join(
        f'<div class="part" data-part="{escape(k)}" title="{escape(k)}: {v} tokens" '
        f'style="width:{100 * v / budget:.3f}%;background:{COLOURS.get(k, "#94a3b8")}"></div>'
        for k, v in parts
        if v > 0
    )
    legend = "".join(f"<span>{_swatch(COLOURS.get(k, '#94a3b8'))}{escape(k)} {v}</span>" for k, v in parts if v > 0)

    notes = mem.notes()
    units = []
    for v in r.shown:
        note = notes[v.seq]
        shown_as = "pieces" if v.resolution == "hidden" and v.pieces else v.resolution  # off the timeline, pieces in
        title = f"{note.unit_id} · {note.date or note.kind} · {shown_as}: {note.record}"
        units.append(
            f'<div class="unit" data-resolution="{shown_as}" title="{escape(title)}" '
            f'style="background:{RESOLUTION_COLOURS[shown_as]}">{escape(note.label)}</div>'
        )
    res_legend = "".join(f"<span>{_swatch(c)}{k}</span>" for k, c in RESOLUTION_COLOURS.items())

    terms = query_terms(query)
    index = mem.history.stem_index if mode == "auto" else mem.history.index
    terms = stemmed(terms) if mode == "auto" else terms
    rows = []
    for v in r.shown:
        if not v.pieces or v.resolution in ("record", "merged"):
            continue
        note = notes[v.seq]
        docs = [mem.history.doc_of[v.seq] + i for i in v.pieces]
        scores = index.score_docs(terms, docs)
        for i, score in zip(v.pieces, scores, strict=True):
            piece = note.pieces[i]
            rows.append((float(score), note.label, i, piece.text))
    rows.sort(key=lambda row: -row[0])
    piece_rows = "".join(
        f'<tr class="piece"><td class="score">{score:.2f}</td><td>{escape(label)}#{i}</td><td>{escape(text)}</td></tr>'
        for score, label, i, text in rows
    )
    shown_seqs = {v.seq for v in r.shown if v.resolution != "hidden"}
    links = "".join(
        f'<li class="link">{escape(notes[s].label)} → {", ".join(escape(notes[b].label) for b in notes[s].links)}</li>'
        for s in sorted(shown_seqs)
        if notes[s].links
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>FlexA-Mem inspector · {escape(history)}</title>
<style>{STYLE}</style></head><body>
<h1>FlexA-Mem inspector</h1>
<p class="meta">history <b>{escape(history)}</b> · query <b>{escape(query)}</b> · budget {budget} tokens ·
mode {escape(r.mode)}{" (whole history fits: pass-through)" if r.pass_through else ""} ·
{len(notes)} units</p>
<h2>Budget</h2>
<div id="budget-bar">{bar}</div>
<p class="legend">{legend}</p>
<h2>Timeline</h2>
<p class="legend">{res_legend}</p>
<div id="timeline">{"".join(units)}</div>
<h2>Pieces recovered verbatim</h2>
<table id="pieces"><thead><tr><th>BM25</th><th>piece</th><th>text</th></tr></thead>
<tbody>{piece_rows or '<tr><td colspan="3">no pieces shown</td></tr>'}</tbody></table>
<h2>Links</h2>
<ul id="links">{links or "<li>no links among the shown units</li>"}</ul>
<h2>Rendered text ({r.tokens} tokens)</h2>
<pre id="rendered">{escape(r.text)}</pre>
</body></html>
"""
