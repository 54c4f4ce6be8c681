#!/bin/sh
# PostgreSQL refuses to run as root, and CI runs as root. pgserver.py points
# pytest-postgresql at this script instead of pg_ctl when it runs as root; it
# runs pg_ctl as the unprivileged user pgserver.py chose and owns the data
# directory for.
cd / || exit 1
exec runuser -u "$MOTIR_PG_USER" -- "$MOTIR_PG_CTL" "$@"
