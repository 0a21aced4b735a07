//! The read commands on a dataset in object storage (a real S3-compatible server started by the
//! test; credentials and endpoint from the environment, as users give them).

use std::path::Path;
use std::process::Command;

use stokehold_testkit as testing;

use stokehold_format::{FieldValue, Schema};
use stokehold_storage::{DatasetWriteOptions, DatasetWriter};
use stokehold_testkit::S3Server;

fn stokehold(server: &S3Server, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_stokehold"))
        .args(args)
        .env("AWS_ACCESS_KEY_ID", "stokehold-test")
        .env("AWS_SECRET_ACCESS_KEY", "stokehold-test-secret")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", server.endpoint())
        .env("AWS_ALLOW_HTTP", "true")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write_dataset(dir: &Path) {
    let schema = Schema::from_specs([("text", "string"), ("label", "int64")]).unwrap();
    let options = DatasetWriteOptions {
        target_shard_bytes: 4 << 10,
        ..DatasetWriteOptions::default()
    };
    let mut w = DatasetWriter::create(dir, schema, options).unwrap();
    for i in 0..300i64 {
        w.write(&[
            FieldValue::String(format!("sample {i} {}", "x".repeat(i as usize % 50)).into()),
            FieldValue::Int64(i % 7),
        ])
        .unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn inspect_verify_and_bench_read_a_dataset_in_s3() {
    let server = S3Server::shared();
    server.create_bucket("cli").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    write_dataset(&local);
    let url = "s3://cli/datasets/ds";
    testing::upload_dir(&local, url, &testing::options(&server.endpoint())).unwrap();

    let (code, out, err) = stokehold(server, &["inspect", url]);
    assert_eq!(code, 0, "{out}{err}");
    let (_, local_out, _) = stokehold(server, &["inspect", local.to_str().unwrap()]);
    assert_eq!(
        out.replace(url, "DS"),
        local_out.replace(local.to_str().unwrap(), "DS"),
        "inspect says the same of both"
    );

    let (code, out, err) = stokehold(server, &["verify", url]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("300"), "{out}");

    let (code, out, err) = stokehold(server, &["bench", url, "--epochs", "1"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("300") || err.contains("300"), "{out}{err}");

    // a damaged shard in the bucket is found by verify
    let shard = std::fs::read_dir(&local)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "skh"))
        .unwrap();
    let mut bytes = std::fs::read(&shard).unwrap();
    bytes[100] ^= 0x40;
    let store = stokehold_storage::remote::RemoteStore::open(
        "s3://cli/datasets/damaged",
        &testing::options(&server.endpoint()),
    )
    .unwrap();
    testing::upload_dir(
        &local,
        "s3://cli/datasets/damaged",
        &testing::options(&server.endpoint()),
    )
    .unwrap();
    let name = shard.file_name().unwrap().to_str().unwrap();
    testing::put(&store, name, bytes).unwrap();
    let (code, out, err) = stokehold(server, &["verify", "s3://cli/datasets/damaged"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        format!("{out}{err}").contains(&format!("s3://cli/datasets/damaged/{name}")),
        "{out}{err}"
    );

    // a missing dataset: one clear error naming the URL
    let (code, out, err) = stokehold(server, &["inspect", "s3://cli/nothing-here"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("s3://cli/nothing-here/manifest.json") && err.contains("not found"),
        "{err}"
    );
}

#[test]
fn pack_writes_a_dataset_to_s3_with_storage_option_flags_and_refuses_an_existing_one() {
    let server = S3Server::shared();
    server.create_bucket("cli-pack").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let imgs = tmp.path().join("imgs");
    let (code, out, err) = stokehold(
        server,
        &[
            "sample-data",
            imgs.to_str().unwrap(),
            "--images",
            "60",
            "--classes",
            "3",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let url = "s3://cli-pack/out/ds";
    let endpoint = format!("endpoint_url={}", server.endpoint());
    // no credentials in the environment: the flags give them
    let pack = |shard_size: &str, extra: &[&str]| {
        let mut args = vec![
            "pack",
            imgs.to_str().unwrap(),
            url,
            "--shard-size",
            shard_size,
            "--storage-option",
            &endpoint,
            "--storage-option",
            "key=stokehold-test",
            "--storage-option",
            "secret=stokehold-test-secret",
            "--storage-option",
            "region_name=us-east-1",
            "--storage-option",
            "allow_http=true",
        ];
        args.extend_from_slice(extra);
        let out = Command::new(env!("CARGO_BIN_EXE_stokehold"))
            .args(&args)
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .env_remove("AWS_ENDPOINT_URL")
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (code, out) = pack("64KiB", &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        !out.contains("stokehold-test-secret"),
        "secrets never printed: {out}"
    );
    // the same rows as a local pack
    let local = tmp.path().join("local");
    let (code, out, err) = stokehold(
        server,
        &[
            "pack",
            imgs.to_str().unwrap(),
            local.to_str().unwrap(),
            "--shard-size",
            "64KiB",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let a = stokehold_storage::Dataset::open(&local).unwrap();
    let b = stokehold_storage::Dataset::open_with(
        url,
        stokehold_storage::OpenOptions {
            storage_options: testing::options(&server.endpoint()),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(b.shards().len() > 3, "{}", b.shards().len());
    assert_eq!(a.len(), 60);
    assert_eq!(b.len(), 60);
    for i in 0..60 {
        assert_eq!(a.get(i).unwrap(), b.get(i).unwrap(), "sample {i}");
    }
    let (code, out, err) = stokehold(server, &["verify", url]);
    assert_eq!(code, 0, "{out}{err}");
    // verify and inspect take the same flags (no credentials in the environment)
    for cmd in ["verify", "inspect"] {
        let out = Command::new(env!("CARGO_BIN_EXE_stokehold"))
            .args([cmd, url, "--storage-option", &endpoint])
            .args(["--storage-option", "key=stokehold-test"])
            .args(["--storage-option", "secret=stokehold-test-secret"])
            .args(["--storage-option", "region_name=us-east-1"])
            .args(["--storage-option", "allow_http=true"])
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .env_remove("AWS_ENDPOINT_URL")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{cmd}: {text}");
        assert!(text.contains("60"), "{cmd}: {text}");
    }

    // an existing dataset: refused without --overwrite, replaced with it
    let (code, out) = pack("64KiB", &[]);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains(url) && out.contains("overwrite"), "{out}");
    let (code, out) = pack("64MiB", &["--overwrite"]);
    assert_eq!(code, 0, "{out}");
    let names = testing::names(url, &testing::options(&server.endpoint())).unwrap();
    assert_eq!(names.len(), 2, "one shard and the manifest: {names:?}");
}

/// `stokehold inspect URL` with exactly the environment `env` (no AWS variable of the caller's):
/// its stderr.
fn inspect_with(url: &str, env: &[(&str, &str)], extra: &[&str]) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_stokehold"));
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") {
            cmd.env_remove(k);
        }
    }
    // no retries: each case fails on its first request
    let out = cmd
        .arg("inspect")
        .arg(url)
        .args(["--storage-option", "retries=0"])
        .args(extra)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{url} opened");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn each_s3_misconfiguration_is_one_sentence_naming_the_url_and_the_fix() {
    let server = S3Server::shared();
    server.create_bucket("msgs").unwrap();
    let endpoint = server.endpoint();
    let keys = [
        ("AWS_ACCESS_KEY_ID", "stokehold-test"),
        ("AWS_SECRET_ACCESS_KEY", "stokehold-test-secret"),
        ("AWS_REGION", "us-east-1"),
    ];
    // a plain-HTTP endpoint without AWS_ALLOW_HTTP: refused before any request
    let mut env = keys.to_vec();
    env.push(("AWS_ENDPOINT_URL", &endpoint));
    let e = inspect_with("s3://msgs/ds", &env, &[]);
    assert!(
        e.contains("s3://msgs/ds")
            && e.contains("is plain HTTP")
            && e.contains("AWS_ALLOW_HTTP=true"),
        "{e}"
    );
    assert!(!e.contains("builder error"), "{e}");
    env.push(("AWS_ALLOW_HTTP", "true"));
    // a bucket that does not exist
    let e = inspect_with("s3://no-such-bucket-here/ds", &env, &[]);
    assert!(
        e.contains("the bucket \"no-such-bucket-here\" does not exist at") && e.contains(&endpoint),
        "{e}"
    );
    // an endpoint nothing listens on (port 9 of the loopback: the discard port, closed here)
    let mut closed = keys.to_vec();
    closed.extend([
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
        ("AWS_ALLOW_HTTP", "true"),
    ]);
    let e = inspect_with("s3://msgs/ds", &closed, &[]);
    assert!(
        e.contains("cannot reach the endpoint http://127.0.0.1:9")
            && e.contains("AWS_ENDPOINT_URL"),
        "{e}"
    );
    // no credentials at all: the chain's last source, the instance-metadata service, is pointed
    // at the loopback (where nothing answers), never at 169.254.169.254
    let e = inspect_with(
        "s3://msgs/ds",
        &[
            ("AWS_ENDPOINT_URL", &endpoint),
            ("AWS_ALLOW_HTTP", "true"),
            ("AWS_REGION", "us-east-1"),
        ],
        &[
            "--storage-option",
            "aws_metadata_endpoint=http://127.0.0.1:9",
        ],
    );
    assert!(
        e.contains("no credentials were found for s3://msgs/ds")
            && e.contains("AWS_ACCESS_KEY_ID")
            && e.contains("anon=true"),
        "{e}"
    );
}

#[test]
fn pack_and_globs_to_s3_without_credentials_say_which_are_missing_as_reads_do() {
    let server = S3Server::shared();
    server.create_bucket("nocreds").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let imgs = tmp.path().join("imgs");
    let (code, out, err) = stokehold(
        server,
        &["sample-data", imgs.to_str().unwrap(), "--images", "4"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let endpoint = server.endpoint();
    // no credentials at all; the chain's last source (instance metadata) on the loopback, where
    // nothing answers, never at 169.254.169.254
    let env = [
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_ALLOW_HTTP", "true"),
        ("AWS_REGION", "us-east-1"),
    ];
    let no_metadata = [
        "--storage-option",
        "aws_metadata_endpoint=http://127.0.0.1:9",
        "--storage-option",
        "retries=0",
    ];
    let cases: [Vec<&str>; 3] = [
        // pack (the writer lists the destination first)
        vec!["pack", imgs.to_str().unwrap(), "s3://nocreds/ds"],
        // a glob (a listing)
        vec!["inspect", "s3://nocreds/data/*.tfrecord"],
        // a prefix without a manifest (a listing after the manifest's HEAD)
        vec!["index", "s3://nocreds/data/"],
    ];
    for args in cases {
        let mut args = args.clone();
        args.extend_from_slice(&no_metadata);
        let (code, out) = crate::messages::run_with(&args, &env, tmp.path());
        assert_ne!(code, 0, "{args:?}: {out}");
        assert!(
            out.contains("no credentials were found for s3://nocreds")
                && out.contains("AWS_ACCESS_KEY_ID")
                && out.contains("anon=true"),
            "{args:?}: {out}"
        );
        assert!(!out.contains("169.254"), "{args:?}: {out}");
    }
}
