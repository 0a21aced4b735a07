#!/bin/bash
# Instructions per sample in steady state (issue #51): the engine's samples paths under callgrind.
#
#   scripts/callgrind/run.sh prep DIR SET STOKEHOLD    # make data set SET (1 or 2) in DIR
#   scripts/callgrind/run.sh run DIR STOKEHOLD TAG [NAMES...]
#
# (prep needs `tokenizers`: PYTHON=.venv/bin/python.) STOKEHOLD is a release build of the CLI (cargo build --release -p stokehold-cli; copy
# target/release/stokehold aside to compare two commits). Each workload runs for E1 and E2 epochs
# (page cache warmed first); per sample = (Ir(E2) - Ir(E1)) / (fills(E2) - fills(E1)), fills
# counted by callgrind, so start-up, index building and the epoch prepared ahead cancel out as long
# as both runs do the same one-time work (run a workload once before comparing when a kept index
# may be missing). Results are appended to DIR/results.txt. Instruction counts do not move with
# the machine's load, unlike wall time.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
case "$1" in
prep)
  B=$2; SET=$3; S=$4; mkdir -p "$B"
  "$S" sample-data "$B/img" --images $((200 + 100 * SET)) --classes $((2 + SET)) --seed "$SET"
  python3 "$here/gen.py" "$B" "$SET"
  "${PYTHON:-python3}" - "$B" <<'PY'
import sys
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
B = sys.argv[1]
tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
tok.train([f"{B}/text.jsonl"], trainers.WordLevelTrainer(special_tokens=["[UNK]", "</s>"]))
tok.save(f"{B}/tok.json")
PY
  for i in 1 2 3; do "$S" pack "$B/text$i.jsonl" "$B/tok$i" --from jsonl --text-field text --tokenizer "$B/tok.json" --shard-size 1MiB --threads 2; done
  "$S" pack "$B/text.jsonl" "$B/tok" --from jsonl --text-field text --tokenizer "$B/tok.json" --shard-size 1MiB --threads 2
  "$S" pack "$B/img" "$B/imgds" --shard-size 4MiB --threads 2
  printf '[sources]\na = "tok1"\nb = "tok2"\nc = "tok3"\n[weights]\na = 1\nb = 1\nc = 1\n' > "$B/mix.toml"
  ;;
run)
  B=$2; S=$3; TAG=$4; shift 4
  C="--threads 1 --batch-size 32 --shuffle --no-storage --no-profile"
  declare -A W=(
    [rec-img]="$B/imgds $C|1|3|Records as stokehold::samples::Samples>::fill"
    [rec-doc]="$B/tok $C|1|2|Records as stokehold::samples::Samples>::fill"
    [win-2048]="$B/tok --seq-len 2048 $C|1|3|Tokens as stokehold::samples::Samples>::fill"
    [win-256]="$B/tok --seq-len 256 $C|1|2|Tokens as stokehold::samples::Samples>::fill"
    [rrc]="$B/imgds --random-resized-crop 224 --flip $C|1|2|Records as stokehold::samples::Samples>::fill"
    [mix-win-2048]="$B/mix.toml --seq-len 2048 $C|1|3|Tokens as stokehold::samples::Samples>::fill"
    [tfr]="$B/tfr $C|1|3|Records as stokehold::samples::Samples>::fill"
  )
  NAMES=${*:-rec-img rec-doc win-2048 win-256 rrc mix-win-2048 tfr}
  for n in $NAMES; do
    IFS='|' read -r args e1 e2 fn <<< "${W[$n]}"
    cat "$B"/tok*/* "$B"/imgds/* "$B"/tfr/* > /dev/null
    declare -A ir fills
    for e in $e1 $e2; do
      out=$B/cg.$TAG.$n.e$e.out
      # shellcheck disable=SC2086
      valgrind --tool=callgrind --callgrind-out-file="$out" "$S" bench $args --epochs "$e" > "$B/log.$TAG.$n.e$e" 2>&1
      ir[$e]=$(grep -o "Collected : [0-9]*" "$B/log.$TAG.$n.e$e" | awk '{print $3}')
      # every call site counted (a caller that inlines the one calling it included)
      fills[$e]=$(python3 "$here/calls.py" "$out" "$fn")
    done
    per=$(python3 -c "print(f'{(${ir[$e2]}-${ir[$e1]})/(${fills[$e2]}-${fills[$e1]}):.1f}')")
    echo "$TAG $n Ir(e$e1)=${ir[$e1]} Ir(e$e2)=${ir[$e2]} fills=${fills[$e1]},${fills[$e2]} per_sample=$per" | tee -a "$B/results.txt"
  done
  ;;
*) echo "usage: $0 prep DIR SET STOKEHOLD | run DIR STOKEHOLD TAG [NAMES...]" >&2; exit 2 ;;
esac
