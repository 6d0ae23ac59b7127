#!/usr/bin/env bash
# The test database: Debian's PostgreSQL on 127.0.0.1:5432, trust authentication for loopback
# connections only. Installs and starts it when missing; safe to run again while it runs.
set -euo pipefail

SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
MARK="# gpu-tenant-portal tests: loopback trust"

if ! command -v pg_ctlcluster >/dev/null || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  # One apt-get at a time: `make test` installs its packages side by side (Makefile's APT_GET).
  apt=($SUDO flock /tmp/gpu-tenant-portal-apt.lock env DEBIAN_FRONTEND=noninteractive apt-get)
  "${apt[@]}" update -qq
  "${apt[@]}" install -y -qq postgresql >/dev/null
fi

version="$(ls /usr/lib/postgresql | sort -V | tail -1)"
if [ ! -f "/etc/postgresql/$version/main/postgresql.conf" ]; then
  $SUDO pg_createcluster "$version" main >/dev/null
fi

hba="/etc/postgresql/$version/main/pg_hba.conf"
if ! $SUDO grep -qF "$MARK" "$hba"; then
  # pg_hba.conf is first match wins: these lines go before Debian's password rules.
  { echo "$MARK"
    echo "host all all 127.0.0.1/32 trust"
    echo "host all all ::1/128 trust"
    $SUDO cat "$hba"; } > "$hba.new"
  $SUDO mv "$hba.new" "$hba"
  $SUDO chown postgres:postgres "$hba"
  $SUDO chmod 640 "$hba"
  if pg_isready -h 127.0.0.1 -p 5432 -q; then
    $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main reload
  fi
fi

# Room for a second suite beside the first (each worker's pools, a test's 50 parallel
# approvals): at Debian's 100 connections two suites were refused "too many clients".
tuning="/etc/postgresql/$version/main/conf.d/gpu-tenant-portal-tests.conf"
wanted="max_connections = 400"
if ! $SUDO grep -qxF "$wanted" "$tuning" 2>/dev/null; then
  echo "$wanted" | $SUDO tee "$tuning" >/dev/null
  if pg_isready -h 127.0.0.1 -p 5432 -q; then
    $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main restart
  fi
fi

if ! pg_isready -h 127.0.0.1 -p 5432 -q; then
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main start
fi
for _ in $(seq 1 60); do
  pg_isready -h 127.0.0.1 -p 5432 -q && exit 0
  sleep 1
done
echo "PostgreSQL did not answer on 127.0.0.1:5432" >&2
exit 1
