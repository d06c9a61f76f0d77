#!/usr/bin/env bash
# The race pass of `make test`, in two steps, so that its test binaries are
# linked once (go test links a package's test binary on every run, even
# when the packages are in the build cache):
#
#   scripts/race-pass.sh build DIR PKG...   compile and link each package's
#                                           test binary with -race into DIR
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

# binary names a package's test binary in DIR (import paths have no spaces).
binary() { printf '%s/%s.test' "$dir" "${1//\//_}"; }

# build1 compiles and links one package's test binary.
build1() { "$GO" test -race -c -o "$(binary "$1")" "$1"; }

# run1 runs one package's test binary in its directory and prints go test's
# line for it (with the whole output if it failed).
run1() { # pkg pkgdir (the flags are in $flags)
  local pkg=$1 pkgdir=$2 out start rc
  if [ ! -x "$(binary "$pkg")" ]; then
    printf 'FAIL\t%s\t[no test binary: the build step failed]\n' "$pkg"
    return 1
  fi
  out=$(mktemp)
  start=$(date +%s%N)
  (cd "$pkgdir" && "$(binary "$pkg")" -test.paniconexit0 $flags) >"$out" 2>&1
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
export -f binary build1 run1
export dir GO

case $mode in
build)
  # One `go test -c` per package: two packages with the same last path
  # element cannot share one invocation's output directory.
  "$GO" list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}} {{.Dir}}{{end}}' "$@" >"$dir/packages" || exit 1
  cut -d' ' -f1 "$dir/packages" | xargs -P "$JOBS" -n 1 bash -c 'build1 "$1"' _
  ;;
run)
  [ -f "$dir/packages" ] || { echo "race-pass: nothing built in $dir" >&2; exit 1; }
  export flags="$*" # go test's flags have no spaces
  xargs -P "$JOBS" -n 2 bash -c 'run1 "$@"' _ <"$dir/packages"
  ;;
*)
  echo "race-pass: unknown step $mode (build or run)" >&2
  exit 2
  ;;
esac
