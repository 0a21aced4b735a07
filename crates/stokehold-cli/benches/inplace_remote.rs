//! Files read in place from object storage (`cargo bench -p stokehold-cli --bench
//! inplace_remote`): 1,000 TFRecord files in a real S3-compatible server (moto's, from `.venv`,
//! on 127.0.0.1) behind the project's fault proxy adding 20 ms to every request, opened with
//! their indexes kept from a first open, and the time to the first batch of the decode
//! pipeline (RandomResizedCrop(224) + flip, batches of 256, 2 threads). Target (#36): < 3 s.
//! The first open (every file scanned through the proxy) is printed beside it, and the same
//! against the files on local disk as the baseline of the same run.
//! Environment: `STOKEHOLD_BENCH_FILES` (default 1000), `STOKEHOLD_BENCH_DELAY_MS` (20).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use stokehold_testkit as testing;

use stokehold::format::{Dataset, OpenOptions};
use stokehold::{EngineSpec, Loader};
use stokehold_ingest::example::{Example, Feature, encode_example};
use stokehold_ingest::inplace::{InPlaceOptions, open};
use stokehold_testkit::{FaultProxy, Faults, S3Server};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn cli(args: &[&str]) {
    let (r, out) = stokehold_cli::run_captured(args);
    assert!(
        matches!(&r, Ok(code) if *code == std::process::ExitCode::SUCCESS),
        "{args:?}: {r:?}\n{out}"
    );
}

fn loader(ds: Dataset) -> Loader {
    let spec = serde_json::json!({
        "loader": {"batch_size": 256, "threads": 2, "prefetch": 4, "shuffle": "global",
                   "seed": 1, "tail": "pad"},
        "samples": {"kind": "records", "transforms": {"image/encoded": [
            {"name": "random_resized_crop", "params": {"size": 224}},
            {"name": "random_horizontal_flip", "params": {}},
        ]}},
    });
    EngineSpec::from_json(&spec.to_string())
        .unwrap()
        .build(std::sync::Arc::new(ds), OpenOptions::default(), &mut |_| {
            None
        })
        .unwrap()
        .loader
}

/// Seconds to open `path` in place and to get the first batch from it.
fn first_batch(path: &str, opts: &BTreeMap<String, String>, index: &Path) -> (f64, f64) {
    let t = Instant::now();
    let ds = open(
        &[PathBuf::from(path)],
        OpenOptions {
            storage_options: opts.clone(),
            ..OpenOptions::default()
        },
        &InPlaceOptions {
            index_dir: Some(index.to_path_buf()),
            ..InPlaceOptions::default()
        },
    )
    .unwrap();
    let opened = t.elapsed().as_secs_f64();
    let mut l = loader(ds);
    let b = l.iter().unwrap().next().unwrap().unwrap();
    std::hint::black_box(b);
    (opened, t.elapsed().as_secs_f64())
}

fn main() {
    let files = env("STOKEHOLD_BENCH_FILES", 1000);
    let delay = env("STOKEHOLD_BENCH_DELAY_MS", 20);
    let tmp = tempfile::tempdir().unwrap();
    let imgs = tmp.path().join("img");
    cli(&[
        "sample-data",
        imgs.to_str().unwrap(),
        "--images",
        &files.to_string(),
        "--size",
        "320x240",
    ]);
    let mut jpegs: Vec<PathBuf> = walk(&imgs);
    jpegs.sort();
    let tfr = tmp.path().join("tfr");
    std::fs::create_dir_all(&tfr).unwrap();
    for (i, p) in jpegs.iter().enumerate() {
        let e = Example::from_features(vec![
            ("image/encoded", Feature::bytes([std::fs::read(p).unwrap()])),
            ("image/class/label", Feature::int64s(vec![i as i64 % 10])),
        ]);
        let mut f = std::fs::File::create(tfr.join(format!("train-{i:05}-of-{files:05}.tfrecord")))
            .unwrap();
        stokehold_ingest::tfrecord::write_record(&mut f, &encode_example(&e)).unwrap();
    }
    // moto (a Python server, about 190 requests/s here) or, when `STOKEHOLD_S3S_FS` names the
    // `s3s-fs` binary (a Rust S3 server; `make bench` installs it), that one
    let fs_server = std::env::var_os("STOKEHOLD_S3S_FS").map(|bin| {
        S3Server::start_s3s_fs(Path::new(&bin), &tmp.path().join("s3"))
            .unwrap_or_else(|e| panic!("cannot start s3s-fs ({bin:?}): {e}"))
    });
    let server = match &fs_server {
        Some(s) => s,
        None => S3Server::shared(),
    };
    server.create_bucket("bench").unwrap();
    let direct = testing::options(&server.endpoint());
    testing::upload_dir(&tfr, "s3://bench/tfr", &direct).unwrap();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    proxy.set(Faults {
        delay: Duration::from_millis(delay),
        ..Faults::default()
    });
    let opts = testing::options(&proxy.endpoint());
    let (local_open, local_first) = first_batch(
        &format!("{}/", tfr.display()),
        &BTreeMap::new(),
        &tmp.path().join("ix-local"),
    );
    let ix = tmp.path().join("ix");
    let (cold_open, cold_first) = first_batch("s3://bench/tfr/", &opts, &ix);
    let (warm_open, warm_first) = first_batch("s3://bench/tfr/", &opts, &ix);
    println!(
        "{files} TFRecord files (one {}x{} JPEG each) in {} at {delay} ms a request:",
        320,
        240,
        server.kind()
    );
    println!(
        "  indexes kept: open {warm_open:.2} s, first batch after {warm_first:.2} s (target < 3 s)"
    );
    println!(
        "  first open (every file scanned): open {cold_open:.2} s, first batch after {cold_first:.2} s"
    );
    println!(
        "  local disk, first open: open {local_open:.2} s, first batch after {local_first:.2} s"
    );
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "jpg") {
            out.push(p);
        }
    }
    out
}
