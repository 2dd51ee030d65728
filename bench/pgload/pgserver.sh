# Starts and stops a throw-away PostgreSQL server for bench/pgload: Debian's
# binaries, a cluster in a scratch directory, listening only on a Unix
# socket in that directory (no TCP at all), fsync off, small
# shared_buffers. Sourced by scripts/pg-overload.sh.
#
#   pg_start DIR MAX_CONNECTIONS   initdb + start; sets PG_CONNINFO, PG_PID
#   pg_stop DIR                    stop (immediate), safe to call twice
#
# pg_start also leaves a guard behind, outside the caller's process tree,
# that stops the server and removes DIR once the calling shell is gone, even
# if it was killed with SIGKILL (as ctest does on a timeout), when its own
# trap cannot run.
#
# initdb and postgres refuse to run as root: as root, they run as the
# "postgres" user (Debian's package creates it), or "nobody" without it,
# and DIR is handed to that user; otherwise they run as the caller.

pg_bindir() {
  local dir
  if command -v pg_config >/dev/null && dir=$(pg_config --bindir 2>/dev/null) && [ -x "$dir/postgres" ]; then
    echo "$dir"
    return 0
  fi
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -n "$dir" ] && [ -x "$dir/postgres" ] && [ -x "$dir/initdb" ]; then
    echo "$dir"
    return 0
  fi
  echo "pgserver: no PostgreSQL server found (no postgres/initdb under /usr/lib/postgresql/*/bin):" \
       "install Debian's postgresql package (scripts/install-deps.sh does)" >&2
  return 1
}

pg_as_server_user() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u "$PG_USER" -- "$@"
  else
    "$@"
  fi
}

pg_start() {
  local dir=$1 max_connections=$2 bin
  bin=$(pg_bindir) || return 1
  PG_USER=$(id -un)
  if [ "$(id -u)" -eq 0 ]; then
    PG_USER=postgres
    getent passwd postgres >/dev/null || PG_USER=nobody
    chown "$PG_USER" "$dir"
  fi
  if ! pg_as_server_user "$bin/initdb" -D "$dir/data" -U bench --auth=trust --no-sync -E UTF8 \
         >"$dir/initdb.log" 2>&1; then
    echo "pgserver: initdb failed (as $PG_USER):" >&2
    cat "$dir/initdb.log" >&2
    return 1
  fi
  # The server's own settings: one socket in DIR, no TCP; durability off
  # (a scratch cluster); a small buffer pool (the data fits in the page
  # cache anyway); no JIT, whose compile time would swamp a few-ms query.
  if ! pg_as_server_user "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start -o \
         "-c listen_addresses='' -c unix_socket_directories='$dir' -c port=5432 \
          -c max_connections=$max_connections -c shared_buffers=32MB -c fsync=off \
          -c synchronous_commit=off -c full_page_writes=off -c jit=off \
          -c autovacuum=off -c max_parallel_workers_per_gather=0 -c log_min_messages=warning -c log_min_error_statement=panic" \
         >"$dir/pg_ctl.log" 2>&1; then
    echo "pgserver: the server did not start (as $PG_USER):" >&2
    cat "$dir/pg_ctl.log" "$dir/server.log" >&2 2>/dev/null
    return 1
  fi
  PG_PID=$(head -n 1 "$dir/data/postmaster.pid")
  # SIGQUIT is the postmaster's immediate shutdown.
  setsid -f bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done
    kill -QUIT "$2" 2>/dev/null && while kill -0 "$2" 2>/dev/null; do sleep 0.1; done
    rm -rf "$3"' pg-guard "$$" "$PG_PID" "$dir" </dev/null >/dev/null 2>&1
  PG_CONNINFO="host=$dir port=5432 user=bench dbname=postgres"
  PG_STARTED_DIR=$dir
}

pg_stop() {
  local dir=$1 bin
  [ -n "${PG_STARTED_DIR:-}" ] || return 0
  bin=$(pg_bindir) || return 0
  pg_as_server_user "$bin/pg_ctl" -D "$dir/data" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
  PG_STARTED_DIR=
}
