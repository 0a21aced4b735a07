#!/usr/bin/env bash
# What the shipped wheel costs and gives, each figure against a baseline measured in this run
# (issue #17):
#   1. `pip install` of the wheel into a fresh venv (numpy from the index or pip's cache), against
#      `pip install .` from this checkout into another fresh venv: the source build a user without
#      the wheel pays (its own empty cargo target directory; skip it with SOURCE_BUILD=0);
#   2. the image pipeline (decode + RandomResizedCrop(224) + flip, 1 thread, global shuffle) run by
#      the wheel's `stokehold` command against the cargo release build of the same commit
#      (`target/release/stokehold`; both have libjpeg-turbo built by the system's gcc, the wheel's
#      by the Makefile since zig's clang made its Huffman decoder slower; the wheel's Rust is
#      linked by zig for glibc 2.17), alternating, ROUNDS rounds each.
#
# usage: scripts/bench-wheel.sh WHEEL IMAGE_FOLDER [ROUNDS]   (make bench runs it)
set -euo pipefail
WHEEL=$(realpath "$1")
IMAGES=$2
ROUNDS=${3:-3}
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/stokehold-bench-wheel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
PY=${PYTHON:-python3}

secs() { local t0=$1; "$PY" -c "import time,sys; print(f'{time.time()-float(sys.argv[1]):.1f}')" "$t0"; }

echo "== install: the wheel ($(du -h "$WHEEL" | cut -f1)) vs a source build"
"$PY" -m venv "$WORK/wheel-venv"
t0=$(date +%s.%N)
"$WORK/wheel-venv/bin/pip" install -q --disable-pip-version-check "$WHEEL"
wheel_s=$(secs "$t0")
echo "pip install WHEEL (fresh venv, with numpy): $wheel_s s"
if [ "${SOURCE_BUILD:-1}" != 0 ]; then
  "$PY" -m venv "$WORK/src-venv"
  t0=$(date +%s.%N)
  CARGO_TARGET_DIR="$WORK/src-target" "$WORK/src-venv/bin/pip" install -q --disable-pip-version-check "$REPO"
  src_s=$(secs "$t0")
  "$PY" -c "import sys; w, s = map(float, sys.argv[1:]); print(f'pip install . (source build, empty target dir): {s:.0f} s = {s / w:.0f}x the wheel')" "$wheel_s" "$src_s"
fi

echo "== image pipeline: the wheel's stokehold vs target/release/stokehold, $ROUNDS alternating rounds"
CARGO_BIN="$REPO/target/release/stokehold"
[ -x "$CARGO_BIN" ] || (cd "$REPO" && cargo build -q --release -p stokehold-cli)
"$CARGO_BIN" pack "$IMAGES" "$WORK/shards" >/dev/null
rate() { "$@" bench "$WORK/shards" --random-resized-crop 224 --flip --threads 1 --shuffle \
  | awk '/^throughput/ {gsub(",", "", $2); print $2}'; }
ratios=()
for r in $(seq "$ROUNDS"); do
  w=$(rate "$WORK/wheel-venv/bin/stokehold")
  c=$(rate "$CARGO_BIN")
  ratio=$("$PY" -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.3f}')" "$w" "$c")
  ratios+=("$ratio")
  echo "round $r: wheel $w images/s, cargo release $c images/s: ${ratio}x"
done
"$PY" -c "import statistics, sys; print(f'wheel vs cargo release build: median {statistics.median(map(float, sys.argv[1:])):.3f}x')" "${ratios[@]}"
