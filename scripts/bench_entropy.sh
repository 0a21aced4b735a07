#!/usr/bin/env bash
# The entropy stage alone (issue #38, "measure first"): libjpeg-turbo's Huffman decode of the
# quantised DCT coefficients (stokehold's patched build, as the wheel ships it) against a
# prototype coding of the same coefficients built for decoding speed
# (scripts/entropy/entropy_bench.c says what it is), on one core.
#
#   bash scripts/bench_entropy.sh [SHARDS] [N] [ROUNDS]
#
# SHARDS: a packed image dataset (default bench-data/inet-shards: its JPEGs are restart-marked,
# pack's default, the files today's pipeline decodes); N images (default 1000); ROUNDS alternated
# passes (default 7). Run after `make wheel` (or `make test`), which builds the libjpeg-turbo the
# bench links.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARDS=${1:-bench-data/inet-shards}
N=${2:-1000}
ROUNDS=${3:-7}
LIB=target/libjpeg-turbo-gcc
if [ ! -f "$LIB/libturbojpeg.a" ]; then
  echo "no $LIB/libturbojpeg.a: run make wheel first" >&2
  exit 1
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cc -O2 -Wall -I "$LIB" -I vendor/turbojpeg-sys/libjpeg-turbo/src -o "$WORK/entropy_bench" \
  scripts/entropy/entropy_bench.c "$LIB/libturbojpeg.a"
.venv/bin/python - "$SHARDS" "$N" "$WORK/jpegs" <<'PY'
import os, sys
import stokehold
ds = stokehold.Dataset(sys.argv[1])
field = next(k for k, v in ds.schema.items() if v.startswith("image"))
os.makedirs(sys.argv[3])
for i in range(min(int(sys.argv[2]), len(ds))):
    with open(os.path.join(sys.argv[3], f"{i:06d}.jpg"), "wb") as f:
        f.write(ds[i][field])
PY
# one core, as the per-core targets are measured
taskset -c 1 "$WORK/entropy_bench" "$WORK/jpegs" "$N" "$ROUNDS"
