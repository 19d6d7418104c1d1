"""The schema as one list of migrations, numbered alike for SQLite and PostgreSQL: a database at
version n runs migrations n.. in order (SQLite keeps n in ``PRAGMA user_version``, PostgreSQL in the
``flexamem_migrations`` table). Each migration says what it does in both dialects; PostgreSQL's text is
empty where its first migration already holds the change (it started at what SQLite's third has).

Never edit a shipped migration; append a new one. Where a shipped migration alone gets the data of an
older database wrong, a corrective step (``SQLITE_CORRECTIONS``) runs just before it, only for
databases written at a version before it: schemas 1 and 2 named agent sessions ``agent:<id>`` whatever
history started them, and migrations 3 and 6 filed them all under the default history (issue 48; see
``_SQLITE_LEGACY_SESSIONS``). Stores written by every released schema are kept as upgrade fixtures
(``tests/fixtures/stores``, ``tests/store/test_upgrade.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

_IMMUTABLE = ("notes", "pieces", "links", "merged")
_PG_IMMUTABLE = ("notes", "pieces", "links", "merged", "steps", "piece_vectors")


@dataclass(frozen=True)
class Migration:
    purpose: str
    sqlite: str
    postgres: str


# the history an agent session stored before v6 belongs to: the longest conversation history whose
# name + "/agent:" starts its id, else the name before its first "/agent:" ("default" for "agent:...")
_PARENT_BACKFILL = """
    UPDATE histories SET parent = COALESCE(
        (SELECT h.id FROM histories AS h
            WHERE h.kind <> 'agent' AND substr(histories.id, 1, length(h.id) + 7) = h.id || '/agent:'
            ORDER BY length(h.id) DESC LIMIT 1),
        CASE WHEN substr(id, 1, 6) = 'agent:' THEN 'default'
             WHEN {strpos}(id, '/agent:') > 0 THEN substr(id, 1, {strpos}(id, '/agent:') - 1) END)
    WHERE kind = 'agent';
"""

_SQLITE: list[str] = [
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
    # 6: integrity to the last byte: each agent session names the history it belongs to (a drop deletes
    # exactly the history it names and its own sessions, never one whose name merely starts alike), and
    # merged records, steps and history rows carry digests (flexamem.digests; Memory.verify)
    """
    ALTER TABLE histories ADD COLUMN parent TEXT;
    ALTER TABLE histories ADD COLUMN digest TEXT;
    ALTER TABLE merged ADD COLUMN digest TEXT;
    ALTER TABLE steps ADD COLUMN digest TEXT;
    DROP TRIGGER histories_meta_fixed;
    """
    + _PARENT_BACKFILL.replace("{strpos}", "instr")
    + """
    CREATE TRIGGER histories_meta_fixed BEFORE UPDATE ON histories
        BEGIN SELECT RAISE(ABORT, 'flexamem: histories are write-once'); END;
    CREATE INDEX histories_by_parent ON histories (parent);
    """,
]
# Before migration 3, only on a store written by schema 1 or 2 (SQLite only: PostgreSQL's first schema is
# the shared v3). Schemas 1 and 2 named every agent session ``agent:<id>`` whatever history's memory
# started it (sessions were the store's, not a history's). Migration 3 scoped sessions by history
# (``<history>/agent:<id>``, ``agent:<id>`` under the default history) and migration 6 names each one's
# parent from that form, so every older session fell under the default history: the memory that started
# it no longer listed it, and resuming it from there failed with "no stored agent session" (issue 48).
# Which memory started a session was never stored. When the store holds exactly one conversation
# history and it is not the default one, that history's memory is taken to have started them (the only
# other candidate, the default memory, would then have written nothing of its own): each session moves
# under it, renamed ``<history>/agent:<id>`` in every table (rows moved, not changed; the write-once
# triggers of schema 1 are dropped for the move and created again as they were), so migration 6 makes
# that history its parent. Otherwise (no conversation history, the default one, or several) nothing
# says which memory started them, and they stay under the default history, as before.
_SQLITE_LEGACY_SESSIONS = (
    """
    CREATE TEMP TABLE flexamem_moved AS
        SELECT a.id AS old, o.id || '/' || a.id AS new FROM histories AS a, histories AS o
        WHERE a.kind = 'agent' AND substr(a.id, 1, 6) = 'agent:' AND o.kind <> 'agent' AND o.id <> 'default'
            AND (SELECT count(*) FROM histories WHERE kind <> 'agent') = 1
            AND NOT EXISTS (SELECT 1 FROM histories AS t WHERE t.id = o.id || '/' || a.id);
    INSERT INTO histories (id, kind, meta, created_at)
        SELECT m.new, h.kind, h.meta, h.created_at FROM histories AS h JOIN flexamem_moved AS m ON m.old = h.id;
    """
    + "".join(f"DROP TRIGGER {t}_no_update;\n" for t in _IMMUTABLE)
    + "".join(
        f"""
    UPDATE {t} SET history_id = (SELECT new FROM flexamem_moved WHERE old = {t}.history_id)
        WHERE history_id IN (SELECT old FROM flexamem_moved);
    """
        for t in (*_IMMUTABLE, "piece_vectors", "llm_calls", "state")
    )
    + """
    DELETE FROM histories WHERE id IN (SELECT old FROM flexamem_moved);
    DROP TABLE temp.flexamem_moved;
    """
    + "".join(
        f"""
    CREATE TRIGGER {t}_no_update BEFORE UPDATE ON {t}
        BEGIN SELECT RAISE(ABORT, 'flexamem: {t} are write-once'); END;
    """
        for t in _IMMUTABLE
    )
)
# corrective steps: run just before migration index n, only on a database written at an older version
# (never on a new one); each says above why the migrations alone get such a database wrong
SQLITE_CORRECTIONS: dict[int, str] = {2: _SQLITE_LEGACY_SESSIONS}
_POSTGRES_FIRST = """
    CREATE TABLE histories (
        id TEXT PRIMARY KEY, kind TEXT NOT NULL, meta TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL
    );
    CREATE TABLE notes (
        history_id TEXT NOT NULL REFERENCES histories(id), seq INTEGER NOT NULL,
        unit_id TEXT NOT NULL, kind TEXT NOT NULL, session_id TEXT, date TEXT,
        step_first INTEGER, step_last INTEGER,
        raw TEXT NOT NULL, raw_tokens INTEGER NOT NULL,
        record TEXT NOT NULL, record_tokens INTEGER NOT NULL,
        fields TEXT NOT NULL, fields_tokens INTEGER NOT NULL,
        embedding BYTEA NOT NULL, blocks TEXT NOT NULL,
        writer TEXT NOT NULL, flagged INTEGER NOT NULL, created_at DOUBLE PRECISION NOT NULL,
        flag_reason TEXT,
        CONSTRAINT notes_seq PRIMARY KEY (history_id, seq),
        CONSTRAINT notes_unit UNIQUE (history_id, unit_id)
    );
    CREATE TABLE pieces (
        history_id TEXT NOT NULL, seq INTEGER NOT NULL, idx INTEGER NOT NULL,
        start INTEGER NOT NULL, "end" INTEGER NOT NULL, tokens INTEGER NOT NULL,
        label TEXT, label_tokens INTEGER NOT NULL, block INTEGER NOT NULL, source_id TEXT,
        PRIMARY KEY (history_id, seq, idx)
    );
    CREATE TABLE links (
        history_id TEXT NOT NULL, src INTEGER NOT NULL, dst INTEGER NOT NULL, id BIGSERIAL,
        PRIMARY KEY (history_id, src, dst)
    );
    CREATE TABLE merged (
        history_id TEXT NOT NULL, first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL,
        level INTEGER NOT NULL, text TEXT NOT NULL, tokens INTEGER NOT NULL, writer TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL, flagged INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (history_id, first_seq, last_seq, level)
    );
    CREATE TABLE piece_vectors (
        history_id TEXT NOT NULL, seq INTEGER NOT NULL, idx INTEGER NOT NULL, vector BYTEA NOT NULL,
        PRIMARY KEY (history_id, seq, idx)
    );
    CREATE TABLE llm_calls (
        id BIGSERIAL PRIMARY KEY, history_id TEXT NOT NULL, seq INTEGER, purpose TEXT NOT NULL,
        model TEXT NOT NULL, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
        cached INTEGER NOT NULL, created_at DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX llm_calls_by_note ON llm_calls (history_id, seq);
    CREATE TABLE state (
        history_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (history_id, key)
    );
    CREATE TABLE steps (
        history_id TEXT NOT NULL, n INTEGER NOT NULL, step_id TEXT, data TEXT NOT NULL,
        CONSTRAINT steps_n PRIMARY KEY (history_id, n), CONSTRAINT steps_id UNIQUE (history_id, step_id)
    );
    CREATE TABLE dropping (history_id TEXT PRIMARY KEY);
    CREATE FUNCTION flexamem_write_once() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'DELETE' AND EXISTS (
            SELECT 1 FROM dropping WHERE history_id = to_jsonb(OLD) ->> TG_ARGV[0]) THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION 'flexamem: % are write-once', TG_TABLE_NAME;
    END $$;
    """ + "".join(
    f"""
    CREATE TRIGGER {t}_write_once BEFORE UPDATE OR DELETE ON {t}
        FOR EACH ROW EXECUTE FUNCTION flexamem_write_once('{"id" if t == "histories" else "history_id"}');
    """
    for t in (*_PG_IMMUTABLE, "histories")
)

MIGRATIONS: list[Migration] = [
    Migration("the write-once store", _SQLITE[0], _POSTGRES_FIRST),
    Migration("the LLM writer: flag reasons, flagged merged records, accounting by note", _SQLITE[1], ""),
    Migration("agent steps in their own table, fixed history meta, whole-history deletion", _SQLITE[2], ""),
    Migration("each note's digest, chained (Memory.verify)", _SQLITE[3], "ALTER TABLE notes ADD COLUMN digest TEXT;"),
    Migration(
        "each history's epoch (a dropped history is known to its views); piece vectors write-once on SQLite",
        _SQLITE[4],
        "ALTER TABLE histories ADD COLUMN epoch TEXT;",
    ),
    Migration(
        "agent sessions name their history (exact drops); digests of merged records, steps and history rows",
        _SQLITE[5],
        """
    ALTER TABLE histories ADD COLUMN parent TEXT;
    ALTER TABLE histories ADD COLUMN digest TEXT;
    ALTER TABLE merged ADD COLUMN digest TEXT;
    ALTER TABLE steps ADD COLUMN digest TEXT;
    ALTER TABLE histories DISABLE TRIGGER histories_write_once;
    """
        + _PARENT_BACKFILL.replace("{strpos}", "strpos")
        + """
    ALTER TABLE histories ENABLE TRIGGER histories_write_once;
    CREATE INDEX histories_by_parent ON histories (parent);
    """,
    ),
]

# 7: a chain that notices what is missing (docs/RELIABILITY.md, "What verify() proves"). ``legacy`` keeps,
# per history upgraded here, how much of it was written before its rows carried digests (only those rows
# may lack one: a digest removed later is reported); the idempotency map moves from ``state`` to
# ``requests``, where each row is chained and bound to the notes it wrote; ``heads`` keeps each history's
# head (counts and last digests of its chains, its state), rewritten by every write, signed when the
# store has a key.
_LEGACY_FILL = """
    INSERT INTO legacy (history_id, notes, steps, merged, history_row, requests)
    SELECT h.id,
        COALESCE((SELECT MAX(seq) + 1 FROM notes WHERE history_id = h.id AND digest IS NULL), 0),
        COALESCE((SELECT MAX(n) + 1 FROM steps WHERE history_id = h.id AND digest IS NULL), 0),
        (SELECT COUNT(*) FROM merged WHERE history_id = h.id AND digest IS NULL),
        CASE WHEN h.digest IS NULL THEN 1 ELSE 0 END,
        (SELECT COUNT(*) FROM state WHERE history_id = h.id AND key LIKE 'request:%')
    FROM histories AS h;
    INSERT INTO requests (history_id, n, request_id, units)
    SELECT history_id, ROW_NUMBER() OVER (PARTITION BY history_id ORDER BY key) - 1, substr(key, 9), value
    FROM state WHERE key LIKE 'request:%';
    DELETE FROM state WHERE key LIKE 'request:%';
"""
_CHAIN_TABLES = """
    CREATE TABLE legacy (
        history_id TEXT PRIMARY KEY, notes INTEGER NOT NULL, steps INTEGER NOT NULL, merged INTEGER NOT NULL,
        history_row INTEGER NOT NULL, requests INTEGER NOT NULL
    );
    CREATE TABLE requests (
        history_id TEXT NOT NULL, n INTEGER NOT NULL, request_id TEXT NOT NULL, units TEXT NOT NULL,
        body TEXT, digest TEXT, PRIMARY KEY (history_id, n), UNIQUE (history_id, request_id)
    );
    CREATE TABLE heads (history_id TEXT PRIMARY KEY, head TEXT NOT NULL, signature TEXT);
"""
MIGRATIONS.append(
    Migration(
        "a chain that notices what is missing: legacy rows named, requests chained, heads kept",
        _CHAIN_TABLES
        + _LEGACY_FILL
        + """
    CREATE TRIGGER legacy_no_insert BEFORE INSERT ON legacy
        BEGIN SELECT RAISE(ABORT, 'flexamem: legacy is written once, by the migration'); END;
    CREATE TRIGGER legacy_no_update BEFORE UPDATE ON legacy
        BEGIN SELECT RAISE(ABORT, 'flexamem: legacy is write-once'); END;
    CREATE TRIGGER legacy_no_delete BEFORE DELETE ON legacy
        WHEN NOT EXISTS (SELECT 1 FROM dropping WHERE history_id = OLD.history_id)
        BEGIN SELECT RAISE(ABORT, 'flexamem: legacy is write-once'); END;
    CREATE TRIGGER requests_no_update BEFORE UPDATE ON requests
        BEGIN SELECT RAISE(ABORT, 'flexamem: requests are write-once'); END;
    CREATE TRIGGER requests_no_delete BEFORE DELETE ON requests
        WHEN NOT EXISTS (SELECT 1 FROM dropping WHERE history_id = OLD.history_id)
        BEGIN SELECT RAISE(ABORT, 'flexamem: requests are write-once'); END;
    """,
        _CHAIN_TABLES
        + _LEGACY_FILL
        + """
    CREATE TRIGGER legacy_write_once BEFORE INSERT OR UPDATE OR DELETE ON legacy
        FOR EACH ROW EXECUTE FUNCTION flexamem_write_once('history_id');
    CREATE TRIGGER requests_write_once BEFORE UPDATE OR DELETE ON requests
        FOR EACH ROW EXECUTE FUNCTION flexamem_write_once('history_id');
    """,
    )
)

# 8: erasure (docs/RELIABILITY.md, "Erasing what a person asks"). Notes and steps get a random salt that
# their digest covers (v3), so the digest an erasure keeps gives nothing back; ``erasures`` keeps each
# erasure, chained; while a history is marked in ``erasing`` (inside one erasure's transaction) its
# notes' and steps' words may be rewritten (never their place: seq, unit id, digest) and their pieces,
# piece vectors and merged records deleted. Every other write stays refused, as before.
_ERASURES = """
    ALTER TABLE notes ADD COLUMN salt TEXT;
    ALTER TABLE steps ADD COLUMN salt TEXT;
    CREATE TABLE erasures (
        history_id TEXT NOT NULL, n INTEGER NOT NULL, kind TEXT NOT NULL, ids TEXT NOT NULL, reason TEXT NOT NULL,
        at {real} NOT NULL, notes TEXT NOT NULL, steps TEXT NOT NULL, digest TEXT NOT NULL,
        PRIMARY KEY (history_id, n)
    );
    CREATE TABLE erasing (history_id TEXT PRIMARY KEY);
"""
_SQLITE_ERASING = (
    _ERASURES.replace("{real}", "REAL")
    + "".join(
        f"""
    DROP TRIGGER {t}_no_update;
    CREATE TRIGGER {t}_no_update BEFORE UPDATE ON {t}
        WHEN NOT EXISTS (SELECT 1 FROM erasing WHERE history_id = OLD.history_id)
            OR NEW.history_id IS NOT OLD.history_id OR NEW.{n} IS NOT OLD.{n} OR NEW.digest IS NOT OLD.digest{more}
        BEGIN SELECT RAISE(ABORT, 'flexamem: {t} are write-once'); END;
    """
        for t, n, more in (("notes", "seq", " OR NEW.unit_id IS NOT OLD.unit_id"), ("steps", "n", ""))
    )
    + "".join(
        f"""
    DROP TRIGGER {t}_no_delete;
    CREATE TRIGGER {t}_no_delete BEFORE DELETE ON {t}
        WHEN NOT EXISTS (SELECT 1 FROM dropping WHERE history_id = OLD.history_id)
            AND NOT EXISTS (SELECT 1 FROM erasing WHERE history_id = OLD.history_id)
        BEGIN SELECT RAISE(ABORT, 'flexamem: {t} are write-once'); END;
    """
        for t in ("pieces", "piece_vectors", "merged")
    )
    + """
    CREATE TRIGGER erasures_no_update BEFORE UPDATE ON erasures
        BEGIN SELECT RAISE(ABORT, 'flexamem: erasures are write-once'); END;
    CREATE TRIGGER erasures_no_delete BEFORE DELETE ON erasures
        WHEN NOT EXISTS (SELECT 1 FROM dropping WHERE history_id = OLD.history_id)
        BEGIN SELECT RAISE(ABORT, 'flexamem: erasures are write-once'); END;
    """
)
_POSTGRES_ERASING = (
    _ERASURES.replace("{real}", "DOUBLE PRECISION")
    + """
    CREATE FUNCTION flexamem_erasable() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF EXISTS (SELECT 1 FROM erasing WHERE history_id = OLD.history_id) THEN
            IF TG_OP = 'DELETE' AND TG_TABLE_NAME IN ('pieces', 'piece_vectors', 'merged') THEN
                RETURN OLD;
            END IF;
            IF TG_OP = 'UPDATE' AND TG_TABLE_NAME = 'notes' THEN
                IF NEW.history_id = OLD.history_id AND NEW.seq = OLD.seq AND NEW.unit_id = OLD.unit_id
                    AND NEW.digest IS NOT DISTINCT FROM OLD.digest THEN
                    RETURN NEW;
                END IF;
            ELSIF TG_OP = 'UPDATE' AND TG_TABLE_NAME = 'steps' THEN
                IF NEW.history_id = OLD.history_id AND NEW.n = OLD.n
                    AND NEW.digest IS NOT DISTINCT FROM OLD.digest THEN
                    RETURN NEW;
                END IF;
            END IF;
        END IF;
        IF TG_OP = 'DELETE' AND EXISTS (
            SELECT 1 FROM dropping WHERE history_id = to_jsonb(OLD) ->> TG_ARGV[0]) THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION 'flexamem: % are write-once', TG_TABLE_NAME;
    END $$;
    """
    + "".join(
        f"""
    DROP TRIGGER {t}_write_once ON {t};
    CREATE TRIGGER {t}_write_once BEFORE UPDATE OR DELETE ON {t}
        FOR EACH ROW EXECUTE FUNCTION flexamem_erasable('history_id');
    """
        for t in ("notes", "steps", "pieces", "piece_vectors", "merged")
    )
    + """
    CREATE TRIGGER erasures_write_once BEFORE UPDATE OR DELETE ON erasures
        FOR EACH ROW EXECUTE FUNCTION flexamem_write_once('history_id');
    """
)
MIGRATIONS.append(
    Migration(
        "erasure: salted digests, an erasures chain, words rewritten only inside one",
        _SQLITE_ERASING,
        _POSTGRES_ERASING,
    )
)
# 9: a history's load kept (flexamem.recover.load_cache): derived from its notes, replaced when a later
# load covers more, deleted with the history and by every erasure; not write-once, not in any digest.
_LOAD_CACHE = """
    CREATE TABLE load_cache (
        history_id TEXT PRIMARY KEY, epoch TEXT NOT NULL, erasures INTEGER NOT NULL, notes INTEGER NOT NULL,
        digest TEXT NOT NULL, version INTEGER NOT NULL, data {blob} NOT NULL
    );
"""
MIGRATIONS.append(
    Migration(
        "a history's load kept (the words of its pieces counted), so an open reads it",
        _LOAD_CACHE.replace("{blob}", "BLOB"),
        _LOAD_CACHE.replace("{blob}", "BYTEA"),
    )
)
# 10: a request row's body digest salted (docs/RELIABILITY.md, "Request ids"): ``requests.salt`` is a
# random salt its ``body`` covers (flexamem.digests.salted_body; rows written before keep NULL and the
# bare digest). While a history is marked in ``erasing``, a request row may change only its salt, and
# only to 'erased' (an erasure rewrote a note its write stored): the kept body digest then tests no
# guess, and a replay of the id is refused whatever its body. The chain digest covers ``body``, never
# the salt, so it holds after that.
_REQUEST_SALT = "ALTER TABLE requests ADD COLUMN salt TEXT;"
_SQLITE_REQUEST_SALT = (
    _REQUEST_SALT
    + """
    DROP TRIGGER requests_no_update;
    CREATE TRIGGER requests_no_update BEFORE UPDATE ON requests
        WHEN NOT EXISTS (SELECT 1 FROM erasing WHERE history_id = OLD.history_id)
            OR NEW.history_id IS NOT OLD.history_id OR NEW.n IS NOT OLD.n OR NEW.request_id IS NOT OLD.request_id
            OR NEW.units IS NOT OLD.units OR NEW.body IS NOT OLD.body OR NEW.digest IS NOT OLD.digest
            OR NEW.salt IS NOT 'erased'
        BEGIN SELECT RAISE(ABORT, 'flexamem: requests are write-once'); END;
    """
)
_POSTGRES_REQUEST_SALT = (
    _REQUEST_SALT
    + """
    CREATE OR REPLACE FUNCTION flexamem_erasable() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF EXISTS (SELECT 1 FROM erasing WHERE history_id = OLD.history_id) THEN
            IF TG_OP = 'DELETE' AND TG_TABLE_NAME IN ('pieces', 'piece_vectors', 'merged') THEN
                RETURN OLD;
            END IF;
            IF TG_OP = 'UPDATE' AND TG_TABLE_NAME = 'notes' THEN
                IF NEW.history_id = OLD.history_id AND NEW.seq = OLD.seq AND NEW.unit_id = OLD.unit_id
                    AND NEW.digest IS NOT DISTINCT FROM OLD.digest THEN
                    RETURN NEW;
                END IF;
            ELSIF TG_OP = 'UPDATE' AND TG_TABLE_NAME = 'steps' THEN
                IF NEW.history_id = OLD.history_id AND NEW.n = OLD.n
                    AND NEW.digest IS NOT DISTINCT FROM OLD.digest THEN
                    RETURN NEW;
                END IF;
            ELSIF TG_OP = 'UPDATE' AND TG_TABLE_NAME = 'requests' THEN
                IF NEW.history_id = OLD.history_id AND NEW.n = OLD.n AND NEW.request_id = OLD.request_id
                    AND NEW.units = OLD.units AND NEW.body IS NOT DISTINCT FROM OLD.body
                    AND NEW.digest IS NOT DISTINCT FROM OLD.digest AND NEW.salt = 'erased' THEN
                    RETURN NEW;
                END IF;
            END IF;
        END IF;
        IF TG_OP = 'DELETE' AND EXISTS (
            SELECT 1 FROM dropping WHERE history_id = to_jsonb(OLD) ->> TG_ARGV[0]) THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION 'flexamem: % are write-once', TG_TABLE_NAME;
    END $$;
    DROP TRIGGER requests_write_once ON requests;
    CREATE TRIGGER requests_write_once BEFORE UPDATE OR DELETE ON requests
        FOR EACH ROW EXECUTE FUNCTION flexamem_erasable('history_id');
    """
)
MIGRATIONS.append(
    Migration(
        "request bodies salted; an erasure of a write's words erases its request's salt",
        _SQLITE_REQUEST_SALT,
        _POSTGRES_REQUEST_SALT,
    )
)
SCHEMA_VERSION = len(MIGRATIONS)
LEGACY_POSTGRES = {1: 3, 2: 4, 3: 5}  # PostgreSQL's own numbering before the shared list -> the shared one
