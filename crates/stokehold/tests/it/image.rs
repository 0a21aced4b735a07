//! Image columns through the engine: planning from specs, fixed output tensors, determinism
//! across threads, corrupt JPEGs under both error policies (row C2), pixel limits (C1).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use stokehold::format::{Dataset, DatasetWriteOptions, DatasetWriter, FieldValue, Schema};
use stokehold::stages::spec::{TransformSpec, build_columns};
use stokehold::{ColumnData, EngineError, ErrorPolicy, Loader, LoaderConfig, Shuffle};

fn spec(name: &str, params: serde_json::Value) -> TransformSpec {
    TransformSpec {
        name: name.into(),
        params,
    }
}

/// A dataset of `n` generated JPEGs (via the packer's sample generator), label = id % 3.
fn dataset(dir: &Path, n: usize) -> Arc<Dataset> {
    let imgs = dir.join("imgs");
    let spec = stokehold_ingest_like::SampleSpec {
        images: n,
        classes: 3,
        width: 64,
        height: 48,
        quality: 85,
        seed: 1,
    };
    stokehold_ingest_like::write_image_folder(&imgs, spec);
    let schema = Schema::from_specs([("image", "image:jpeg"), ("label", "int64")]).unwrap();
    let path = dir.join("ds");
    let mut w = DatasetWriter::create(
        &path,
        schema,
        DatasetWriteOptions {
            target_shard_bytes: 16 << 10,
            ..Default::default()
        },
    )
    .unwrap();
    for i in 0..n {
        let bytes = std::fs::read(imgs.join(format!("{i}.jpg"))).unwrap();
        w.write(&[
            FieldValue::Image(bytes.into()),
            FieldValue::Int64((i % 3) as i64),
        ])
        .unwrap();
    }
    w.finish().unwrap();
    Arc::new(Dataset::open(&path).unwrap())
}

/// A tiny JPEG writer for these tests (the engine crate does not depend on the packer).
mod stokehold_ingest_like {
    use std::path::Path;

    pub struct SampleSpec {
        pub images: usize,
        pub classes: usize,
        pub width: u16,
        pub height: u16,
        pub quality: u8,
        pub seed: u64,
    }

    pub fn write_image_folder(dir: &Path, s: SampleSpec) {
        std::fs::create_dir_all(dir).unwrap();
        for i in 0..s.images {
            let (w, h) = if i % 2 == 0 {
                (s.width, s.height)
            } else {
                (s.height, s.width)
            };
            let px: Vec<u8> = (0..usize::from(w) * usize::from(h) * 3)
                .map(|k| {
                    ((k as u64 * 7 + i as u64 * 13 + s.seed + (k / 97) as u64 * s.classes as u64)
                        % 251) as u8
                })
                .collect();
            let mut out = Vec::new();
            jpeg_encoder::Encoder::new(&mut out, s.quality)
                .encode(&px, w, h, jpeg_encoder::ColorType::Rgb)
                .unwrap();
            std::fs::write(dir.join(format!("{i}.jpg")), out).unwrap();
        }
    }
}

fn train_specs() -> BTreeMap<String, Vec<TransformSpec>> {
    BTreeMap::from([(
        "image".to_string(),
        vec![
            spec("random_resized_crop", serde_json::json!({"size": 32})),
            spec("random_horizontal_flip", serde_json::json!({})),
            spec("color_jitter", serde_json::json!({"brightness": 0.2})),
        ],
    )])
}

/// A batch's ids and its image tensor's bytes.
type IdsAndPixels = (Vec<u64>, Vec<u8>);

fn run(
    ds: &Arc<Dataset>,
    specs: &BTreeMap<String, Vec<TransformSpec>>,
    threads: usize,
    policy: ErrorPolicy,
) -> Vec<Result<IdsAndPixels, EngineError>> {
    let cols = build_columns(ds.schema(), specs, true, &mut |_| None).unwrap();
    let cfg = LoaderConfig {
        batch_size: 8,
        threads,
        seed: 5,
        on_error: policy,
        shuffle: Shuffle::Global,
        ..LoaderConfig::default()
    };
    let mut l = Loader::new(ds.clone(), cols, cfg).unwrap();
    l.iter()
        .unwrap()
        .map(|b| {
            b.map(|b| {
                let ColumnData::Fixed { data, shape, .. } = b.column("image").unwrap() else {
                    panic!("fixed")
                };
                assert_eq!(shape, &[8, 3, 32, 32]);
                (b.ids.clone(), data.as_bytes().to_vec())
            })
        })
        .collect()
}

#[test]
fn image_columns_are_fixed_tensors_identical_on_any_thread_count() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 40);
    let one: Vec<_> = run(&ds, &train_specs(), 1, ErrorPolicy::Fail)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let two: Vec<_> = run(&ds, &train_specs(), 2, ErrorPolicy::Fail)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(one.len(), 5);
    assert_eq!(one, two);
    // pixels are real image content, not zeros
    assert!(one[0].1.iter().any(|&v| v > 0) && one[0].1.iter().any(|&v| v < 255));
}

#[test]
fn evaluation_chain_and_planning_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 8);
    let eval = BTreeMap::from([(
        "image".to_string(),
        vec![
            spec("resize", serde_json::json!({"size": 36})),
            spec("center_crop", serde_json::json!({"size": 32})),
            spec(
                "normalize",
                serde_json::json!({"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}),
            ),
        ],
    )]);
    let cols = build_columns(ds.schema(), &eval, true, &mut |_| None).unwrap();
    assert_eq!(
        cols[0].output,
        stokehold::Output::Fixed {
            dtype: stokehold::format::DType::F32,
            shape: vec![3, 32, 32]
        }
    );
    let bad = |specs: Vec<TransformSpec>| {
        build_columns(
            ds.schema(),
            &BTreeMap::from([("image".to_string(), specs)]),
            true,
            &mut |_| None,
        )
        .unwrap_err()
        .to_string()
    };
    assert!(
        bad(vec![spec("random_horizontal_flip", serde_json::json!({}))])
            .contains("fixed output size")
    );
    assert!(
        bad(vec![spec("center_crop", serde_json::json!({"size": 8}))]).contains("needs a resize")
    );
    // the value as written, not as Rust prints it (`Some(Number(0))`)
    let e = bad(vec![spec(
        "random_resized_crop",
        serde_json::json!({"size": 0}),
    )]);
    assert!(
        e.contains("random_resized_crop: size must be a positive integer") && e.ends_with("got 0"),
        "{e}"
    );
    let e = bad(vec![spec("resize", serde_json::json!({"size": [224, -1]}))]);
    assert!(e.ends_with("got [224,-1]"), "{e}");
    let e = bad(vec![spec("random_resized_crop", serde_json::json!({}))]);
    assert!(e.ends_with("got nothing"), "{e}");
    let e = bad(vec![
        spec("random_resized_crop", serde_json::json!({"size": 8})),
        spec("normalize", serde_json::json!({"mean": 0.5})),
    ]);
    assert!(
        e.ends_with("must be a list of 1 or 3 numbers, got 0.5"),
        "{e}"
    );
    assert!(
        bad(vec![
            spec("to_tensor", serde_json::json!({})),
            spec("random_resized_crop", serde_json::json!({"size": 8}))
        ])
        .contains("output stage")
    );
    assert!(
        bad(vec![
            spec("random_resized_crop", serde_json::json!({"size": 8})),
            spec("sharpen", serde_json::json!({}))
        ])
        .contains("cannot be mixed")
    );
    // parameters are typed: a misspelt one is refused, naming it and what is known
    let e = bad(vec![spec(
        "random_resized_crop",
        serde_json::json!({"size": 8, "scal": [0.5, 1.0]}),
    )]);
    assert!(
        e.contains("random_resized_crop: unknown field `scal`") && e.contains("`scale`"),
        "{e}"
    );
    let e = bad(vec![
        spec("random_resized_crop", serde_json::json!({"size": 8})),
        spec(
            "normalize",
            serde_json::json!({"mean": [0.5], "std": [0.2], "dtype": "bf16"}),
        ),
    ]);
    assert!(
        e.contains("normalize: dtype must be float32 or float16"),
        "{e}"
    );
    // an image chain on the int64 label is refused when the loader is made, not at a batch
    let e = build_columns(
        ds.schema(),
        &BTreeMap::from([(
            "label".to_string(),
            vec![spec("random_resized_crop", serde_json::json!({"size": 8}))],
        )]),
        true,
        &mut |_| None,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("column \"label\"")
            && e.contains("need encoded image bytes")
            && e.contains("int64"),
        "{e}"
    );
}

/// Replace sample `id`'s JPEG with a truncated copy, keeping the dataset valid (re-packed), so
/// only the decoder can notice.
fn dataset_with_broken_jpeg(dir: &Path, n: usize, broken: usize) -> Arc<Dataset> {
    let ds = dataset(dir, n);
    let path = dir.join("broken");
    let mut w =
        DatasetWriter::create(&path, ds.schema().clone(), DatasetWriteOptions::default()).unwrap();
    for i in 0..n as u64 {
        let mut v = ds.get(i).unwrap();
        if i as usize == broken
            && let FieldValue::Image(b) = &mut v[0]
        {
            let cut = b.len() / 3;
            *b = b[..cut].to_vec().into();
        }
        w.write(&v).unwrap();
    }
    w.finish().unwrap();
    Arc::new(Dataset::open(&path).unwrap())
}

#[test]
fn a_corrupt_jpeg_fails_with_its_sample_id_or_is_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset_with_broken_jpeg(tmp.path(), 40, 37);
    // a whole-image geometry, so that the truncation is always inside what is decoded
    let specs = BTreeMap::from([(
        "image".to_string(),
        vec![spec("resize", serde_json::json!({"size": [32, 32]}))],
    )]);
    let results = run(&ds, &specs, 2, ErrorPolicy::Fail);
    let err = results.into_iter().find_map(Result::err).unwrap();
    assert!(
        matches!(&err, EngineError::Transform { id: 37, column, .. } if column == "image"),
        "{err}"
    );
    assert!(err.to_string().contains("JPEG decode failed"), "{err}");
    // the error says where the bytes are: shard file, record, byte range (the index's)
    let EngineError::Transform { at, .. } = &err else {
        unreachable!()
    };
    let (k, local) = ds.locate(37).unwrap();
    let shard = &ds.shards()[k];
    let e = shard.entry(local);
    assert_eq!(at.shard, shard.path());
    assert_eq!(
        (at.record, at.bytes.clone()),
        (local, e.offset..e.offset + u64::from(e.len))
    );
    let place = format!(
        "{} record {local}, bytes {}..{}",
        shard.path().display(),
        e.offset,
        e.offset + u64::from(e.len)
    );
    assert!(err.to_string().contains(&place), "{err}");
    let results = run(&ds, &specs, 2, ErrorPolicy::skip());
    assert_eq!(results.len(), 5);
    let all: Vec<u64> = results.into_iter().flat_map(|r| r.unwrap().0).collect();
    assert!(
        !all.contains(&37),
        "the broken sample's slot holds a flagged copy of another"
    );
}

fn cached_loader(
    ds: &Arc<Dataset>,
    threads: usize,
    decoded: Option<stokehold::DecodedCacheConfig>,
) -> Loader {
    let cols = build_columns(ds.schema(), &train_specs(), true, &mut |_| None).unwrap();
    let cfg = LoaderConfig {
        batch_size: 8,
        threads,
        seed: 5,
        decoded_cache: decoded,
        // the counts below are of the epochs asked for only
        prepare_next_epoch: false,
        ..LoaderConfig::default()
    };
    Loader::new(ds.clone(), cols, cfg).unwrap()
}

fn pixels(l: &mut Loader, epoch: u64) -> Vec<IdsAndPixels> {
    l.set_epoch(epoch);
    l.iter()
        .unwrap()
        .map(|b| {
            let b = b.unwrap();
            let ColumnData::Fixed { data, .. } = b.column("image").unwrap() else {
                panic!("fixed")
            };
            (b.ids.clone(), data.as_bytes().to_vec())
        })
        .collect()
}

#[test]
fn the_decoded_cache_gives_the_same_output_cold_warm_and_over_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 40);
    let dc = stokehold::DecodedCacheConfig::in_ram(40, stokehold::Budget::bytes(1 << 30));
    // cold (filling), then warm (another loader of this process finds the same cache), on
    // other thread counts
    let mut first = cached_loader(&ds, 2, Some(dc.clone()));
    let cold = pixels(&mut first, 3);
    let s1 = first.stats();
    let c1 = &s1.caches[0];
    assert_eq!(c1.kind, "decoded");
    assert_eq!((c1.hits, c1.misses, c1.entries), (0, 40, 40), "{c1:?}");
    assert!(
        s1.stages
            .iter()
            .any(|s| s.name == "image/decoded-cache+crop+resize")
    );
    let mut second = cached_loader(&ds, 1, Some(dc));
    let warm = pixels(&mut second, 3);
    let c2 = &second.stats().caches[0];
    assert_eq!(
        (c2.hits, c2.misses),
        (40, 40),
        "the second loader shares the cache"
    );
    assert!(c2.saved > std::time::Duration::ZERO);
    assert_eq!(cold, warm, "cold and warm output agree");
    // another epoch draws other crops from the same cached images
    let e4 = pixels(&mut second, 4);
    assert_ne!(e4, cold);
    assert_eq!(second.stats().caches[0].hits, 80);
    // a budget too small for one image: nothing kept, the same output every time
    let tiny = stokehold::DecodedCacheConfig::in_ram(41, stokehold::Budget::bytes(100));
    let mut over = cached_loader(&ds, 2, Some(tiny));
    let o1 = pixels(&mut over, 3);
    let c3 = &over.stats().caches[0];
    assert_eq!((c3.entries, c3.bytes), (0, 0));
    assert_ne!(
        o1, cold,
        "another prefix size is another cache and other pixels"
    );
    assert_eq!(
        pixels(&mut over, 3),
        o1,
        "nothing cached, still deterministic"
    );
}

#[test]
fn the_decoded_cache_directory_serves_later_runs_the_same_pixels() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 40);
    let root = tmp.path().join("decoded");
    let ram = stokehold::DecodedCacheConfig::in_ram(40, stokehold::Budget::bytes(1 << 30));
    let on_disk = stokehold::DecodedCacheConfig {
        dir: Some(root.clone()),
        ..ram.clone()
    };
    let reference = pixels(&mut cached_loader(&ds, 2, Some(ram)), 3);
    let parts = |ext: &str| {
        let mut n = 0;
        for d in std::fs::read_dir(&root).unwrap().flatten() {
            for f in std::fs::read_dir(d.path()).unwrap().flatten() {
                n += usize::from(f.path().extension().is_some_and(|x| x == ext));
            }
        }
        n
    };
    // the first run decodes every image and writes it; the epoch's end publishes the part
    let mut first = cached_loader(&ds, 2, Some(on_disk.clone()));
    assert_eq!(
        pixels(&mut first, 3),
        reference,
        "the directory changes no pixel"
    );
    // (hits, misses, entries) of one of a loader's caches
    let figures = |l: &Loader, kind: &str| {
        let st = l.stats();
        let c = st.caches.iter().find(|c| c.kind == kind).unwrap();
        (c.hits, c.misses, c.entries)
    };
    assert_eq!(figures(&first, "decoded-disk"), (0, 40, 40));
    assert_eq!((parts("skdc"), parts("tmp")), (1, 0));
    drop(first);
    // a later run (a new cache, as in another process): every image comes from the directory
    let mut later = cached_loader(&ds, 1, Some(on_disk.clone()));
    assert_eq!(pixels(&mut later, 3), reference);
    assert_eq!(figures(&later, "decoded-disk"), (40, 0, 40));
    // the next epoch's crops start from the images it kept in RAM
    let e4 = pixels(&mut later, 4);
    assert_eq!(figures(&later, "decoded"), (40, 40, 40));
    drop(later);
    assert_eq!(
        e4,
        pixels(&mut cached_loader(&ds, 2, Some(on_disk)), 4),
        "nothing new was written, nothing differs"
    );
    assert_eq!(parts("skdc"), 1);
    // a directory that cannot be made only stops writing (said once on stderr): the loader
    // runs from RAM and gives the same batches (issue #50)
    let blocked = tmp.path().join("a-file");
    std::fs::write(&blocked, b"x").unwrap();
    let cols = build_columns(ds.schema(), &train_specs(), true, &mut |_| None).unwrap();
    let cfg = LoaderConfig {
        decoded_cache: Some(stokehold::DecodedCacheConfig {
            dir: Some(blocked.join("sub")),
            ..stokehold::DecodedCacheConfig::in_ram(40, stokehold::Budget::bytes(1 << 30))
        }),
        ..LoaderConfig::default()
    };
    let mut loader = Loader::new(ds.clone(), cols, cfg).unwrap();
    let n: usize = loader.iter().unwrap().map(|b| b.unwrap().len()).sum();
    assert_eq!(n as u64, ds.len() / 32 * 32);
    assert!(!blocked.join("sub").exists());
}

#[test]
fn the_decoded_cache_needs_an_image_column() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 4);
    let cols = stokehold::Column::all(ds.schema()).unwrap();
    let cfg = LoaderConfig {
        decoded_cache: Some(stokehold::DecodedCacheConfig::in_ram(
            64,
            stokehold::Budget::bytes(1 << 20),
        )),
        ..LoaderConfig::default()
    };
    let err = Loader::new(ds, cols, cfg).unwrap_err().to_string();
    assert!(err.contains("decoded_cache"), "{err}");
}

#[test]
fn decoded_cache_keep_free_is_the_directorys_floor() {
    // a floor no filesystem has: the run is the same, and nothing is written to the directory
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 24);
    let root = tmp.path().join("decoded-floor");
    let ram = stokehold::DecodedCacheConfig::in_ram(40, stokehold::Budget::bytes(1 << 30));
    let reference = pixels(&mut cached_loader(&ds, 2, Some(ram.clone())), 1);
    let floor = stokehold::DecodedCacheConfig {
        dir: Some(root.clone()),
        keep_free: Some(stokehold::ByteSize(u64::MAX / 2)),
        ..ram
    };
    let mut l = cached_loader(&ds, 2, Some(floor));
    assert_eq!(pixels(&mut l, 1), reference);
    drop(l);
    let written: Vec<_> = walk(&root)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "skdc"))
        .collect();
    assert!(written.is_empty(), "{written:?}");
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn reads_without_io_uring_give_the_same_batches() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 24);
    let batches = |io_uring: bool| {
        let cols = build_columns(ds.schema(), &train_specs(), true, &mut |_| None).unwrap();
        let cfg = LoaderConfig {
            batch_size: 8,
            threads: 2,
            seed: 9,
            io_uring,
            ..LoaderConfig::default()
        };
        // from a cold page cache, so that the reads that need the device go through the ring
        // (where the kernel allows one) on one side and through pread on the other
        for s in ds.shards() {
            let f = std::fs::File::open(s.path()).unwrap();
            f.sync_all().unwrap();
            let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
        }
        pixels(&mut Loader::new(ds.clone(), cols, cfg).unwrap(), 2)
    };
    assert_eq!(batches(false), batches(true));
}
