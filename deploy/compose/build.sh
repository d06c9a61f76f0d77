#!/bin/sh
# Builds the image the Compose cluster runs (norsk-manager-compose:local),
# FROM scratch with static binaries, and makes the deployment's secrets once:
# the cluster CA, the members' shared secret and the bootstrap admin token.
# Nothing is pulled. Run it from anywhere; it needs Go and a Docker engine.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
image=${NORSK_COMPOSE_IMAGE:-norsk-manager-compose:local}
arch=$(docker version --format '{{.Server.Arch}}' 2>/dev/null || go env GOARCH)

build="$here/build"
rm -rf "$build/rootfs"
mkdir -p "$build/rootfs/tmp" "$build/rootfs/etc" "$build/bin"
chmod 1777 "$build/rootfs/tmp"

echo "go build (static, linux/$arch): norsk-manager, norsk-ctl, hello"
for p in norsk-manager:./cmd/norsk-manager norsk-ctl:./cmd/norsk-ctl hello:./examples/hello; do
	name=${p%%:*}
	pkg=${p#*:}
	(cd "$root" && CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags='-s -w' -o "$build/rootfs/$name" "$pkg")
done
# A minimal passwd/group so user lookups in the empty image answer.
printf 'root:x:0:0:root:/tmp:/norsk-ctl\n' >"$build/rootfs/etc/passwd"
printf 'root:x:0:\n' >"$build/rootfs/etc/group"
# norsk-ctl for this machine (to talk to the cluster from the host).
(cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$build/bin/norsk-ctl" ./cmd/norsk-ctl)
(cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$build/bin/norsk-manager" ./cmd/norsk-manager)

printf "bin\n" >"$build/.dockerignore"
echo "docker build $image (FROM scratch, never pulls)"
docker build --pull=false -t "$image" -f "$here/Dockerfile" "$build"

# Secrets, made once (delete deploy/compose/secrets to start over with new ones).
secrets="$here/secrets"
mkdir -p "$secrets/workers"
hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }
if [ ! -f "$secrets/ca.pem" ]; then
	# The cluster CA every member shares (tlsCaFile/tlsCaKeyFile): each member
	# issues its own API certificate from it at first start, for its hostname,
	# addresses, localhost and 127.0.0.1. Members trust each other by it;
	# clients and workers pin it (--tls-ca or --tls-ca-hash).
	"$build/bin/norsk-manager" tls init --dir "$secrets/tls" --hosts mgr-1,mgr-2,mgr-3 >/dev/null
	cp "$secrets/tls/ca.pem" "$secrets/ca.pem"
	cp "$secrets/tls/ca-key.pem" "$secrets/ca-key.pem"
	rm -rf "$secrets/tls"
fi
if [ ! -f "$secrets/cluster-secret" ]; then
	hex 32 >"$secrets/cluster-secret"
fi
if [ ! -f "$secrets/admin-token" ]; then
	# The bootstrap admin token: the first primary records it in a new store.
	echo "nmt_$(hex 8).$(hex 32)" >"$secrets/admin-token"
fi
printf 'NORSK_BOOTSTRAP_TOKEN=%s\n' "$(cat "$secrets/admin-token")" >"$secrets/manager.env"
for w in worker-1 worker-2; do
	[ -f "$secrets/workers/$w.env" ] || : >"$secrets/workers/$w.env"
done
chmod 600 "$secrets/ca-key.pem" "$secrets/cluster-secret" "$secrets/admin-token" "$secrets/manager.env"
"$build/bin/norsk-manager" tls ca --dir "$secrets" --fingerprint 2>/dev/null >"$secrets/ca-fingerprint" || true
echo "built $image; secrets in $secrets; host CLI in $build/bin/norsk-ctl"
