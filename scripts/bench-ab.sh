#!/usr/bin/env bash
# A/B of the engine benchmark and the image pipeline between an earlier revision and this tree,
# in interleaved rounds of one run each, medians compared (the machine is noisy: only ratios).
#   scripts/bench-ab.sh REV [ROUNDS] [IMAGE_FOLDER]
# REV is built in a git worktree (bench-data/work/ab/REV, target dir beside it; BENCH_WORK
# overrides bench-data/work/ab); this tree's release build is used as it is (`make build`).
# IMAGE_FOLDER defaults to 3,000 generated images (`stokehold sample-data`); realistic ones:
# bench-data/inet/train, made by `make bench-data` (scripts/make_imagenet_like.py).
# Prints new/old for: engine overhead (copy-only, 2 threads; with and without checksums),
# scaling (CPU-heavy transform, 2 threads), time to first batch, and `stokehold bench` of
# decode + RandomResizedCrop(224) + flip (batch 256, 2 threads, shuffle, 2 epochs) on a plain
# pack made by each side's own binary; and token windows (`--bench sequence`: packed windows of
# 2,048 tokens, batch 32, global shuffle, pread + CRC, on 2 workers and on 1, from warm shards;
# its ratio is against a memcpy measured in the same run; STOKEHOLD_BENCH_DOCS=20000).
set -euo pipefail
REV=${1:?usage: scripts/bench-ab.sh REV [ROUNDS] [IMAGE_FOLDER]}
R=${2:-5}
ROOT=$(git rev-parse --show-toplevel)
W=${BENCH_WORK:-$ROOT/bench-data/work/ab}/$(git rev-parse --short "$REV")
mkdir -p "$W"
[ -d "$W/src" ] || git -C "$ROOT" worktree add -q --detach "$W/src" "$REV"
(cd "$W/src" && CARGO_TARGET_DIR=$W/target cargo build -q --release -p stokehold-cli &&
  CARGO_TARGET_DIR=$W/target cargo bench -q --no-run -p stokehold --bench engine --bench sequence)
(cd "$ROOT" && cargo build -q --release -p stokehold-cli &&
  cargo bench -q --no-run -p stokehold --bench engine --bench sequence)
newest() { ls -t "$1"/release/deps/"$2"-* | grep -v '\.d$' | head -1; }
OLD_ENGINE=$(newest "$W/target" engine); NEW_ENGINE=$(newest "$ROOT/target" engine)
OLD_SEQ=$(newest "$W/target" sequence); NEW_SEQ=$(newest "$ROOT/target" sequence)
OLD_CLI=$W/target/release/stokehold; NEW_CLI=$ROOT/target/release/stokehold
SRC=${3:-$W/images}
[ -d "$SRC" ] || "$NEW_CLI" sample-data "$SRC" --images 3000 --classes 30 >/dev/null
for side in old new; do
  cli=$OLD_CLI; [ $side = new ] && cli=$NEW_CLI
  [ -f "$W/ds-$side/manifest.json" ] || "$cli" pack "$SRC" "$W/ds-$side" >/dev/null
done
cat "$W"/ds-old/* "$W"/ds-new/* >/dev/null
for i in $(seq "$R"); do
  for side in old new; do
    engine=$OLD_ENGINE cli=$OLD_CLI seq=$OLD_SEQ
    [ $side = new ] && engine=$NEW_ENGINE cli=$NEW_CLI seq=$NEW_SEQ
    "$engine" --bench >"$W/engine.$side.$i.txt" 2>&1
    STOKEHOLD_BENCH_DOCS=20000 STOKEHOLD_BENCH_VARIANTS=0,5 STOKEHOLD_BENCH_COLD=0 \
      "$seq" --bench >"$W/tokens.$side.$i.txt" 2>&1
    "$cli" bench "$W/ds-$side" --random-resized-crop 224 --flip --shuffle --threads 2 --epochs 2 \
      >"$W/image.$side.$i.txt" 2>&1
  done
done
python3 - "$W" "$R" <<'PY'
import re, statistics as st, sys
w, rounds = sys.argv[1], int(sys.argv[2])
pats = {
    "engine overhead (M samples/s)": (r"engine on 2 threads ([\d.]+) M", "engine"),
    "engine, no checksums": (r"without record checksums.*?([\d.]+) M", "engine"),
    "scaling, 2 threads (samples/s)": (r"2 threads (\d+) samples/s", "engine"),
    "time to first batch (ms)": (r"first batch: ([\d.]+) ms", "engine"),
    "image pipeline (samples/s)": (r"throughput\s+([\d,.]+) samples/s", "image"),
    "token windows, 2 workers (M tok/s)": (r"default\), 2 workers\): .*? ([\d.]+) M tok/s", "tokens"),
    "token windows, 2 workers (ratio)": (r"default\), 2 workers\): .*?ratio ([\d.]+)", "tokens"),
    "token windows, 1 worker (M tok/s)": (r"default\), 1 workers\): .*? ([\d.]+) M tok/s", "tokens"),
}
for name, (pat, kind) in pats.items():
    v = {s: [float(re.search(pat, open(f"{w}/{kind}.{s}.{i}.txt").read()).group(1).replace(",", ""))
             for i in range(1, rounds + 1)] for s in ("old", "new")}
    o, n = st.median(v["old"]), st.median(v["new"])
    print(f"{name:32s} old {o:10.2f}  new {n:10.2f}  new/old {n / o:.3f}")
PY
