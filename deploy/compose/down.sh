#!/bin/sh
# Stops the Compose cluster and removes its containers, network and volumes
# (every member's store and every worker's identity): the next ./up.sh starts
# a new cluster. The secrets (CA, cluster secret, admin token) are kept.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
docker-compose down -v --remove-orphans
for w in worker-1 worker-2; do : >"secrets/workers/$w.env"; done
