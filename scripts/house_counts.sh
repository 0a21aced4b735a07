#!/usr/bin/env bash
# The counts of ../shared/design/HOUSE-REVIEW.md's table (issue #51), measured again on this tree:
#   scripts/house_counts.sh
# Each line prints what is counted and the number; the commands are the ones below, so a reader
# can rerun any of them. Needs only grep, awk, find and python3 (for the import cycles).
set -euo pipefail
cd "$(dirname "$0")/.."

count() { printf '%-72s %s\n' "$1" "$2"; }
rs() { find crates -path '*/src/*' -name '*.rs' "$@"; }
lib_rs() { rs -not -path 'crates/stokehold-cli/*' -not -path 'crates/stokehold-testkit/*'; }

count "Samples trait: methods" \
  "$(awk '/^pub trait Samples/{f=1} f&&/^}/{f=0} f' crates/stokehold/src/samples/mod.rs | grep -cE '^    fn ')"
count "Samples trait: names of a kind or backend (Blend|Remote|Mixture)" \
  "$(awk '/^pub trait Samples/{f=1} f&&/^}/{f=0} f' crates/stokehold/src/samples/mod.rs | grep -cE 'Blend|Remote|Mixture' || true)"
count "format crate: lines of src" "$(cat $(find crates/stokehold-format/src -name '*.rs') | wc -l)"
count "format crate: I/O dependencies (tokio|object_store|io-uring|reqwest)" \
  "$(grep -cE '^(tokio|object_store|io-uring|reqwest)' crates/stokehold-format/Cargo.toml || true)"
count "format crate: std::fs / std::net / File uses in src" \
  "$(grep -rnE 'std::fs|std::net|File::open|fs::read' crates/stokehold-format/src | grep -v '^\s*//' | wc -l)"
count "local vs remote branches outside the storage crate (url_scheme|kind() ==|contains(\"://\"))" \
  "$(grep -rnE 'url_scheme\(|kind\(\) == "|contains\("://"\)' crates/*/src python/stokehold --include=*.rs --include=*.py | grep -v '^crates/stokehold-storage/' | wc -l)"
count "Result<_, String> outside the CLI (any nesting)" \
  "$(grep -nE 'Result<.*, String>' $(lib_rs) | wc -l)"
count "Result<_, String> in the CLI" \
  "$(grep -rnE 'Result<.*, String>' crates/stokehold-cli/src | wc -l)"
count "EngineError::Config(" "$(grep -rn 'EngineError::Config(' crates/*/src | wc -l)"
count "eprintln! in library code (not the CLI)" "$(grep -n 'eprintln!' $(lib_rs) | wc -l)"
for f in _loader _mixture _options _sequence; do
  count "raise ConfigError in python/stokehold/$f.py" "$(grep -c 'raise ConfigError' python/stokehold/$f.py || true)"
done
count "raise ConfigError in the Python package" "$(grep -rn 'raise ConfigError' python/stokehold | wc -l)"
count "error types (thiserror derives) in the crates" "$(grep -rn 'derive(.*Error' crates/*/src | wc -l)"
count "test binaries (tests/*.rs and tests/*/main.rs)" \
  "$( (ls crates/*/tests/*.rs 2>/dev/null; ls crates/*/tests/*/main.rs 2>/dev/null) | wc -l)"
count "ARCHITECTURE.md: lines" "$(wc -l < ARCHITECTURE.md)"
count "ARCHITECTURE.md: words" "$(wc -w < ARCHITECTURE.md)"
printf '%s\n' "import cycles (scripts/module_cycles.py):"
python3 scripts/module_cycles.py | sed 's/^/  /'
