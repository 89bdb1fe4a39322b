#!/usr/bin/env bash
# Start a throwaway PostgreSQL server for the SQL-storage tests and print its SQLAlchemy URL.
#   url=$(./scripts/postgres.sh start DIR)   ./scripts/postgres.sh stop DIR
# Installs Debian's postgresql when missing (CI machines start without it). Listens only on a unix
# socket inside DIR; nothing is exposed on the network.
set -euo pipefail
cmd=${1:?start|stop}; dir=${2:?directory}
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case "$cmd" in
  start)
    if [ -z "$bin" ]; then
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >&2
        bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
      else
        echo "postgresql is not installed and cannot be installed here" >&2; exit 1
      fi
    fi
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres "$dir"
    as_pg "$bin/initdb" -D "$dir/data" -U trinity --auth=trust >/dev/null
    as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
      -o "-k $dir -c listen_addresses='' -p 54329" start >/dev/null
    echo "postgresql+psycopg://trinity@/postgres?host=$dir&port=54329"
    ;;
  stop)
    as_pg "$bin/pg_ctl" -D "$dir/data" -m fast stop >/dev/null || true
    ;;
esac
