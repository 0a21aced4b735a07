#!/usr/bin/env bash
# Foundation benchmarks at the command level, each against a baseline measured in the same run:
#   pack of an image folder (--no-restart-markers: bytes as given, a copy) vs cp -r of the same tree (target: >= 0.70)
#   stokehold verify         vs  cat of the same shard files     (target: >= 0.80)
#   the image pipeline (decode + RandomResizedCrop(224) + flip) on 2 threads vs 1 (target: >= 1.9)
# plus the format-level harness (verify vs reads, random lookups, open of 1M records).
# Usage: scripts/bench-foundation.sh [STOKEHOLD_BIN] [IMAGE_FOLDER]
# IMAGE_FOLDER (or BENCH_SRC) defaults to bench-data/inet/train, the ImageNet-like folder of
# `make bench-data` (scripts/make_imagenet_like.py), when it exists, else to generated sample
# images. Scratch files go to BENCH_WORK (default bench-data/work/foundation).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-$ROOT/target/release/stokehold}
SRC=${2:-${BENCH_SRC:-}}
WORK=${BENCH_WORK:-$ROOT/bench-data/work/foundation}
RUNS=${RUNS:-3}
mkdir -p "$WORK"
if [ -z "$SRC" ] && [ -d "$ROOT/bench-data/inet/train" ]; then
  SRC=$ROOT/bench-data/inet/train
elif [ -z "$SRC" ]; then
  echo "note: no bench-data/inet/train (\`make bench-data\` makes it): packing generated sample images"
  SRC=$WORK/sample
  [ -d "$SRC" ] || "$BIN" sample-data "$SRC" --images 3000 --classes 30 >/dev/null
fi
now() { date +%s.%N; }
calc() { python3 -c "print($1)"; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
time_runs() { # command... ; prints the median wall seconds of $RUNS runs
  for _ in $(seq "$RUNS"); do
    rm -rf "$WORK/out"; sync
    local t0; t0=$(now)
    "$@" >/dev/null
    calc "$(now) - $t0"
  done | median
}
files=$(find "$SRC" -type f | wc -l); size=$(du -sb "$SRC" | cut -f1)
echo "source: $SRC ($files files, $((size / 1048576)) MiB), $(nproc) cores, hot page cache, median of $RUNS runs"
find "$SRC" -type f -print0 | xargs -0 cat >/dev/null   # warm the page cache

t_cp=$(time_runs cp -r "$SRC" "$WORK/out")
t_pack=$(time_runs "$BIN" pack "$SRC" "$WORK/out" --no-restart-markers)
printf 'pack:   %.3f s vs cp -r %.3f s: pack runs at %.2fx the speed of cp -r (target >= 0.70)\n' \
  "$t_pack" "$t_cp" "$(calc "$t_cp / $t_pack")"

rm -rf "$WORK/ds" && "$BIN" pack "$SRC" "$WORK/ds" --shard-size 64MiB >/dev/null
cat "$WORK"/ds/*.skh >/dev/null
t_cat=$(time_runs cat "$WORK"/ds/*.skh)
t_verify=$(time_runs "$BIN" verify "$WORK/ds" --threads 1)
printf 'verify: %.3f s vs cat %.3f s of the same shards: verify runs at %.2fx the speed of reading (target >= 0.80)\n' \
  "$t_verify" "$t_cat" "$(calc "$t_cat / $t_verify")"
"$BIN" bench "$WORK/ds" --shuffle --epochs 3 | sed 's/^/bench:  /'

# the image pipeline on 2 threads against 1 (`stokehold bench DS --random-resized-crop 224 --flip
# --threads N`), alternating runs, medians
rate() { "$BIN" bench "$WORK/ds" --random-resized-crop 224 --flip --threads "$1" |
  awk '$1 == "throughput" {gsub(",", "", $2); print $2}'; }
for _ in $(seq "$RUNS"); do echo "$(rate 1) $(rate 2)"; done >"$WORK/scaling.txt"
r1=$(cut -d' ' -f1 "$WORK/scaling.txt" | median); r2=$(cut -d' ' -f2 "$WORK/scaling.txt" | median)
printf 'image pipeline (RandomResizedCrop(224)+flip): --threads 2 %.0f images/s vs --threads 1 %.0f: %.2fx (target >= 1.9)\n' \
  "$r2" "$r1" "$(calc "$r2 / $r1")"

echo "format-level harness (cargo bench -p stokehold-storage --bench format):"
cargo bench -q -p stokehold-storage --bench format 2>/dev/null | sed 's/^/  /'
