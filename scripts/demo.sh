#!/usr/bin/env bash
# The README's first command (`make demo`): generate a sample image set, pack it into shards,
# verify it, show it, and stream every sample through a reading pipeline, printing throughput and
# where the time went. Everything runs locally on data this script makes; nothing is downloaded.
set -euo pipefail
BIN=${1:-target/release/stokehold}
DIR=${2:-demo-data}
N=${3:-2000}
mkdir -p "$DIR"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

if [ ! -d "$DIR/images" ]; then
  step "generating $N photograph-like JPEGs (about 500x375, quality 90) in 10 classes"
  "$BIN" sample-data "$DIR/images" --images "$N" --classes 10
fi
step "stokehold pack $DIR/images $DIR/shards"
"$BIN" pack "$DIR/images" "$DIR/shards" --shard-size 32MiB --overwrite
step "stokehold verify $DIR/shards"
"$BIN" verify "$DIR/shards"
step "stokehold inspect $DIR/shards"
"$BIN" inspect "$DIR/shards"
step "stokehold bench $DIR/shards: decode + RandomResizedCrop(224) + flip on native threads, global shuffle, batches of 256"
"$BIN" bench "$DIR/shards" --shuffle --epochs 2 --random-resized-crop 224 --flip
