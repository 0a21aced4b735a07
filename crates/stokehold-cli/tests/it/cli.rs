//! The command line, end to end: sample-data → pack → verify → inspect, and what users see when
//! something is wrong.

use std::fs;
use std::process::ExitCode;

use stokehold::format::FieldValue;
use stokehold_cli::run_captured;

fn ok(args: &[&str]) -> String {
    let (r, out) = run_captured(args);
    match r {
        Ok(code) => assert_eq!(code, ExitCode::SUCCESS, "{args:?}: {out}"),
        Err(e) => panic!("{args:?}: {e:#}\n{out}"),
    }
    out
}

#[test]
fn pack_verify_inspect_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let imgs = tmp.path().join("imgs");
    let ds = tmp.path().join("ds");
    let (imgs_s, ds_s) = (imgs.to_str().unwrap(), ds.to_str().unwrap());
    let out = ok(&[
        "sample-data",
        imgs_s,
        "--images",
        "30",
        "--classes",
        "3",
        "--size",
        "40x30",
    ]);
    assert!(out.starts_with("wrote 30 JPEGs in 3 classes"), "{out}");
    fs::write(imgs.join("class_001/readme.txt"), "hello").unwrap();

    // 1 of 31 inputs skipped is more than the default 1%: a failure, and nothing is written
    let (r, _) = run_captured(&["pack", imgs_s, ds_s]);
    let msg = r.unwrap_err().to_string();
    assert!(
        msg.contains("1 of 31 inputs were skipped") && msg.contains("readme.txt"),
        "{msg}"
    );
    assert!(!ds.exists());
    let out = ok(&[
        "pack",
        imgs_s,
        ds_s,
        "--shard-size",
        "8KiB",
        "--threads",
        "2",
        "--max-skip-fraction",
        "0.05",
        "--no-restart-markers",
    ]);
    assert!(
        out.starts_with("packed 30 samples from image-folder"),
        "{out}"
    );
    assert!(out.contains("3 classes"), "{out}");
    assert!(
        out.contains("1 input skipped") && out.contains("readme.txt: not an image"),
        "{out}"
    );
    assert!(!out.contains("restart markers"), "{out}");

    let out = ok(&["verify", ds_s]);
    assert!(
        out.starts_with("ok: ") && out.contains(" 30 records"),
        "{out}"
    );

    let out = ok(&["inspect", ds_s, "--sample", "12"]);
    assert!(
        out.contains("schema    image: image:auto, label: int64, path: string"),
        "{out}"
    );
    assert!(
        out.contains("classes   3: class_000, class_001, class_002"),
        "{out}"
    );
    assert!(out.contains("label        1 (class_001)"), "{out}");
    assert!(out.contains("3 components, baseline, "), "{out}");
    assert!(out.contains("jpegs     stored as given"), "{out}");
    // with --no-restart-markers the JPEGs are stored byte for byte
    let d = stokehold::format::Dataset::open(&ds).unwrap();
    for i in 0..d.len() {
        let v = d.get(i).unwrap();
        let (FieldValue::Image(b), FieldValue::String(rel)) = (&v[0], &v[2]) else {
            panic!("{v:?}")
        };
        assert_eq!(b.as_ref(), fs::read(imgs.join(rel.as_ref())).unwrap());
    }

    let json = ok(&["inspect", ds_s, "--json"]);
    let m: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(m["total_records"], 30);

    // packing again into an existing dataset is refused, with --overwrite it is replaced
    let (r, _) = run_captured(&["pack", imgs_s, ds_s]);
    assert!(r.unwrap_err().to_string().contains("already exists"));
    // by default pack rewrites them losslessly with restart markers, and inspect says so
    // (`--restart-markers`, the old opt-in, is still accepted)
    for extra in [&[][..], &["--restart-markers"][..]] {
        let mut args = vec![
            "pack",
            imgs_s,
            ds_s,
            "--overwrite",
            "--max-skip-fraction",
            "0.05",
        ];
        args.extend_from_slice(extra);
        let out = ok(&args);
        assert!(
            out.contains(
                "  JPEGs given restart markers for fast crops (lossless; --no-restart-markers \
                 keeps them as given)"
            ),
            "{out}"
        );
        let out = ok(&["inspect", ds_s, "--sample", "12"]);
        assert!(
            out.contains("3 components, baseline with row-aligned restart markers, ")
                && out.contains("jpegs     rewritten losslessly with row-aligned restart"),
            "{out}"
        );
    }
    let (r, _) = run_captured(&[
        "pack",
        imgs_s,
        ds_s,
        "--overwrite",
        "--restart-markers",
        "--no-restart-markers",
    ]);
    assert!(r.is_err(), "contradicting flags are refused");
}

#[test]
fn verify_reports_the_exact_place_of_a_fault_and_exits_1() {
    let tmp = tempfile::tempdir().unwrap();
    let imgs = tmp.path().join("imgs");
    let ds = tmp.path().join("ds");
    let (imgs_s, ds_s) = (imgs.to_str().unwrap(), ds.to_str().unwrap());
    ok(&[
        "sample-data",
        imgs_s,
        "--images",
        "12",
        "--classes",
        "2",
        "--size",
        "32x24",
    ]);
    ok(&["pack", imgs_s, ds_s, "--shard-size", "4KiB"]);
    let shard = ds.join("shard-000001.skh");
    let mut b = fs::read(&shard).unwrap();
    b[40] ^= 0x80; // inside the first record of the second shard
    fs::write(&shard, b).unwrap();
    let (r, out) = run_captured(&["verify", ds_s]);
    assert_eq!(r.unwrap(), ExitCode::from(1));
    assert!(
        out.contains("shard-000001.skh")
            && out.contains("checksum mismatch in record 0 (global sample "),
        "{out}"
    );
    assert!(out.contains("FAILED"), "{out}");
    let (r, out) = run_captured(&["verify", ds_s, "--all"]);
    assert_eq!(r.unwrap(), ExitCode::from(1));
    assert_eq!(
        out.lines().filter(|l| l.starts_with("error: ")).count(),
        3,
        "record + two whole-file checksums: {out}"
    );
}

#[test]
fn usage_errors_are_clear() {
    let (r, _) = run_captured(&["pack", "/nonexistent/src", "/tmp/x", "--from", "orc"]);
    let e = r.unwrap_err().to_string();
    assert!(
        e.contains("unknown --from \"orc\"") && e.contains("parquet"),
        "{e}"
    );
    let (r, _) = run_captured(&["inspect", "/nonexistent/ds"]);
    assert!(
        r.unwrap_err()
            .to_string()
            .contains("/nonexistent/ds: no such directory")
    );
}

#[test]
fn bench_reads_every_sample_and_reports_stages() {
    let tmp = tempfile::tempdir().unwrap();
    let imgs = tmp.path().join("imgs");
    let ds = tmp.path().join("ds");
    let (imgs_s, ds_s) = (imgs.to_str().unwrap(), ds.to_str().unwrap());
    ok(&[
        "sample-data",
        imgs_s,
        "--images",
        "20",
        "--classes",
        "2",
        "--size",
        "32x24",
    ]);
    ok(&["pack", imgs_s, ds_s, "--shard-size", "4KiB"]);
    let out = ok(&[
        "bench",
        ds_s,
        "--shuffle",
        "--epochs",
        "3",
        "--threads",
        "2",
        "--batch-size",
        "8",
    ]);
    assert!(
        out.contains("20 samples x 3 epochs, batch 8, 2 threads, prefetch 4, global shuffle"),
        "{out}"
    );
    // 20 samples in batches of 8, the last partial batch dropped as the Loader drops it: 2
    // batches of 8 per epoch; every figure of the throughput line says what it counts
    assert!(out.contains("(48 samples in "), "{out}");
    assert!(out.contains("of batches delivered"), "{out}");
    assert!(
        out.contains("read ") && out.contains("parse ") && out.contains("image/collate"),
        "{out}"
    );
    assert!(out.contains("batches 6 "), "{out}");
    // padded, as the Loader's drop_last=False: 3 batches of 8 per epoch
    let padded = ok(&[
        "bench",
        ds_s,
        "--epochs",
        "3",
        "--batch-size",
        "8",
        "--pad-last",
        "--no-storage",
    ]);
    assert!(padded.contains("(72 samples in "), "{padded}");
    // a batch larger than the dataset drops every sample: refused, as the Loader refuses it
    let (r, _) = run_captured(&["bench", ds_s, "--batch-size", "64", "--no-storage"]);
    let msg = format!("{:#}", r.unwrap_err());
    assert!(
        msg.contains("--batch-size 64 is larger than an epoch") && msg.contains("--pad-last"),
        "{msg}"
    );
    // a corrupt record stops the bench with the record named
    let shard = ds.join("shard-000000.skh");
    let mut b = fs::read(&shard).unwrap();
    b[40] ^= 1;
    fs::write(&shard, b).unwrap();
    let (r, _) = run_captured(&["bench", ds_s, "--batch-size", "4"]);
    let msg = format!("{:#}", r.unwrap_err());
    assert!(
        msg.contains("shard-000000.skh") && msg.contains("record 0"),
        "{msg}"
    );
}

#[test]
fn bench_reports_stall_bottleneck_and_sweeps() {
    let tmp = tempfile::tempdir().unwrap();
    let imgs = tmp.path().join("imgs");
    let ds = tmp.path().join("ds");
    let (imgs_s, ds_s) = (imgs.to_str().unwrap(), ds.to_str().unwrap());
    ok(&[
        "sample-data",
        imgs_s,
        "--images",
        "24",
        "--classes",
        "2",
        "--size",
        "48x32",
    ]);
    ok(&["pack", imgs_s, ds_s]);
    // a slow simulated step: the pipeline keeps up, the stall is small and named as such
    let out = ok(&[
        "bench",
        ds_s,
        "--batch-size",
        "4",
        "--random-resized-crop",
        "16",
        "--flip",
        "--step-ms",
        "30",
    ]);
    assert!(
        out.contains("data stall  ") && out.contains("at 30 ms per step"),
        "{out}"
    );
    assert!(out.contains("image/decode+crop+resize"), "{out}");
    assert!(out.contains("p99 us"), "{out}");
    assert!(
        out.contains("bottleneck  none: the pipeline keeps up"),
        "{out}"
    );
    // without a step, the bottleneck line names the stage with the largest share of the
    // profile (which stage that is depends on timing on a busy machine: parse can outweigh the
    // decode of such small images; the advice itself is unit-tested in bench.rs)
    let out = ok(&[
        "bench",
        ds_s,
        "--batch-size",
        "4",
        "--random-resized-crop",
        "16",
        "--threads",
        "1",
    ]);
    let line = out
        .lines()
        .find(|l| l.starts_with("bottleneck  "))
        .unwrap_or_else(|| panic!("no bottleneck line: {out}"));
    let largest = out
        .lines()
        .skip_while(|l| !l.contains("share"))
        .skip(1)
        .take_while(|l| l.starts_with("  ") && l.contains('%'))
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let stage = words.next()?;
            let share: f64 = words.nth(1)?.trim_end_matches('%').parse().ok()?;
            Some((share, stage.to_string()))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .unwrap_or_else(|| panic!("no profile: {out}"));
    assert!(line.contains(&largest.1), "{largest:?}: {out}");
    let plot = tmp.path().join("sweep.svg");
    let out = ok(&[
        "bench",
        ds_s,
        "--batch-size",
        "4",
        "--random-resized-crop",
        "16",
        "--sweep",
        "--sweep-seconds",
        "0.05",
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert!(
        out.contains("best        ") && out.contains("prefetch 8"),
        "{out}"
    );
    let svg = fs::read_to_string(&plot).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.matches("<polyline").count() == 4,
        "{svg}"
    );
}

/// A small packed image dataset for the bench tests.
fn image_dataset(tmp: &std::path::Path, images: &str) -> std::path::PathBuf {
    let imgs = tmp.join("imgs");
    let ds = tmp.join("ds");
    ok(&[
        "sample-data",
        imgs.to_str().unwrap(),
        "--images",
        images,
        "--classes",
        "2",
        "--size",
        "40x32",
    ]);
    ok(&[
        "pack",
        imgs.to_str().unwrap(),
        ds.to_str().unwrap(),
        "--shard-size",
        "8KiB",
    ]);
    ds
}

#[test]
fn bench_writes_a_chrome_trace_with_spans_of_every_stage() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = image_dataset(tmp.path(), "16");
    let trace = tmp.path().join("trace.json");
    let out = ok(&[
        "bench",
        ds.to_str().unwrap(),
        "--batch-size",
        "4",
        "--threads",
        "2",
        "--random-resized-crop",
        "16",
        "--flip",
        "--trace",
        trace.to_str().unwrap(),
        "--no-storage",
    ]);
    assert!(out.contains("trace       "), "{out}");
    let doc: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&trace).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let spans: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
    for stage in [
        "read",
        "parse",
        // the flip is fused into the decode stage
        "image/decode+crop+resize",
        "label/collate",
        "path/collate",
    ] {
        let of_stage: Vec<_> = spans.iter().filter(|e| e["name"] == stage).collect();
        // one span per sample (parse: one per column)
        assert!(of_stage.len() >= 16, "{stage}: {} spans", of_stage.len());
        let mut ids: Vec<u64> = of_stage
            .iter()
            .map(|e| e["args"]["id"].as_u64().unwrap())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids, (0..16).collect::<Vec<u64>>(), "{stage}");
    }
    for e in &spans {
        assert!(e["dur"].as_f64().unwrap() >= 0.0 && e["pid"].is_u64() && e["tid"].is_u64());
    }
    // thread names for the viewer
    assert!(
        events
            .iter()
            .any(|e| e["ph"] == "M" && e["name"] == "thread_name")
    );
}

#[test]
fn bench_reports_storage_bytes_read_and_the_profiling_switch() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = image_dataset(tmp.path(), "12");
    let ds_s = ds.to_str().unwrap();
    let out = ok(&["bench", ds_s, "--batch-size", "4", "--shuffle"]);
    assert!(
        out.contains("storage     the pipeline read ")
            && out.contains("in random record reads")
            && out.contains("of the random-read rate"),
        "{out}"
    );
    assert!(
        out.contains(" · read 0."),
        "bytes read in the profile: {out}"
    );
    let out = ok(&[
        "bench",
        ds_s,
        "--batch-size",
        "4",
        "--no-profile",
        "--no-storage",
    ]);
    assert!(!out.contains("storage     "), "{out}");
    assert!(out.contains("(stage timing was off)"), "{out}");
    assert!(
        out.contains("bottleneck  unknown (stage timing was off)"),
        "{out}"
    );
    // --overhead: both figures and the cost
    let out = ok(&["bench", ds_s, "--batch-size", "4", "--overhead", "2"]);
    assert!(
        out.contains("profiling   on ") && out.contains("stage timing costs"),
        "{out}"
    );
    assert_eq!(out.matches("rounds      ").count(), 1, "{out}");
}

#[test]
fn bench_storage_prints_sequential_random_and_pipeline_figures() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = image_dataset(tmp.path(), "12");
    let ds_s = ds.to_str().unwrap();
    for extra in [&[][..], &["--direct", "--shuffle"][..], &["--warm"][..]] {
        let mut args = vec![
            "bench",
            "storage",
            ds_s,
            "--seconds",
            "0.2",
            "--batch-size",
            "4",
        ];
        args.extend_from_slice(extra);
        let out = ok(&args);
        for line in [
            "storage     ",
            "sequential  ",
            "random      ",
            "pipeline    consumes ",
            "verdict     ",
        ] {
            assert!(out.contains(line), "{args:?}: {line:?} in {out}");
        }
        if extra.contains(&"--direct") {
            assert!(out.contains("O_DIRECT"), "{out}");
            assert!(out.contains("random record reads"), "{out}");
        } else if extra.contains(&"--warm") {
            assert!(out.contains("page cache warm"), "{out}");
        } else {
            assert!(out.contains("posix_fadvise"), "{out}");
        }
    }
    // a subcommand and a dataset are exclusive; a dataset is needed without one
    let (r, _) = run_captured(&["bench"]);
    assert!(r.is_err());
    let (r, _) = run_captured(&["bench", "storage"]);
    assert!(r.is_err());
}

#[test]
fn bench_sweep_with_autotune_compares_the_autotuned_run() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = image_dataset(tmp.path(), "12");
    let out = ok(&[
        "bench",
        ds.to_str().unwrap(),
        "--batch-size",
        "4",
        "--sweep",
        "--sweep-seconds",
        "0.05",
        "--autotune",
        "--duration",
        "5.5",
        "--rounds",
        "1",
    ]);
    assert!(out.contains("best        "), "{out}");
    assert!(
        out.contains("autotune    round 1: best fixed (") && out.contains("autotuned   "),
        "{out}"
    );
    // the chart is SVG only: another extension is refused before anything runs
    let (r, _) = run_captured(&[
        "bench",
        ds.to_str().unwrap(),
        "--sweep",
        "--plot",
        "curve.png",
    ]);
    assert!(format!("{:#}", r.unwrap_err()).contains(".svg"));
}

#[test]
fn pack_tokenizer_writes_a_verifiable_token_dataset() {
    use stokehold_ops::text::{synthetic_documents, train_word_level};
    let tmp = tempfile::tempdir().unwrap();
    let docs = synthetic_documents(50, 4);
    let tok = train_word_level(&docs, 1000).unwrap();
    let tp = tmp.path().join("tokenizer.json");
    fs::write(&tp, tok.inner().to_string(false).unwrap()).unwrap();
    let jsonl = tmp.path().join("corpus.jsonl");
    let lines: String = docs
        .iter()
        .map(|d| format!("{}\n", serde_json::json!({ "body": d })))
        .collect();
    fs::write(&jsonl, lines + "not json\n").unwrap();
    let ds = tmp.path().join("tok");
    let (jsonl_s, tp_s, ds_s) = (
        jsonl.to_str().unwrap(),
        tp.to_str().unwrap(),
        ds.to_str().unwrap(),
    );
    let out = ok(&[
        "pack",
        jsonl_s,
        ds_s,
        "--from",
        "jsonl",
        "--text-field",
        "body",
        "--tokenizer",
        tp_s,
        "--prepend-bos",
        "<s>",
        "--append-eos",
        "</s>",
        "--max-skip-fraction",
        "0.05",
    ]);
    assert!(out.starts_with("packed 50 samples from jsonl"), "{out}");
    assert!(out.contains("1 input skipped"), "{out}");
    assert!(out.contains(":51: invalid JSON"), "{out}");
    assert!(out.contains("tokens (u16 each) in 50 documents"), "{out}");
    let out = ok(&["verify", ds_s]);
    assert!(out.starts_with("ok:"), "{out}");

    let (r, _) = run_captured(&[
        "pack",
        jsonl_s,
        tmp.path().join("x").to_str().unwrap(),
        "--from",
        "csv",
        "--tokenizer",
        tp_s,
    ]);
    let e = r.unwrap_err();
    assert!(
        format!("{e:#}").contains("--tokenizer reads JSONL"),
        "{e:#}"
    );
    let (r, _) = run_captured(&[
        "pack",
        jsonl_s,
        tmp.path().join("y").to_str().unwrap(),
        "--tokenizer",
        tp_s,
        "--append-eos",
        "<eos>",
    ]);
    let e = r.unwrap_err();
    assert!(
        format!("{e:#}").contains("\"<eos>\" is not in the tokenizer's vocabulary"),
        "{e:#}"
    );
}

#[test]
fn bench_runs_with_caches_and_access_modes_and_reports_them() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = image_dataset(tmp.path(), "12");
    let d = ds.to_str().unwrap();
    let common = [
        "bench",
        d,
        "--batch-size",
        "4",
        "--threads",
        "2",
        "--random-resized-crop",
        "16",
        "--epochs",
        "2",
        "--no-storage",
    ];
    let out = ok(&[&common[..], &["--decoded-cache", "24"]].concat());
    assert!(out.contains("decoded cache: "), "{out}");
    assert!(out.contains("12 entries"), "every image kept: {out}");
    // the stage is named for the cache (which bottleneck sentence follows depends on timing:
    // the advice itself is unit-tested in bench.rs)
    assert!(out.contains("image/decoded-cache+crop+resize"), "{out}");
    // with a directory, a second run decodes nothing
    let dir = tmp.path().join("decoded");
    let with_dir = [
        &common[..],
        &["--decoded-cache", "24", "--decoded-cache-dir"],
        &[dir.to_str().unwrap()],
    ]
    .concat();
    let out = ok(&with_dir);
    assert!(
        out.contains("decoded-disk cache: 0.0% hits (0 of 12)"),
        "{out}"
    );
    let out = ok(&with_dir);
    assert!(
        out.contains("decoded-disk cache: 100.0% hits (12 of 12) · 12 entries"),
        "{out}"
    );
    let out = ok(&[&common[..], &["--cache", "64MiB", "--access", "pread"]].concat());
    assert!(out.contains("records cache: "), "{out}");
    let out = ok(&[&common[..], &["--access", "memory"]].concat());
    assert!(!out.contains("cache: "), "{out}");
    let (r, _) = run_captured(&[&common[..], &["--access", "nvme"]].concat());
    assert!(format!("{:#}", r.unwrap_err()).contains("unknown access"));
}
