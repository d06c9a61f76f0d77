#!/bin/sh
# Starts the Compose cluster: the three members, then (once they have formed
# the cluster) registers a cluster slot per worker and starts the workers
# with their one-shot tokens. Safe to run again: registered workers keep
# their identity in their volume and need no new token.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
[ -f secrets/ca.pem ] || { echo "run ./build.sh first" >&2; exit 1; }
ctl="$here/build/bin/norsk-ctl"
export NORSK_MANAGER_URL="https://127.0.0.1:${MGR1_PORT:-16790}"
export NORSK_TLS_CA="$here/secrets/ca.pem"
export NORSK_TOKEN="$(cat secrets/admin-token)"

docker-compose up -d mgr-1 mgr-2 mgr-3
printf 'waiting for the cluster to elect a primary'
i=0
until "$ctl" cluster status -o json 2>/dev/null | grep -q '"quorumHealthy": *true'; do
	i=$((i + 1))
	[ $i -lt 120 ] || { echo; echo "no healthy quorum after 60 s; see docker-compose logs mgr-1 mgr-2 mgr-3" >&2; exit 1; }
	printf .
	sleep 0.5
done
echo
for w in worker-1 worker-2; do
	# A new store has no slot for the worker yet: register one and hand its
	# one-shot token to the worker. A slot that exists already (a second run)
	# is refused here, and the worker keeps the identity in its volume.
	if out=$("$ctl" slot register "$w" -o json 2>/dev/null); then
		tok=$(printf '%s' "$out" | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')
		[ -n "$tok" ] || { echo "slot register $w: no token in $out" >&2; exit 1; }
		printf 'NORSK_TOKEN=%s\n' "$tok" >"secrets/workers/$w.env"
		chmod 600 "secrets/workers/$w.env"
	fi
done
docker-compose up -d worker-1 worker-2
"$ctl" cluster status
