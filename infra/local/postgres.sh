#!/usr/bin/env bash
# A real PostgreSQL for the local stack (the PostgreSQL ledger's tests and demo): Debian's
# packages, installed on first use when the machine lacks them; its own cluster under
# .local-aws/postgres (git-ignored; its log is postgres.log there), listening on 127.0.0.1 only,
# with fsync off (a development cluster: a host crash may lose it). Trust authentication on
# loopback, for the local role `recon`: meant for a single-user development machine or CI runner
# (any local user could connect); never expose it. Members of the group role
# `recon_password_auth` must give their password (scram-sha-256): the tests of a rotated
# password use them.
#
#   infra/local/postgres.sh install   install Debian's postgresql if pg_ctl is missing
#   infra/local/postgres.sh up        install if needed, create the cluster once, start it
#   infra/local/postgres.sh down      stop it (the data stays until `rm -rf .local-aws/postgres`)
#   infra/local/postgres.sh status    print whether it runs
#   infra/local/postgres.sh url       print the connection URL the tests use
#   infra/local/postgres.sh ca        print the path of the CA certificate the server's is signed by
#
# Port: POSTGRES_PORT (default 55432, away from a system PostgreSQL's 5432).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
port="${POSTGRES_PORT:-55432}"
dir="$root/.local-aws/postgres"
# As root the cluster belongs to Debian's `postgres` user, who must reach its directory: a
# checkout it cannot enter (under /root, say) gets its cluster in /var/tmp instead.
if [ "$(id -u)" -eq 0 ] && id postgres >/dev/null 2>&1 && ! runuser -u postgres -- test -x "$root" 2>/dev/null; then
  dir="/var/tmp/recon-dlq-postgres-$port"
fi
data="$dir/data"

log() { printf '[local-aws] %s\n' "$*" >&2; }

# The server binaries: the cluster's own version when it exists, else the newest installed.
bin_dir() {
  if [ -f "$data/PG_VERSION" ] && [ -x "/usr/lib/postgresql/$(cat "$data/PG_VERSION")/bin/pg_ctl" ]; then
    echo "/usr/lib/postgresql/$(cat "$data/PG_VERSION")/bin"; return 0
  fi
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$d" ] && [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
  return 1
}

# The Unix socket lives in a short directory of its own (a socket path is limited to 107 bytes,
# which a deep checkout would exceed); every client here connects over TCP on 127.0.0.1.
socket_dir="/tmp/recon-dlq-pg-$port"

install() {
  bin_dir >/dev/null && return 0
  log "installing PostgreSQL from Debian's packages (postgresql)"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  bin_dir >/dev/null || { log "PostgreSQL did not install"; exit 1; }
}

# PostgreSQL refuses to run as root: as root, the cluster belongs to Debian's `postgres` user.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

healthy() { "$(bin_dir)/pg_isready" -q -h 127.0.0.1 -p "$port" 2>/dev/null; }

# Who connects how: members of recon_password_auth with their password, everyone else trusted
# on loopback (written at every start, so an older cluster gets it too).
hba() {
  cat <<'EOF'
# Written by infra/local/postgres.sh (rewritten at every start).
local all all                      trust
host  all +recon_password_auth 127.0.0.1/32 scram-sha-256
host  all all                  127.0.0.1/32 trust
host  all all                  ::1/128      trust
EOF
}

tls_dir="$dir/tls"

# The local CA and the server's certificate (127.0.0.1, localhost), made once.
tls() {
  [ -f "$tls_dir/server.key" ] && return 0
  command -v openssl >/dev/null || { log "openssl is needed for the local PostgreSQL's certificate"; exit 1; }
  log "making the local PostgreSQL's TLS certificate (a CA of its own, in $tls_dir)"
  mkdir -p "$tls_dir"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=recon-dlq local PostgreSQL CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$tls_dir/ca.key" -out "$tls_dir/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$tls_dir/server.key" -out "$tls_dir/server.csr" 2>/dev/null
  printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost" "basicConstraints=critical,CA:FALSE" \
    "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" > "$tls_dir/server.ext"
  openssl x509 -req -in "$tls_dir/server.csr" -CA "$tls_dir/ca.crt" -CAkey "$tls_dir/ca.key" \
    -CAcreateserial -days 3650 -extfile "$tls_dir/server.ext" -out "$tls_dir/server.crt" 2>/dev/null
  chmod 600 "$tls_dir/server.key" "$tls_dir/ca.key"
  chmod 644 "$tls_dir/ca.crt" "$tls_dir/server.crt"
  [ "$(id -u)" -eq 0 ] && chown -R postgres: "$tls_dir"
  return 0
}

up() {
  install
  local bin
  bin=$(bin_dir)
  mkdir -p "$dir" "$socket_dir"
  [ "$(id -u)" -eq 0 ] && chown postgres: "$dir" "$socket_dir"
  if [ ! -f "$data/PG_VERSION" ]; then
    log "creating the local PostgreSQL cluster in $dir"
    as_owner "$bin/initdb" -D "$data" -U postgres --auth-local=trust --auth-host=trust -E UTF8 --locale=C.UTF-8 >/dev/null
  fi
  tls
  if ! hba | cmp -s - "$data/pg_hba.conf"; then
    hba | as_owner tee "$data/pg_hba.conf" >/dev/null
    if healthy; then as_owner "$bin/pg_ctl" -D "$data" reload >/dev/null; fi
  fi
  if healthy; then
    log "PostgreSQL already running on 127.0.0.1:$port"
  else
    log "starting PostgreSQL on 127.0.0.1:$port"
    as_owner "$bin/pg_ctl" -D "$data" -l "$dir/postgres.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$socket_dir -c fsync=off" start >/dev/null
  fi
  local sql=("$bin/psql" -q -h 127.0.0.1 -p "$port" -U postgres -tA)
  if [ "$(as_owner "${sql[@]}" -c "SHOW ssl")" != "on" ]; then
    as_owner "${sql[@]}" -c "ALTER SYSTEM SET ssl_cert_file = '$tls_dir/server.crt'" \
      -c "ALTER SYSTEM SET ssl_key_file = '$tls_dir/server.key'" -c "ALTER SYSTEM SET ssl = on" \
      -c "SELECT pg_reload_conf()" >/dev/null
    sleep 1
    [ "$(as_owner "${sql[@]}" -c "SHOW ssl")" = "on" ] || { log "PostgreSQL did not turn TLS on (see $dir/postgres.log)"; exit 1; }
  fi
  as_owner "${sql[@]}" -c "SELECT 1 FROM pg_roles WHERE rolname='recon'" | grep -q 1 ||
    as_owner "${sql[@]}" -c "CREATE ROLE recon LOGIN CREATEDB"
  # recon creates the tests' password-checked roles and makes them members of this group
  # (CREATEROLE; recon itself is no member, so it stays trusted), and closes their connections
  # (pg_signal_backend) as a rotation would.
  as_owner "${sql[@]}" -c "ALTER ROLE recon CREATEROLE" -c "SET client_min_messages = warning" -c "GRANT pg_signal_backend TO recon"
  as_owner "${sql[@]}" -c "SELECT 1 FROM pg_roles WHERE rolname='recon_password_auth'" | grep -q 1 ||
    as_owner "${sql[@]}" -c "CREATE ROLE recon_password_auth NOLOGIN"
  as_owner "${sql[@]}" -c "SELECT 1 FROM pg_database WHERE datname='recon'" | grep -q 1 ||
    as_owner "${sql[@]}" -c "CREATE DATABASE recon OWNER recon"
  log "PostgreSQL is up"
}

down() {
  local bin
  bin=$(bin_dir) || return 0
  [ -f "$data/postmaster.pid" ] || return 0
  log "stopping PostgreSQL"
  as_owner "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null || true
}

case "${1:-}" in
  install) install ;;
  up) up ;;
  down) down ;;
  status) if bin_dir >/dev/null && healthy; then echo "PostgreSQL: up on 127.0.0.1:$port"; else echo "PostgreSQL: down"; fi ;;
  url) echo "postgres://recon@127.0.0.1:$port/recon" ;;
  ca) echo "$tls_dir/ca.crt" ;;
  *) echo "usage: $0 install|up|down|status|url|ca" >&2; exit 2 ;;
esac
