//! `stokehold bench` over token datasets (`--seq-len`) and from a whole loader description
//! (`--config`, the `EngineSpec` that `loader.config` shows in Python).

use std::fs;
use std::process::ExitCode;

use stokehold_cli::run_captured;

fn ok(args: &[&str]) -> String {
    let (r, out) = run_captured(args);
    match r {
        Ok(code) => assert_eq!(code, ExitCode::SUCCESS, "{args:?}: {out}"),
        Err(e) => panic!("{args:?}: {e:#}\n{out}"),
    }
    out
}

/// A token dataset of 40 synthetic documents, packed by the CLI.
fn token_dataset(tmp: &std::path::Path) -> std::path::PathBuf {
    use stokehold_ops::text::{synthetic_documents, train_word_level};
    let docs = synthetic_documents(40, 7);
    let tok = train_word_level(&docs, 1000).unwrap();
    let tp = tmp.join("tokenizer.json");
    fs::write(&tp, tok.inner().to_string(false).unwrap()).unwrap();
    let jsonl = tmp.join("corpus.jsonl");
    let lines: String = docs
        .iter()
        .map(|d| format!("{}\n", serde_json::json!({ "text": d })))
        .collect();
    fs::write(&jsonl, lines).unwrap();
    let ds = tmp.join("tok");
    ok(&[
        "pack",
        jsonl.to_str().unwrap(),
        ds.to_str().unwrap(),
        "--tokenizer",
        tp.to_str().unwrap(),
        "--append-eos",
        "</s>",
    ]);
    ds
}

#[test]
fn bench_streams_token_windows_with_seq_len() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = token_dataset(tmp.path());
    let d = ds.to_str().unwrap();
    let out = ok(&[
        "bench",
        d,
        "--seq-len",
        "16",
        "--batch-size",
        "4",
        "--threads",
        "2",
        "--no-storage",
    ]);
    assert!(out.contains("batch 4"), "{out}");
    assert!(
        out.contains("window"),
        "the token stage is in the profile: {out}"
    );
    // image flags make no sense for tokens
    let (r, _) = run_captured(&["bench", d, "--seq-len", "16", "--random-resized-crop", "8"]);
    assert!(r.is_err());
    // a token dataset without --seq-len is streamed as stored records
    let out = ok(&["bench", d, "--batch-size", "4", "--no-storage"]);
    assert!(out.contains("tokens"), "{out}");
}

#[test]
fn bench_runs_a_loader_config_file_and_flags_fill_in_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = token_dataset(tmp.path());
    let d = ds.to_str().unwrap();
    let cfg = tmp.path().join("loader.json");
    fs::write(
        &cfg,
        r#"{"loader": {"batch_size": 3, "threads": 1, "memory_budget": "64MiB"},
            "samples": {"kind": "tokens", "mode": {"kind": "documents", "max_len": 12,
                        "pad_id": 0, "bucket": 4}, "dtype": "i64",
                        "position_ids": true, "segment_ids": false}}"#,
    )
    .unwrap();
    let c = cfg.to_str().unwrap();
    let out = ok(&["bench", d, "--config", c, "--no-storage"]);
    // the file's batch size and thread count, the flags' (default) rest
    assert!(out.contains("batch 3, 1 thread,"), "{out}");
    assert!(out.contains("document"), "documents mode: {out}");
    // a bad key is named by its path
    fs::write(
        &cfg,
        r#"{"loader": {"cache_bytes": "lots"}, "samples": {"kind": "records"}}"#,
    )
    .unwrap();
    let (r, _) = run_captured(&["bench", d, "--config", c, "--no-storage"]);
    let e = format!("{:#}", r.unwrap_err());
    assert!(
        e.contains("loader.cache_bytes") && e.contains("not a byte count"),
        "{e}"
    );
    fs::write(
        &cfg,
        r#"{"loader": {}, "samples": {"kind": "records"}, "extra": 1}"#,
    )
    .unwrap();
    let (r, _) = run_captured(&["bench", d, "--config", c, "--no-storage"]);
    let e = format!("{:#}", r.unwrap_err());
    assert!(e.contains("unknown field") && e.contains("extra"), "{e}");
}

#[test]
fn bench_streams_a_mixture_file_in_toml_or_json_and_reports_each_source() {
    let tmp = tempfile::tempdir().unwrap();
    let a = token_dataset(tmp.path());
    let b = tmp.path().join("tok2");
    // the same tokens again under another name: a second source with the same vocabulary
    fs::create_dir(&b).unwrap();
    for e in fs::read_dir(&a).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), b.join(e.file_name())).unwrap();
    }
    let toml = tmp.path().join("mix.toml");
    fs::write(
        &toml,
        "[sources]\nweb = \"tok\"\ncode = \"tok2\"\n[weights]\nweb = 0.75\ncode = 0.25\n",
    )
    .unwrap();
    let out = ok(&[
        "bench",
        toml.to_str().unwrap(),
        "--seq-len",
        "8",
        "--batch-size",
        "4",
        "--threads",
        "2",
        "--no-storage",
    ]);
    let line = |name: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no line for {name}: {out}"))
            .to_string()
    };
    assert!(line("web").contains("0.750"), "{out}");
    assert!(line("code").contains("0.250"), "{out}");
    // in the file's order (a source's index is its place there)
    assert!(
        out.find("  web").unwrap() < out.find("  code").unwrap(),
        "{out}"
    );
    // JSON, with a source that is not in the list: named
    let json = tmp.path().join("mix.json");
    fs::write(
        &json,
        r#"{"sources": {"web": "tok", "code": "tok2"}, "weights": {"web": 1, "books": 1}}"#,
    )
    .unwrap();
    let (r, out) = run_captured(&["bench", json.to_str().unwrap(), "--seq-len", "8"]);
    let e = format!("{:#}", r.unwrap_err());
    assert!(e.contains("'books' is not a source"), "{e}\n{out}");
}
