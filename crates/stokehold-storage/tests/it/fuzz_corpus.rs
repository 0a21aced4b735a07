//! The fuzz corpora in `fuzz/corpus/{shard,shard_parse,manifest}` replayed as ordinary tests, plus random
//! mutations of a valid shard (row A6 of the reliability matrix: no panic on any input).

use std::path::Path;

use proptest::prelude::*;
use stokehold_format::fuzzing::{fuzz_manifest, fuzz_shard, fuzz_shard_parse};

fn replay(dir: &str, f: fn(&[u8])) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(dir);
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            f(&std::fs::read(&p).unwrap());
            n += 1;
        }
    }
    n
}

#[test]
fn shard_corpus_replays_without_panic() {
    assert!(replay("shard", fuzz_shard) >= 5);
}

#[test]
fn shard_parse_corpus_replays_without_panic() {
    // The shard corpus through the pure parse functions, and the token shards of its own corpus.
    assert!(replay("shard", fuzz_shard_parse) >= 5);
    assert!(replay("shard_parse", fuzz_shard_parse) >= 2);
}

#[test]
fn manifest_corpus_replays_without_panic() {
    assert!(replay("manifest", fuzz_manifest) >= 5);
}

fn valid_shard() -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/v1/shard-000000.skh"))
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn mutated_shards_never_panic(edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
                                  cut in any::<prop::sample::Index>()) {
        let mut b = valid_shard();
        for (at, v) in edits {
            let i = at.index(b.len());
            b[i] = v;
        }
        let keep = cut.index(b.len() + 1);
        fuzz_shard(&b);
        fuzz_shard(&b[..keep]);
        fuzz_shard_parse(&b);
        fuzz_shard_parse(&b[..keep]);
    }

    #[test]
    fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..4096)) {
        fuzz_shard(&b);
        fuzz_shard_parse(&b);
        fuzz_manifest(&b);
    }
}
