#!/usr/bin/env bash
# Start a throwaway PostgreSQL server for the store contract tests, on 127.0.0.1 only.
# Installs Debian's `postgresql` when missing (CI runs as root on a bare machine), creates a cluster in
# $FLEXAMEM_PG_DIR (default /tmp/flexamem-pg) with trust auth for local connections, starts it on
# $FLEXAMEM_PG_PORT (default 54329) and prints the URL to use (FLEXAMEM_TEST_POSTGRES).
# Idempotent: a running server is reused. `scripts/start_postgres.sh stop` stops it.
set -euo pipefail
DIR="${FLEXAMEM_PG_DIR:-/tmp/flexamem-pg}"
PORT="${FLEXAMEM_PG_PORT:-54329}"
URL="postgresql://flexamem@127.0.0.1:${PORT}/flexamem"

bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
if [ -z "$(bindir)" ]; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) >&2
  else
    echo "PostgreSQL is not installed (apt-get install postgresql)" >&2
    exit 1
  fi
fi
BIN="$(bindir)"
# the server refuses to run as root: run it as the `postgres` user the Debian package creates
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

if [ "${1:-}" = stop ]; then
  as_pg "$BIN/pg_ctl" -D "$DIR" -m fast stop >&2 || true
  exit 0
fi
if ! as_pg "$BIN/pg_ctl" -D "$DIR" status >/dev/null 2>&1; then
  if [ ! -f "$DIR/PG_VERSION" ]; then
    mkdir -p "$DIR"
    [ "$(id -u)" = 0 ] && chown postgres "$DIR"
    as_pg "$BIN/initdb" -D "$DIR" --auth=trust --username=postgres -E UTF8 >/dev/null
  fi
  rm -f "$DIR/postmaster.pid"  # left by a server that was killed (pg_ctl status said it is not running)
  as_pg "$BIN/pg_ctl" -D "$DIR" -w -l "$DIR/server.log" \
    -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DIR -c fsync=off -c max_connections=200" start >&2
  PSQL=("$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -q -v ON_ERROR_STOP=1)
  as_pg "${PSQL[@]}" -tc "SELECT 1 FROM pg_roles WHERE rolname = 'flexamem'" | grep -q 1 \
    || as_pg "${PSQL[@]}" -c "CREATE ROLE flexamem LOGIN CREATEDB"
  as_pg "${PSQL[@]}" -tc "SELECT 1 FROM pg_database WHERE datname = 'flexamem'" | grep -q 1 \
    || as_pg "${PSQL[@]}" -c "CREATE DATABASE flexamem OWNER flexamem"
fi
for _ in $(seq 50); do  # a server that was just started (or is shutting down) may not answer yet
  "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" && break
  sleep 0.2
done
"$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" || { echo "PostgreSQL did not start: see $DIR/server.log" >&2; exit 1; }
echo "$URL"
