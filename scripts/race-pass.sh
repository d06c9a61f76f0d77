#!/usr/bin/env bash
# The race pass of `make test`, in two steps, so that its test binaries are
# linked once (go test links a package's test binary on every run, even
# when the packages are in the build cache):
#
#   scripts/race-pass.sh build DIR PKG...   compile and link the packages'
#                                           test binaries with -race into DIR
#                                           (go test -race -c, one call for
#                                           all but same-named packages)
#   scripts/race-pass.sh run DIR [FLAG...]  run the binaries in DIR, two at
#                                           a time, each in its package's
#                                           directory as go test does
#
# `make test` runs the build step beside the first pass, at the lowest CPU
# priority, and the run step after it. run prints one line per package as
# go test does ("ok", or the package's whole output and "FAIL") and exits
# non-zero if any package failed; FLAGs go to every binary (-test.timeout,
# -test.parallel). A package without test files has no binary and no line.
set -uo pipefail

mode=${1:?usage: race-pass.sh build|run DIR ...}
dir=${2:?usage: race-pass.sh build|run DIR ...}
shift 2
GO=${GO:-go}
JOBS=${RACE_PASS_JOBS:-2}

# run1 runs one package's test binary in its directory and prints go test's
# line for it (with the whole output if it failed).
run1() { # pkg pkgdir binary (the flags are in $flags)
  local pkg=$1 pkgdir=$2 bin=$3 out start rc
  if [ ! -x "$bin" ]; then
    printf 'FAIL\t%s\t[no test binary: the build step failed]\n' "$pkg"
    return 1
  fi
  out=$(mktemp)
  start=$(date +%s%N)
  (cd "$pkgdir" && "$bin" -test.paniconexit0 $flags) >"$out" 2>&1
  rc=$?
  local ms=$((($(date +%s%N) - start) / 1000000))
  if ((rc == 0)); then
    printf 'ok  \t%s\t%d.%03ds\n' "$pkg" $((ms / 1000)) $((ms % 1000))
  else
    cat "$out"
    printf 'FAIL\t%s\t%d.%03ds\n' "$pkg" $((ms / 1000)) $((ms % 1000))
  fi
  rm -f "$out"
  return $rc
}
export -f run1

case $mode in
build)
  # `go test -c -o DIR/` writes each package's binary as DIR/NAME.test and
  # refuses two packages with the same last path element in one call, so
  # the packages go into groups in which every name is unique (the first
  # of each name in group 0, the second in group 1, ...), one call per
  # group. packages lists "import-path directory binary" per package.
  "$GO" list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}} {{.Dir}}{{end}}' "$@" |
    awk -v dir="$dir" '{ n = split($1, p, "/"); g = seen[p[n]]++; printf "%s %s %s/g%d/%s.test\n", $1, $2, dir, g, p[n] }' >"$dir/packages" || exit 1
  rc=0
  for g in $(awk '{ n = split($3, p, "/"); print p[n-1] }' "$dir/packages" | sort -u); do
    mkdir -p "$dir/$g"
    "$GO" test -race -c -o "$dir/$g/" $(awk -v g="$dir/$g/" 'index($3, g) == 1 { print $1 }' "$dir/packages") || rc=1
  done
  exit $rc
  ;;
run)
  [ -f "$dir/packages" ] || { echo "race-pass: nothing built in $dir" >&2; exit 1; }
  export flags="$*" # go test's flags have no spaces
  xargs -P "$JOBS" -n 3 bash -c 'run1 "$@"' _ <"$dir/packages"
  ;;
*)
  echo "race-pass: unknown step $mode (build or run)" >&2
  exit 2
  ;;
esac
