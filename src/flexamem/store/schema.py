"""The SQLite schema as a list of migrations: a database at ``user_version`` n runs migrations n.. in order.

Never edit a shipped migration; append a new one.
"""

from __future__ import annotations

_IMMUTABLE = ("notes", "pieces", "links", "merged")

MIGRATIONS: list[str] = [
    # 1: the write-once store
    """
    CREATE TABLE histories (
        id TEXT PRIMARY KEY, kind TEXT NOT NULL, meta TEXT NOT NULL, created_at REAL NOT NULL
    );
    CREATE TABLE notes (
        history_id TEXT NOT NULL REFERENCES histories(id), seq INTEGER NOT NULL,
        unit_id TEXT NOT NULL, kind TEXT NOT NULL, session_id TEXT, date TEXT,
        step_first INTEGER, step_last INTEGER,
        raw TEXT NOT NULL, raw_tokens INTEGER NOT NULL,
        record TEXT NOT NULL, record_tokens INTEGER NOT NULL,
        fields TEXT NOT NULL, fields_tokens INTEGER NOT NULL,
        embedding BLOB NOT NULL, blocks TEXT NOT NULL,
        writer TEXT NOT NULL, flagged INTEGER NOT NULL, created_at REAL NOT NULL,
        PRIMARY KEY (history_id, seq), UNIQUE (history_id, unit_id)
    );
    CREATE TABLE pieces (
        history_id TEXT NOT NULL, seq INTEGER NOT NULL, idx INTEGER NOT NULL,
        start INTEGER NOT NULL, "end" INTEGER NOT NULL, tokens INTEGER NOT NULL,
        label TEXT, label_tokens INTEGER NOT NULL, block INTEGER NOT NULL, source_id TEXT,
        PRIMARY KEY (history_id, seq, idx)
    );
    CREATE TABLE links (
        history_id TEXT NOT NULL, src INTEGER NOT NULL, dst INTEGER NOT NULL,
        PRIMARY KEY (history_id, src, dst)
    );
    CREATE TABLE merged (
        history_id TEXT NOT NULL, first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL,
        level INTEGER NOT NULL, text TEXT NOT NULL, tokens INTEGER NOT NULL, writer TEXT NOT NULL,
        created_at REAL NOT NULL, PRIMARY KEY (history_id, first_seq, last_seq, level)
    );
    CREATE TABLE piece_vectors (
        history_id TEXT NOT NULL, seq INTEGER NOT NULL, idx INTEGER NOT NULL, vector BLOB NOT NULL,
        PRIMARY KEY (history_id, seq, idx)
    );
    CREATE TABLE llm_calls (
        id INTEGER PRIMARY KEY, history_id TEXT NOT NULL, seq INTEGER, purpose TEXT NOT NULL,
        model TEXT NOT NULL, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
        cached INTEGER NOT NULL, created_at REAL NOT NULL
    );
    CREATE TABLE state (
        history_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
        PRIMARY KEY (history_id, key)
    );
    """
    + "".join(
        f"""
    CREATE TRIGGER {t}_no_update BEFORE UPDATE ON {t}
        BEGIN SELECT RAISE(ABORT, 'flexamem: {t} are write-once'); END;
    CREATE TRIGGER {t}_no_delete BEFORE DELETE ON {t}
        BEGIN SELECT RAISE(ABORT, 'flexamem: {t} are write-once'); END;
    """
        for t in _IMMUTABLE
    ),
    # 2: the LLM writer: why a note was flagged, flagged merged records, accounting by note
    """
    ALTER TABLE notes ADD COLUMN flag_reason TEXT;
    ALTER TABLE merged ADD COLUMN flagged INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX llm_calls_by_note ON llm_calls (history_id, seq);
    """,
    # 3: agent steps write-once in their own table (idempotent by the caller's step id), history meta
    # fixed once written, and deletion only of a whole history marked in ``dropping`` (drop_history)
    """
    CREATE TABLE steps (
        history_id TEXT NOT NULL, n INTEGER NOT NULL, step_id TEXT, data TEXT NOT NULL,
        PRIMARY KEY (history_id, n), UNIQUE (history_id, step_id)
    );
    INSERT INTO steps (history_id, n, data)
        SELECT history_id, CAST(substr(key, 6) AS INTEGER), value FROM state WHERE key LIKE 'step:%';
    DELETE FROM state WHERE key LIKE 'step:%' OR key = 'steps';
    CREATE TABLE dropping (history_id TEXT PRIMARY KEY);
    CREATE TRIGGER histories_meta_fixed BEFORE UPDATE ON histories
        BEGIN SELECT RAISE(ABORT, 'flexamem: histories are write-once'); END;
    CREATE TRIGGER steps_no_update BEFORE UPDATE ON steps
        BEGIN SELECT RAISE(ABORT, 'flexamem: steps are write-once'); END;
    """
    + "".join(
        f"""
    DROP TRIGGER IF EXISTS {t}_no_delete;
    CREATE TRIGGER {t}_no_delete BEFORE DELETE ON {t}
        WHEN NOT EXISTS (SELECT 1 FROM dropping WHERE history_id = OLD.history_id)
        BEGIN SELECT RAISE(ABORT, 'flexamem: {t} are write-once'); END;
    """
        for t in (*_IMMUTABLE, "steps")
    )
    + """
    CREATE TRIGGER histories_no_delete BEFORE DELETE ON histories
        WHEN NOT EXISTS (SELECT 1 FROM dropping WHERE history_id = OLD.id)
        BEGIN SELECT RAISE(ABORT, 'flexamem: histories are write-once'); END;
    """,
    # 4: each note's digest, chained over the notes before it (Memory.verify)
    "ALTER TABLE notes ADD COLUMN digest TEXT;",
    # 5: each history's epoch (a random id given when the history row is created: a view that read
    # another epoch knows the history was dropped since), and piece vectors write-once like the rest
    """
    ALTER TABLE histories ADD COLUMN epoch TEXT;
    CREATE TRIGGER piece_vectors_no_update BEFORE UPDATE ON piece_vectors
        BEGIN SELECT RAISE(ABORT, 'flexamem: piece_vectors are write-once'); END;
    CREATE TRIGGER piece_vectors_no_delete BEFORE DELETE ON piece_vectors
        WHEN NOT EXISTS (SELECT 1 FROM dropping WHERE history_id = OLD.history_id)
        BEGIN SELECT RAISE(ABORT, 'flexamem: piece_vectors are write-once'); END;
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)
