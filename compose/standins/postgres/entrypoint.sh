#!/bin/sh
# The stand-in postgres image's entrypoint. On an empty PGDATA it makes
# the cluster: superuser POSTGRES_USER (default postgres) with
# POSTGRES_PASSWORD (required), database POSTGRES_DB (default the user's
# name), password (SCRAM) logins from any address, local socket logins
# trusted. Then it runs the command as the postgres user. Other variables
# of the upstream image (POSTGRES_INITDB_ARGS, POSTGRES_HOST_AUTH_METHOD,
# /docker-entrypoint-initdb.d) are not supported.
set -eu

if [ $# -eq 0 ] || [ "${1#-}" != "$1" ]; then
	set -- postgres "$@"
fi
: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
export PGDATA

if [ "$1" != postgres ]; then
	exec "$@"
fi

if [ "$(id -u)" = 0 ]; then
	mkdir -p "$PGDATA" /var/run/postgresql
	chown -R postgres:postgres "$PGDATA" /var/run/postgresql
	chmod 700 "$PGDATA"
	exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	if [ -z "${POSTGRES_PASSWORD:-}" ]; then
		echo "docker-entrypoint.sh: POSTGRES_PASSWORD is empty: set it" >&2
		exit 1
	fi
	pwfile=$(mktemp)
	printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
	initdb -D "$PGDATA" --username="$POSTGRES_USER" --pwfile="$pwfile" \
		--auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8
	rm -f "$pwfile"
	echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
	echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
	if [ "$POSTGRES_DB" != postgres ]; then
		db=$(printf '%s' "$POSTGRES_DB" | sed 's/"/""/g')
		echo "CREATE DATABASE \"$db\"" | postgres --single -D "$PGDATA" postgres >/dev/null
	fi
	echo "docker-entrypoint.sh: made the cluster in $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB)"
fi
exec "$@"
