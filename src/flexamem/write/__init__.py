"""Writing: from turns and steps to immutable notes (units, pieces, records, embeddings, links)."""
