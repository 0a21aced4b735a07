//! What a newcomer sees when something is wrong: each message names the path or option, what was
//! wrong and what to do; counts agree with their nouns; and the command stops quietly when its
//! reader goes away (`stokehold inspect DS | head -1`).

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

use stokehold_cli::{error_message, run_captured};

/// The message `stokehold ARGS` prints after `error: ` (it must fail).
fn error_of(args: &[&str]) -> String {
    let (r, out) = run_captured(args);
    match r {
        Ok(code) => panic!("{args:?} did not fail ({code:?}): {out}"),
        Err(e) => error_message(&e),
    }
}

fn ok(args: &[&str]) -> String {
    let (r, out) = run_captured(args);
    match r {
        Ok(code) => assert_eq!(code, ExitCode::SUCCESS, "{args:?}: {out}"),
        Err(e) => panic!("{args:?}: {}\n{out}", error_message(&e)),
    }
    out
}

/// A dataset of `n` images in one class, packed from `tmp/imgs` into `tmp/ds`.
fn packed(tmp: &Path, n: usize) -> (String, String, String) {
    let imgs = tmp.join("imgs").to_str().unwrap().to_string();
    let ds = tmp.join("ds").to_str().unwrap().to_string();
    let sample = ok(&[
        "sample-data",
        &imgs,
        "--images",
        &n.to_string(),
        "--classes",
        "1",
        "--size",
        "24x16",
    ]);
    let pack = ok(&["pack", &imgs, &ds]);
    (ds, sample, pack)
}

#[test]
fn reading_a_folder_that_is_not_a_dataset_says_to_pack_it_first() {
    let tmp = tempfile::tempdir().unwrap();
    let imgs = tmp.path().join("imgs");
    let imgs_s = imgs.to_str().unwrap();
    ok(&["sample-data", imgs_s, "--images", "2", "--size", "16x16"]);
    for cmd in ["inspect", "verify", "bench"] {
        let msg = error_of(&[cmd, imgs_s]);
        assert!(
            msg.starts_with(&format!("{imgs_s} is not a stokehold dataset"))
                && msg.contains("manifest.json")
                && msg.contains(&format!("`stokehold pack {imgs_s} DATASET_DIR`")),
            "{cmd}: {msg}"
        );
        assert!(!msg.contains("os error"), "{cmd}: {msg}");
    }
    // a path that does not exist at all, and a dataset's manifest given instead of its directory
    let missing = tmp.path().join("nope");
    let missing_s = missing.to_str().unwrap();
    for cmd in ["inspect", "verify", "bench"] {
        let msg = error_of(&[cmd, missing_s]);
        assert!(
            msg.starts_with(&format!("{missing_s}: no such directory"))
                && msg.contains("stokehold pack SOURCE"),
            "{cmd}: {msg}"
        );
    }
    let (ds, _, _) = packed(tmp.path(), 2);
    let manifest = format!("{ds}/manifest.json");
    let msg = error_of(&["inspect", &manifest]);
    assert!(
        msg.contains(&format!("give the dataset's directory ({ds})")),
        "{msg}"
    );
}

#[test]
fn an_error_and_its_cause_are_not_printed_twice() {
    // a dataset whose manifest cannot be read as a file: the I/O error names the path once
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    std::fs::create_dir_all(ds.join("manifest.json")).unwrap();
    let msg = error_of(&["inspect", ds.to_str().unwrap()]);
    assert!(msg.contains("manifest.json"), "{msg}");
    assert_eq!(msg.matches("(os error").count(), 1, "{msg}");
}

#[test]
fn packing_a_missing_path_names_it() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("photos");
    let src_s = src.to_str().unwrap();
    let out = tmp.path().join("out");
    let msg = error_of(&["pack", src_s, out.to_str().unwrap()]);
    assert!(
        msg.starts_with(&format!("{src_s}: no such file or directory"))
            && msg.contains("image folder"),
        "{msg}"
    );
    assert!(!msg.contains("cannot tell the kind"), "{msg}");
    assert!(!out.exists());
}

#[test]
fn packing_over_a_dataset_names_the_overwrite_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let (ds, _, _) = packed(tmp.path(), 2);
    let imgs = tmp.path().join("imgs");
    let msg = error_of(&["pack", imgs.to_str().unwrap(), &ds]);
    assert!(
        msg.contains("already exists") && msg.contains("`stokehold pack --overwrite`"),
        "{msg}"
    );
    assert!(!msg.contains("pass overwrite"), "{msg}");
}

#[test]
fn counts_of_one_are_singular() {
    let tmp = tempfile::tempdir().unwrap();
    let (ds, sample, pack) = packed(tmp.path(), 1);
    assert!(
        sample.starts_with("wrote 1 JPEG in 1 class to "),
        "{sample}"
    );
    assert!(pack.starts_with("packed 1 sample from "), "{pack}");
    assert!(
        pack.contains("  1 class\n") && pack.contains("wrote 1 shard,"),
        "{pack}"
    );
    let out = ok(&["inspect", &ds]);
    assert!(out.contains("samples   1 in 1 shard, "), "{out}");
    assert!(out.contains("  1 sample  "), "{out}");
    let out = ok(&["verify", &ds]);
    assert!(out.starts_with("ok: 1 shard, 1 record, "), "{out}");
    let out = ok(&["bench", &ds, "--threads", "1", "--batch-size", "1"]);
    assert!(
        out.contains(": 1 sample x 1 epoch, batch 1, 1 thread,"),
        "{out}"
    );
}

#[test]
fn a_closed_pipe_ends_the_command_quietly_with_status_0() {
    let tmp = tempfile::tempdir().unwrap();
    let (ds, _, _) = packed(tmp.path(), 3);
    for args in [vec!["inspect", &ds], vec!["inspect", &ds, "--json"]] {
        // the reader is gone before the command writes anything, as after `| head -0`
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_stokehold"))
            .args(&args)
            .stdout(Stdio::from(writer))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {:?} {stderr}", out.status);
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
}

#[test]
fn a_thread_count_beyond_four_per_core_or_a_shard_size_of_0_is_refused_before_anything_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let (ds, _, _) = packed(tmp.path(), 3);
    let imgs = tmp.path().join("imgs").to_str().unwrap().to_string();
    let out = tmp.path().join("out").to_str().unwrap().to_string();
    let max = stokehold_storage::max_threads();
    for args in [
        vec!["pack", &imgs, &out, "--threads", "100000"],
        vec!["verify", &ds, "--threads", "100000"],
        vec!["bench", &ds, "--threads", "100000"],
    ] {
        let msg = error_of(&args);
        assert!(
            msg.contains(&format!(
                "the thread count must be at most {max} on this machine"
            )) && msg.contains("got 100000"),
            "{args:?}: {msg}"
        );
    }
    let msg = error_of(&["pack", &imgs, &out, "--shard-size", "0"]);
    assert!(
        msg.contains("a shard size of at least 1 byte") && msg.contains("\"0\""),
        "{msg}"
    );
    assert!(!Path::new(&out).exists(), "nothing packed");
    // the bound itself is accepted
    ok(&["verify", &ds, "--threads", &max.to_string()]);
}

#[test]
fn help_names_every_command_and_every_format_pack_reads() {
    let help = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_stokehold"))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let top = help(&["--help"]);
    let first = top.lines().next().unwrap();
    for cmd in ["pack", "inspect", "verify", "bench", "sample-data"] {
        assert!(first.contains(cmd), "the summary line omits {cmd}: {first}");
        assert!(
            top.lines().any(|l| l.trim_start().starts_with(cmd)),
            "--help does not list {cmd}"
        );
    }
    let pack = top
        .lines()
        .find(|l| l.trim_start().starts_with("pack"))
        .unwrap();
    for format in ["image folder", "JSONL", "WebDataset", "TFRecord", "Parquet"] {
        assert!(
            pack.contains(format),
            "pack's summary omits {format}: {pack}"
        );
    }
}

#[test]
fn pack_with_one_path_asks_for_the_destination_not_the_sources() {
    let e = error_of(&["pack", "imgs"]);
    assert!(
        e.contains("one path was given") && e.contains("stokehold pack SOURCES... DEST"),
        "{e}"
    );
    // with nothing at all, clap's own message names both
    let e = error_of(&["pack"]);
    assert!(e.contains("<SOURCES>") && e.contains("<DEST>"), "{e}");
}

#[test]
fn a_negative_thread_count_is_refused_with_the_reason_not_a_quoting_tip() {
    for args in [
        &["pack", "--threads", "-1", "a", "b"][..],
        &["bench", "--threads", "-2", "ds"][..],
    ] {
        let e = error_of(args);
        assert!(
            e.contains("cannot be negative") && !e.contains("'-- -"),
            "{e}"
        );
    }
}

#[test]
fn inspect_on_an_image_file_suggests_packing_its_folder() {
    let tmp = tempfile::tempdir().unwrap();
    packed(tmp.path(), 2);
    let jpg = std::fs::read_dir(tmp.path().join("imgs"))
        .unwrap()
        .flatten()
        .filter(|d| d.path().is_dir())
        .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
        .map(|f| f.path())
        .find(|p| p.extension().is_some_and(|x| x == "jpg"))
        .expect("a JPEG");
    let e = error_of(&["inspect", jpg.to_str().unwrap()]);
    let folder = jpg.parent().unwrap().display().to_string();
    assert!(
        e.contains("is a file") && e.contains(&format!("stokehold pack {folder} DATASET_DIR")),
        "{e}"
    );
    // and the command it suggests works
    let dest = tmp.path().join("from-folder");
    let out = ok(&["pack", &folder, dest.to_str().unwrap()]);
    assert!(out.contains("packed 2 samples"), "{out}");
}

/// `stokehold ARGS` with exactly the environment `env` (no AWS, Google or Azure variable of the
/// caller's, HOME an empty directory): its status and its stdout and stderr together.
pub(crate) fn run_with(args: &[&str], env: &[(&str, &str)], home: &Path) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_stokehold"));
    for (k, _) in std::env::vars() {
        if ["AWS_", "GOOGLE_", "AZURE_", "GCE_"]
            .iter()
            .any(|p| k.starts_with(p))
        {
            cmd.env_remove(k);
        }
    }
    let out = cmd
        .args(args)
        .env("HOME", home)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn gs_and_az_without_credentials_say_which_are_missing_and_how_to_give_them() {
    let tmp = tempfile::tempdir().unwrap();
    // the metadata services named on the loopback (closed port): the chain ends there on any
    // machine, a cloud's VM included
    let metadata = [
        ("GCE_METADATA_HOST", "127.0.0.1:9"),
        ("GCE_METADATA_IP", "127.0.0.1:9"),
    ];
    let (code, out) = run_with(
        &[
            "inspect",
            "gs://some-bucket/ds",
            "--storage-option",
            "retries=0",
        ],
        &metadata,
        tmp.path(),
    );
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("no credentials were found for gs://some-bucket/ds")
            && out.contains("GOOGLE_APPLICATION_CREDENTIALS")
            && out.contains("anon=true"),
        "{out}"
    );
    // Azure without an account: refused before any request
    let (code, out) = run_with(&["inspect", "az://container/ds"], &[], tmp.path());
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("no storage account is named for az://container/ds")
            && out.contains("AZURE_STORAGE_ACCOUNT_NAME"),
        "{out}"
    );
    // an account but no key: the managed-identity endpoint on the loopback
    let (code, out) = run_with(
        &[
            "inspect",
            "az://container/ds",
            "--storage-option",
            "retries=0",
            "--storage-option",
            "azure_msi_endpoint=http://127.0.0.1:9/token",
        ],
        &[("AZURE_STORAGE_ACCOUNT_NAME", "someaccount")],
        tmp.path(),
    );
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("no credentials were found for az://container/ds")
            && out.contains("AZURE_STORAGE_ACCOUNT_KEY")
            && out.contains("azure_storage_account_key="),
        "{out}"
    );
    // an https:// server that cannot be reached is named, not AWS
    let (code, out) = run_with(
        &[
            "inspect",
            "https://127.0.0.1:9/data/ds",
            "--storage-option",
            "retries=0",
        ],
        &[],
        tmp.path(),
    );
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("cannot reach https://127.0.0.1:9 for https://127.0.0.1:9/data/ds"),
        "{out}"
    );
    assert!(!out.contains("AWS"), "{out}");
    // s3:/bucket: a local path that does not exist, and the URL it was meant to be
    let (code, out) = run_with(&["inspect", "s3:/bucket/ds"], &[], tmp.path());
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("did you mean s3://bucket/ds?"), "{out}");
}

#[test]
fn a_mixture_file_is_never_taken_for_a_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let p = tmp.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    // [source] for [sources]
    let toml = file("mix.toml", "[source]\nweb = \"a\"\n[weights]\nweb = 1\n");
    let msg = error_of(&["bench", &toml]);
    assert!(
        msg.contains(&format!("{toml} is not a mixture file"))
            && msg.contains("did you mean [sources]?"),
        "{msg}"
    );
    assert!(!msg.contains("not a stokehold dataset"), "{msg}");
    let json = file(
        "mix.json",
        r#"{"source": {"web": "a"}, "weights": {"web": 1}}"#,
    );
    let msg = error_of(&["bench", &json]);
    assert!(msg.contains("did you mean \"sources\"?"), "{msg}");
    // .tml is TOML: read as a mixture file (its sources are then opened, and named)
    let tml = file("mix.tml", "[sources]\nweb = \"no-such-dir\"\n");
    let msg = error_of(&["bench", &tml]);
    assert!(msg.contains("source 'web'"), "{msg}");
    // a weight that is not a number: said so, at its key
    let bad = file(
        "bad.toml",
        "[sources]\nweb = \"a\"\ncode = \"b\"\n[weights]\nweb = 1\ncode = \"half\"\n",
    );
    let msg = error_of(&["bench", &bad]);
    assert!(
        msg.contains("is not a mixture file") && msg.contains("a number >= 0"),
        "{msg}"
    );
    assert!(!msg.contains("untagged"), "{msg}");
    // a dataset's own manifest (with its "source") is not a mixture file
    let (ds, _, _) = packed(tmp.path(), 3);
    let manifest = format!("{ds}/manifest.json");
    let msg = error_of(&["bench", &manifest]);
    assert!(!msg.contains("mixture"), "{msg}");
}

#[test]
fn pack_into_a_directory_that_cannot_be_written_names_the_destination() {
    let tmp = tempfile::tempdir().unwrap();
    let imgs = tmp.path().join("imgs");
    ok(&["sample-data", imgs.to_str().unwrap(), "--images", "2"]);
    // a read-only directory (root writes anywhere: then /sys, which refuses every user)
    let ro = tmp.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let mut perms = std::fs::metadata(&ro).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o555);
    std::fs::set_permissions(&ro, perms).unwrap();
    let ro = if std::fs::write(ro.join("probe"), b"").is_err() {
        ro
    } else if std::fs::write("/sys/stokehold-probe", b"").is_err() {
        std::path::PathBuf::from("/sys")
    } else {
        return; // no directory refuses this user here
    };
    let dest = ro.join("ds");
    let dest_s = dest.to_str().unwrap();
    let msg = error_of(&["pack", imgs.to_str().unwrap(), dest_s]);
    assert!(
        msg.starts_with(dest_s)
            && msg.contains(&format!("cannot write beside it in {}", ro.display()))
            && msg.contains("choose a destination"),
        "{msg}"
    );
    assert!(!msg.contains(".lock"), "{msg}");
}

#[test]
fn index_beside_where_the_index_cannot_be_written_names_the_directory_and_the_way_out() {
    use stokehold_ingest::example::{Example, Feature, encode_example};
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let file = data.join("train.tfrecord");
    let mut f = std::fs::File::create(&file).unwrap();
    for i in 0..3 {
        let e = Example::from_features(vec![("label", Feature::int64s(vec![i]))]);
        stokehold_ingest::tfrecord::write_record(&mut f, &encode_example(&e)).unwrap();
    }
    drop(f);
    // where the index goes, something that cannot be replaced by a file (for every user, root
    // included, as a read-only directory is for the others)
    std::fs::create_dir(data.join("train.tfrecord.skhidx")).unwrap();
    let msg = error_of(&["index", file.to_str().unwrap(), "--beside"]);
    assert!(
        msg.contains(&format!(
            "cannot keep the index beside train.tfrecord in {}",
            data.display()
        )) && msg.contains("--index-dir"),
        "{msg}"
    );
}
