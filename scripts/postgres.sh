#!/usr/bin/env bash
# Find or start a PostgreSQL for the tests.
#
#   source scripts/postgres.sh && raftpace_postgres   # what scripts/test.sh does
#   scripts/postgres.sh CMD ARGS...                    # run CMD with the variables set, e.g.
#   scripts/postgres.sh go test -race -count=1 ./internal/pgstore/
#
# raftpace_postgres exports
#   RAFTPACE_TEST_POSTGRES  the URL the tests use (trust auth, no password), and
#   RAFTPACE_PG_BIN         the directory of initdb and pg_ctl, whenever they are
#                           installed (tests that start their own servers use it),
# and prints one line saying which PostgreSQL is used. In order:
#   1. RAFTPACE_TEST_POSTGRES, if already set;
#   2. a server on 127.0.0.1:5432 that lets user postgres in without a
#      password (checked with psql, or pg_isready when psql is missing);
#      RAFTPACE_TEST_NO_SYSTEM_PG=1 skips this check;
#   3. a throwaway server: initdb into a temporary directory, trust auth,
#      listening on a free port of 127.0.0.1 only, its socket in that
#      directory; run as the postgres system user when we are root. Debian's
#      postgresql package is installed first when no initdb is found (as
#      root, non-interactively). The server is stopped and the directory
#      removed when the shell exits (an EXIT trap).
# The system server on 5432 is never stopped or changed.

raftpace_pg_log() { echo "postgres.sh: $*" >&2; }

# raftpace_pg_find_bin prints the directory holding initdb and pg_ctl:
# the newest /usr/lib/postgresql/*/bin (Debian), else the one on PATH.
raftpace_pg_find_bin() {
  local d
  for d in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -t/ -k5,5 -V -r); do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then
      echo "$d"; return 0
    fi
  done
  if command -v initdb >/dev/null 2>&1; then
    d=$(dirname "$(readlink -f "$(command -v initdb)")")
    if [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then
      echo "$d"; return 0
    fi
  fi
  return 1
}

# raftpace_pg_system_ok reports whether a server on 127.0.0.1:5432 lets
# user postgres in without a password.
raftpace_pg_system_ok() {
  local psql=psql isready=pg_isready
  if [ -n "${RAFTPACE_PG_BIN:-}" ]; then
    [ -x "$RAFTPACE_PG_BIN/psql" ] && psql=$RAFTPACE_PG_BIN/psql
    [ -x "$RAFTPACE_PG_BIN/pg_isready" ] && isready=$RAFTPACE_PG_BIN/pg_isready
  fi
  if command -v "$psql" >/dev/null 2>&1; then
    PGCONNECT_TIMEOUT=3 "$psql" -h 127.0.0.1 -p 5432 -U postgres -d postgres -w -X -Atq \
      -c 'select 1' </dev/null >/dev/null 2>&1
    return
  fi
  if command -v "$isready" >/dev/null 2>&1; then
    "$isready" -h 127.0.0.1 -p 5432 -U postgres -d postgres -t 3 >/dev/null 2>&1
    return
  fi
  return 1
}

# raftpace_pg_as_owner runs a command as the owner of the throwaway server:
# the postgres system user when we are root (initdb refuses root), else us.
# It runs from / so that a working directory the owner cannot read does
# not matter.
raftpace_pg_as_owner() {
  (
    cd /
    if [ "$(id -u)" -ne 0 ]; then
      exec "$@"
    elif command -v runuser >/dev/null 2>&1; then
      exec runuser -u postgres -- "$@"
    else
      exec su postgres -s /bin/sh -c "$(printf '%q ' "$@")"
    fi
  )
}

# raftpace_pg_port_free reports whether nothing listens on 127.0.0.1:$1.
raftpace_pg_port_free() {
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

raftpace_pg_install() {
  if [ "$(id -u)" -ne 0 ]; then
    raftpace_pg_log "no PostgreSQL server binaries (initdb, pg_ctl) found and not root: install Debian's postgresql package, or set RAFTPACE_TEST_POSTGRES to a server's URL"
    return 1
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    raftpace_pg_log "no PostgreSQL server binaries found and no apt-get: install PostgreSQL, or set RAFTPACE_TEST_POSTGRES to a server's URL"
    return 1
  fi
  raftpace_pg_log "installing Debian's postgresql package (apt-get)"
  local log; log=$(mktemp /tmp/raftpace-apt.XXXXXX.log)
  if ! { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql; } </dev/null >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    raftpace_pg_log "apt-get install postgresql failed (log above, full log in $log)"
    return 1
  fi
  rm -f "$log"
}

# raftpace_pg_cleanup stops the throwaway server and removes its directory.
raftpace_pg_cleanup() {
  local dir=${RAFTPACE_PG_THROWAWAY_DIR:-}
  [ -n "$dir" ] || return 0
  RAFTPACE_PG_THROWAWAY_DIR=
  if [ -f "$dir/data/postmaster.pid" ]; then
    raftpace_pg_as_owner "$RAFTPACE_PG_BIN/pg_ctl" -D "$dir/data" -m immediate -w -t 30 stop >/dev/null 2>&1 ||
      raftpace_pg_log "warning: pg_ctl stop failed for $dir/data"
  fi
  rm -rf "$dir"
}

# raftpace_pg_start_throwaway initdbs and starts a server, exporting its URL.
raftpace_pg_start_throwaway() {
  local bin=$RAFTPACE_PG_BIN dir port
  if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
    raftpace_pg_log "running as root but there is no postgres system user to run initdb as (Debian's postgresql package creates it)"
    return 1
  fi
  dir=$(mktemp -d /tmp/raftpace-pg.XXXXXX) || { raftpace_pg_log "mktemp failed"; return 1; }
  RAFTPACE_PG_THROWAWAY_DIR=$dir
  trap 'raftpace_pg_cleanup' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  chmod 700 "$dir"
  [ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
  if ! raftpace_pg_as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-sync \
      >"$dir/initdb.log" 2>&1; then
    cat "$dir/initdb.log" >&2
    raftpace_pg_log "initdb failed ($bin/initdb)"
    return 1
  fi
  for _ in 1 2 3 4 5; do
    port=$((20000 + RANDOM % 40000))
    raftpace_pg_port_free "$port" || continue
    if raftpace_pg_as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
        start >"$dir/pg_ctl.log" 2>&1; then
      export RAFTPACE_TEST_POSTGRES="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
      echo "== PostgreSQL: throwaway server $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port, data in $dir (removed on exit)"
      return 0
    fi
    # Another process may have taken the port between the check and the start.
    if ! grep -qi "address already in use\|could not bind\|could not create any TCP/IP sockets" "$dir/server.log" 2>/dev/null; then
      break
    fi
  done
  cat "$dir/pg_ctl.log" "$dir/server.log" >&2 2>/dev/null
  raftpace_pg_log "could not start a throwaway PostgreSQL with $bin/pg_ctl (logs above)"
  return 1
}

# raftpace_postgres exports RAFTPACE_TEST_POSTGRES and RAFTPACE_PG_BIN (see the top).
raftpace_postgres() {
  local bin
  if bin=$(raftpace_pg_find_bin); then
    export RAFTPACE_PG_BIN=$bin
  fi
  if [ -n "${RAFTPACE_TEST_POSTGRES:-}" ]; then
    echo "== PostgreSQL: RAFTPACE_TEST_POSTGRES as given: $(echo "$RAFTPACE_TEST_POSTGRES" | sed -E 's#(://[^:@/]*):[^@/]*@#\1:***@#')"
    return 0
  fi
  if [ -z "${RAFTPACE_TEST_NO_SYSTEM_PG:-}" ] && raftpace_pg_system_ok; then
    export RAFTPACE_TEST_POSTGRES="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
    echo "== PostgreSQL: the server on 127.0.0.1:5432 (user postgres, trust auth)"
    return 0
  fi
  if [ -z "${RAFTPACE_PG_BIN:-}" ]; then
    raftpace_pg_install || return 1
    if ! bin=$(raftpace_pg_find_bin); then
      raftpace_pg_log "installed postgresql but found no initdb/pg_ctl under /usr/lib/postgresql/*/bin"
      return 1
    fi
    export RAFTPACE_PG_BIN=$bin
  fi
  raftpace_pg_start_throwaway
}

# Executed rather than sourced: set the variables up and run the command.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  if [ $# -eq 0 ]; then
    echo "usage: $0 CMD [ARGS...]   (runs CMD with RAFTPACE_TEST_POSTGRES and RAFTPACE_PG_BIN set)" >&2
    exit 2
  fi
  raftpace_postgres
  # Not exec: the EXIT trap must stop a throwaway server after CMD.
  "$@"
fi
