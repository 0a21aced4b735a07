//! [`Records`]: the records of a packed dataset as samples. Each output [`Column`] takes one
//! field of the record through its chain of transform stages; the last stage writes straight into
//! the sample's slot of the batch.
//!
//! A task's records are fetched together ([`crate::fetch`]: borrowed from memory or the RAM cache,
//! neighbours coalesced into large reads); each sample is then parsed (`RecordView`, no copy) and
//! transformed with its own generator per (seed, epoch, id, column).

use std::sync::Arc;
use std::time::Duration;

use stokehold_format::{FieldValue, FormatError, Held, RecordError, VideoFile};
use stokehold_storage::Dataset;

use crate::cache::disk::{CacheProgress, DiskCache};
use crate::cache::{CacheStats, DecodedCache, RecordCache, dataset_key};
use crate::error::{EngineError, RecordPlace, Result};
use crate::fetch::{ByteRange, ByteSource};
use crate::pipeline::{DecodedCacheConfig, half_of_memory};
use crate::rng::SampleRng;
use crate::samples::{Cache, Layout, Samples, SlotWriter, TaskCtx, TaskIo};
use crate::stages::{Column, Output, SampleCtx, write_value};
use crate::state::fingerprint;

use super::video_reads::{PartRead, PartialVideo, plan_range, read_file_in_part, read_in_part};

// Stage 0 is the read stage, which the engine times (the task's fetch).
/// Index of the parse stage (record view and field lookup).
const STAGE_PARSE: usize = 1;
/// Index of the first column stage.
const STAGE_FIRST_COLUMN: usize = 2;

/// The records of a dataset, each field through its stages.
pub struct Records {
    dataset: Arc<Dataset>,
    columns: Vec<Column>,
    outputs: Vec<(String, Output)>,
    field_index: Vec<usize>,
    /// Per column, the other field its stages read (a synced clip's clock), when one does.
    other_index: Vec<Option<usize>>,
    fingerprint: String,
    /// The dataset's shards with the RAM cache of record bytes, when on.
    bytes: [ByteSource; 1],
    /// The caches, as the loader sees them.
    caches: Arc<RecordsCaches>,
    /// The video fields read in part (only the keyframe intervals a clip needs), when any:
    /// records read from storage, not from memory or the RAM cache.
    partial: Option<PartialVideo>,
}

/// The caches of [`Records`]: the RAM cache of record bytes, the decoded caches of image
/// columns, the disk cache the dataset was opened through, the decoded pages of Parquet read in
/// place.
#[derive(Debug)]
struct RecordsCaches {
    dataset: Arc<Dataset>,
    /// The RAM cache of record bytes, when on.
    cache: Option<Arc<RecordCache>>,
    /// The decoded caches of image columns, when on.
    decoded: Vec<Arc<DecodedCache>>,
    /// The disk cache the dataset was opened through, when any.
    disk: Option<(Arc<DiskCache>, CacheProgress)>,
}

impl std::fmt::Debug for Records {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Records")
            .field("dataset", &self.dataset.dir())
            .field("columns", &self.columns)
            .finish()
    }
}

impl Records {
    /// `columns` of `dataset`, with a RAM cache of `cache_bytes` of record bytes (0: none) and an
    /// optional decoded cache of the image columns.
    pub fn new(
        dataset: Arc<Dataset>,
        columns: Vec<Column>,
        cache_bytes: u64,
        decoded_cache: Option<&DecodedCacheConfig>,
    ) -> Result<Records> {
        let schema = dataset.schema();
        if columns.is_empty() {
            return Err(EngineError::Config(
                "a loader needs at least one column".into(),
            ));
        }
        let mut field_index = Vec::with_capacity(columns.len());
        let mut other_index = Vec::with_capacity(columns.len());
        for c in &columns {
            let other = c.transforms.iter().find_map(|t| t.reads_field());
            other_index.push(match other {
                None => None,
                Some(f) => Some(schema.index_of(f).ok_or_else(|| {
                    EngineError::Config(format!(
                        "column {:?} also reads field {f:?}, which the dataset does not have \
                         ({schema})",
                        c.name
                    ))
                })?),
            });
            field_index.push(schema.index_of(&c.field).ok_or_else(|| {
                EngineError::Config(format!(
                    "column {:?} reads field {:?}, which the dataset does not have ({schema})",
                    c.name, c.field
                ))
            })?);
            if let Output::Fixed { shape, .. } = &c.output
                && shape.iter().product::<usize>() == 0
                && !shape.is_empty()
            {
                return Err(EngineError::Config(format!(
                    "column {:?} has an empty fixed shape {shape:?}",
                    c.name
                )));
            }
        }
        let fp = fingerprint(&dataset);
        let in_memory = dataset
            .shards()
            .first()
            .is_none_or(|s| s.source().slice(0, 0).is_some());
        let cache = (cache_bytes > 0 && !in_memory)
            .then(|| RecordCache::shared(&dataset, &dataset_key(&dataset), cache_bytes));
        let mut columns = columns;
        let mut decoded = Vec::new();
        if let Some(dc) = decoded_cache {
            if dc.size == 0 {
                return Err(EngineError::Config(
                    "the decoded cache's size must be at least 1".into(),
                ));
            }
            let budget = dc.budget.resolve(half_of_memory);
            let dir_limit = dc.dir_limit.map_or(u64::MAX, |b| b.0);
            for c in &mut columns {
                for t in &mut c.transforms {
                    let mut get = |prefix: &str| {
                        let key = format!("{}/{}/{prefix}", dataset_key(&dataset), c.name);
                        let cache = match &dc.dir {
                            None => DecodedCache::shared(&key, budget),
                            Some(dir) => {
                                // the directory's key names the content, not where it is
                                let disk_key = format!("{fp}/{}/{prefix}", c.name);
                                DecodedCache::shared_on_disk(
                                    &key,
                                    budget,
                                    dir,
                                    &disk_key,
                                    dir_limit,
                                    dc.keep_free.map(|b| b.0),
                                )?
                            }
                        };
                        decoded.push(Arc::clone(&cache));
                        Ok(cache)
                    };
                    if let Some(cached) = t.with_decoded_cache(dc.size, &mut get)? {
                        *t = cached;
                    }
                }
            }
            if decoded.is_empty() {
                return Err(EngineError::Config(
                    "decoded_cache is set but no column has a stage with a deterministic prefix to cache (an image decode)".into(),
                ));
            }
        }
        let outputs = columns
            .iter()
            .map(|c| (c.name.clone(), c.output.clone()))
            .collect();
        let partial = (cache.is_none() && !in_memory)
            .then(|| PartialVideo::new(schema, &columns, &field_index, &other_index))
            .flatten();
        Ok(Records {
            partial,
            bytes: [ByteSource::new(Arc::clone(&dataset), cache.clone())],
            caches: Arc::new(RecordsCaches {
                dataset: Arc::clone(&dataset),
                cache,
                decoded,
                disk: None,
            }),
            dataset,
            columns,
            outputs,
            field_index,
            other_index,
            fingerprint: fp,
        })
    }

    /// Report the disk cache the dataset was opened through
    /// ([`crate::cache::disk::open_dataset`]) in the loader's statistics.
    pub fn with_disk_cache(mut self, cache: Arc<DiskCache>, progress: CacheProgress) -> Records {
        let c = &self.caches;
        self.caches = Arc::new(RecordsCaches {
            dataset: Arc::clone(&c.dataset),
            cache: c.cache.clone(),
            decoded: c.decoded.clone(),
            disk: Some((cache, progress)),
        });
        self
    }

    /// The dataset.
    pub fn dataset(&self) -> &Arc<Dataset> {
        &self.dataset
    }

    /// The columns.
    pub fn output_columns(&self) -> &[Column] {
        &self.columns
    }
}

impl Samples for Records {
    fn len(&self) -> u64 {
        self.dataset.len()
    }

    fn layout(&self) -> Layout {
        Layout {
            mean_bytes: dataset_mean(&self.dataset),
            blocks: Some(
                self.dataset
                    .manifest()
                    .shards
                    .iter()
                    .map(|s| s.records)
                    .collect(),
            ),
            whole_batch_tasks: false,
            stage_names: {
                let mut names = vec!["read".to_string(), "parse".to_string()];
                for c in &self.columns {
                    if c.transforms.is_empty() {
                        names.push(format!("{}/collate", c.name));
                    }
                    for t in &c.transforms {
                        names.push(format!("{}/{}", c.name, t.name()));
                    }
                }
                names
            },
            fingerprint: self.fingerprint.clone(),
        }
    }

    fn columns(&self) -> &[(String, Output)] {
        &self.outputs
    }

    fn sources(&self) -> &[ByteSource] {
        &self.bytes
    }

    fn plan(&self, ids: &[u64], io: &mut TaskIo) {
        // one range per record (a sample that cannot be located gets none: `fill` says why),
        // but for a record its shard's codec holds decoded (a Parquet page decoded for another
        // row): that one is kept for `fill`, and its bytes are not read
        let (plan, held) = io.plan_and_scratch::<HeldRecords>();
        held.0.clear();
        for &id in ids {
            let mut h = None;
            if let Ok((k, local)) = self.dataset.locate(id) {
                let shard = &self.dataset.shards()[k];
                h = shard.held(local);
                if h.is_none() {
                    // a record read in part: its first bytes now, the rest when filled
                    let (lo, hi) = match self.partial_for(k) {
                        true => plan_range(shard, local),
                        false => (shard.entry(local).offset, shard.entry(local).end()),
                    };
                    plan.push(ByteRange {
                        source: 0,
                        shard: k,
                        lo,
                        hi,
                    });
                }
            }
            held.0.push(h);
            plan.end_sample();
        }
    }

    fn fill(
        &self,
        id: u64,
        k: usize,
        io: &mut TaskIo,
        cx: &mut TaskCtx<'_, '_>,
        out: &mut SlotWriter<'_>,
    ) -> Result<()> {
        let ds = &*self.dataset;
        let (shard, local) = ds
            .locate(id)
            .map_err(|source| EngineError::Sample { id, source })?;
        // what the shard's codec held decoded when the task was planned (its bytes were not
        // read), or holds now: a row of a page that an earlier sample of the task decoded (its
        // bytes were read with theirs, in one read, and need no checking again)
        let held = io.scratch::<HeldRecords>().0.get(k).cloned().flatten();
        if let Some(held) = held.or_else(|| ds.shards()[shard].held(local)) {
            return self.process(id, (shard, local, Got::Held(&held)), cx, out);
        }
        if let Some(pv) = self.partial.as_ref().filter(|_| self.partial_for(shard)) {
            let part = io.bytes(k, 0).and_then(|head| {
                let at = (id, cx.seed, cx.epoch);
                let sh = &ds.shards()[shard];
                match read_in_part(
                    pv,
                    &self.columns,
                    sh,
                    local,
                    at,
                    head,
                    ds.verifies_records(),
                )? {
                    PartRead::Part(buf, read) => Ok((buf, read)),
                    PartRead::Whole => {
                        let mut buf = Vec::new();
                        sh.read_record(local, &mut buf, ds.verifies_records())?;
                        let read = head.len() + buf.len();
                        Ok((buf, read))
                    }
                }
            });
            return match part {
                Ok((buf, read)) => self.process(id, (shard, local, Got::Part(&buf, read)), cx, out),
                Err(e @ FormatError::Checksum { .. }) => match self.repair(id, &e) {
                    Some((local, shard, bytes)) => {
                        self.process(id, (shard, local, Got::Bytes(&bytes)), cx, out)
                    }
                    None => Err(EngineError::Sample { id, source: e }),
                },
                Err(e) => Err(EngineError::Sample { id, source: e }),
            };
        }
        let got = io.bytes(k, 0).and_then(|bytes| {
            if ds.verifies_records() {
                ds.shards()[shard].check_record(local, bytes)?;
            }
            Ok(bytes)
        });
        match got {
            Ok(bytes) => self.process(id, (shard, local, Got::Bytes(bytes)), cx, out),
            Err(e @ FormatError::Checksum { .. }) => match self.repair(id, &e) {
                Some((local, shard, bytes)) => {
                    self.process(id, (shard, local, Got::Bytes(&bytes)), cx, out)
                }
                None => Err(EngineError::Sample { id, source: e }),
            },
            Err(e) => Err(EngineError::Sample { id, source: e }),
        }
    }

    fn describe(&self, id: u64, read: bool) -> serde_json::Map<String, serde_json::Value> {
        describe_record(&self.dataset, id, read)
    }

    fn caches(&self) -> Vec<Arc<dyn Cache>> {
        vec![Arc::clone(&self.caches) as Arc<dyn Cache>]
    }
}

impl Cache for RecordsCaches {
    fn epoch_done(&self) {
        // what the decoded caches' directories hold is published for later runs
        for c in &self.decoded {
            c.flush();
        }
    }

    fn under_node_budget(&self, share: &Arc<crate::cache::NodeShare>) {
        if let Some(c) = &self.cache {
            c.under_node_budget(share);
        }
        for c in &self.decoded {
            c.under_node_budget(share);
        }
    }

    fn stats(&self) -> Vec<CacheStats> {
        let mut s: Vec<CacheStats> = self.cache.iter().map(|c| c.stats()).collect();
        s.extend(self.decoded.iter().flat_map(|c| c.stats()));
        s.extend(self.disk.iter().map(|(c, p)| p.stats(c)));
        // Parquet in place: the decoded pages, one cache that every file's codec shares
        let parquet = self.dataset.manifest().source.get("in_place")
            == Some(&serde_json::Value::from("parquet"));
        if let Some(c) = parquet
            .then(|| {
                self.dataset
                    .shards()
                    .iter()
                    .find_map(|sh| sh.codec().and_then(|c| c.cache_stats()))
            })
            .flatten()
        {
            s.push(CacheStats {
                kind: "parquet-pages".into(),
                hits: c.hits,
                misses: c.misses,
                bytes: c.bytes,
                budget: c.budget,
                entries: c.entries,
                saved: Duration::ZERO,
                shared: 0,
            });
        }
        s
    }
}

/// What the codecs held decoded for the samples of a task, in task order (kept by
/// [`Records::plan`] for [`Records::fill`]; `None`: the sample's bytes were read).
#[derive(Default)]
struct HeldRecords(Vec<Option<Held>>);

/// A record as [`Records::process`] gets it.
enum Got<'a> {
    /// Its bytes (checked).
    Bytes(&'a [u8]),
    /// What its codec held decoded ([`stokehold_format::RecordCodec::held`]).
    Held(&'a Held),
    /// Its bytes, read in part (checked; bytes not read are zero and not looked at), and how
    /// many bytes were read.
    Part(&'a [u8], usize),
}

/// Mean bytes of a record.
fn dataset_mean(ds: &Dataset) -> u64 {
    ds.bytes() / ds.len().max(1)
}

impl Records {
    /// Whether the records of shard `k` are read in part (video fields whose clips need only
    /// some keyframe intervals, a shard of stokehold's own format).
    fn partial_for(&self, k: usize) -> bool {
        self.partial.is_some() && self.dataset.shards()[k].codec().is_none()
    }

    /// Sample `id`'s record failed its checksum (`e`): when its shard was read from the disk
    /// cache's copy, that copy is what is damaged. Discard it (the shard reads its source again;
    /// the next run copies it anew), say so once, naming the damaged file, and read the record
    /// again from the source: (record in shard, shard, bytes). (Bytes the RAM cache took from a
    /// copy discarded since are re-read from the source too.) `None` when there was no copy to
    /// blame (the source itself is damaged: `e` stands) or the re-read fails too.
    fn repair(&self, id: u64, e: &FormatError) -> Option<(u64, usize, Vec<u8>)> {
        let (k, local) = self.dataset.locate(id).ok()?;
        let copy = self.caches.disk.as_ref().and_then(|(c, p)| p.discard(k, c));
        match &copy {
            Some(damaged) => eprintln!(
                "stokehold: the cached copy {} is damaged ({e}); it is deleted and shard {} is \
                 read from its source again",
                damaged.display(),
                self.dataset.shards()[k].path().display()
            ),
            // bytes from the RAM cache, loaded from a copy discarded since: read the source
            None if self.caches.cache.is_some() && self.caches.disk.is_some() => {}
            // the source's own bytes: the error stands
            None => return None,
        }
        let mut buf = Vec::new();
        // with the copy gone this reads the source, checksum included
        self.dataset.read_record(id, &mut buf).ok()?;
        Some((local, k, buf))
    }

    /// Parse and transform sample `id` (record `local` of shard `k`: its bytes, or what its
    /// codec holds decoded) into its slot.
    fn process(
        &self,
        id: u64,
        (k, local, got): (usize, u64, Got<'_>),
        cx: &mut TaskCtx<'_, '_>,
        out: &mut SlotWriter<'_>,
    ) -> Result<()> {
        let ds = &*self.dataset;
        let ws = &mut *cx.ws;
        let sample_err = |source| EngineError::Sample { id, source };
        // one clock read per stage boundary of the timed samples (see `stats::TIME_EVERY`); the
        // read stage was counted with the task's fetch
        let mut clock = ws.clock();
        let shard = &ds.shards()[k];
        let schema = ds.schema();
        // the record's own bytes, for a codec that reads a video from a file of its own
        let line = match got {
            Got::Bytes(b) => Some(b),
            _ => None,
        };
        let view = match got {
            Got::Bytes(bytes) => {
                ws.read(bytes.len());
                shard.fields(local, bytes).map_err(sample_err)?
            }
            Got::Part(bytes, read) => {
                ws.read(read);
                shard.fields(local, bytes).map_err(sample_err)?
            }
            Got::Held(held) => shard.held_fields(local, held).ok_or_else(|| {
                EngineError::Worker(format!("sample {id}: its shard holds nothing decoded"))
            })?,
        };
        let mut stage = STAGE_FIRST_COLUMN;
        let mut parse_time = Duration::ZERO;
        for (c, col) in self.columns.iter().enumerate() {
            // a video in a file of its own (files in place): read in part ([`read_file_in_part`])
            let file_video = |f: usize| {
                let vf = shard.codec()?.video_file(local, line?, schema, f)?;
                Some(vf.map_err(|e| sample_err(shard.record_error(local, e))))
            };
            let in_file = |e: String| {
                let e = RecordError::Corrupt {
                    field: self.field_index[c],
                    offset: 0,
                    detail: e,
                };
                sample_err(shard.record_error(local, e))
            };
            // the clip's packets planned as the stage will plan them (a generator of its own)
            let read_part = |vf: &VideoFile, other: Option<&[u8]>, index_only: bool| {
                let mut rng = SampleRng::for_sample(cx.seed, cx.epoch, id, c as u64);
                let mut at = SampleCtx {
                    id,
                    seed: cx.seed,
                    epoch: cx.epoch,
                    rng: &mut rng,
                    other,
                };
                read_file_in_part(col, vf, &mut at, index_only).map_err(in_file)
            };
            // the other field a stage reads (a synced clip's clock video): its bytes (of a
            // video in a file of its own, only its index: the clock's packets are not decoded)
            let other = match self.other_index[c] {
                None => None,
                Some(j) => Some(match file_video(j) {
                    Some(vf) => FieldValue::Bytes(read_part(&vf?, None, true)?.0.into()),
                    None => view
                        .field(schema, j, shard.limits().max_decompressed_bytes)
                        .map_err(|e| sample_err(shard.record_error(local, e)))?,
                }),
            };
            let other_bytes = match &other {
                Some(FieldValue::Bytes(b)) => Some(&b[..]),
                _ => None,
            };
            let partial = self
                .partial
                .as_ref()
                .is_some_and(|pv| pv.fields.contains(&self.field_index[c]));
            let value = match file_video(self.field_index[c]).filter(|_| partial) {
                Some(vf) => {
                    let (buf, read) = read_part(&vf?, other_bytes, false)?;
                    ws.read_more(read);
                    FieldValue::Bytes(buf.into())
                }
                None => view
                    .field(
                        schema,
                        self.field_index[c],
                        shard.limits().max_decompressed_bytes,
                    )
                    .map_err(|e| sample_err(shard.record_error(local, e)))?,
            };
            ws.lap_into(&mut parse_time, STAGE_PARSE, id, &mut clock);
            let mut rng = SampleRng::for_sample(cx.seed, cx.epoch, id, c as u64);
            let mut ctx = SampleCtx {
                id,
                seed: cx.seed,
                epoch: cx.epoch,
                rng: &mut rng,
                other: other_bytes,
            };
            let fail = |stage_name: &str, source| EngineError::Transform {
                id,
                at: {
                    let e = shard.entry(local);
                    Box::new(RecordPlace {
                        shard: shard.path().to_path_buf(),
                        record: local,
                        bytes: e.offset..e.offset + u64::from(e.len),
                    })
                },
                stage: stage_name.to_string(),
                column: col.name.clone(),
                source,
            };
            if col.transforms.is_empty() {
                match &col.output {
                    Output::Fixed { .. } | Output::Ragged { .. } => {
                        write_value(&value, out.fixed(c)).map_err(|m| fail("collate", m))?;
                    }
                    Output::List | Output::Patches { .. } => out.set_list(c, value.into_owned()),
                }
                ws.lap(stage, id, &mut clock);
                stage += 1;
                continue;
            }
            let n = col.transforms.len();
            let mut v: FieldValue<'_> = value;
            for (i, t) in col.transforms.iter().enumerate() {
                if i + 1 == n {
                    match &col.output {
                        Output::Fixed { .. } | Output::Ragged { .. } => {
                            t.apply_into(v, &mut ctx, out.fixed(c))
                                .map_err(|m| fail(t.name(), m))?;
                        }
                        Output::List | Output::Patches { .. } => {
                            let r = t.apply(v, &mut ctx).map_err(|m| fail(t.name(), m))?;
                            out.set_list(c, r.into_owned());
                        }
                    }
                    ws.lap(stage, id, &mut clock);
                    stage += 1;
                    break;
                }
                v = t.apply(v, &mut ctx).map_err(|m| fail(t.name(), m))?;
                ws.lap(stage, id, &mut clock);
                stage += 1;
            }
        }
        ws.add(STAGE_PARSE, clock.map(|_| parse_time));
        Ok(())
    }
}

/// Where record `id` of `ds` lives: its shard and record, the file and the byte offset (a file
/// read in place: `in_place`); with `read`, its `__key__`, `key` or `path` field when it has one.
pub(crate) fn describe_record(
    ds: &Dataset,
    id: u64,
    read: bool,
) -> serde_json::Map<String, serde_json::Value> {
    use serde_json::Value;
    let mut m = serde_json::Map::new();
    let Ok((shard, record)) = ds.locate(id) else {
        return m;
    };
    m.insert("shard".into(), Value::from(shard as u64));
    m.insert("record".into(), Value::from(record));
    if let Some(reader) = ds.shards().get(shard) {
        m.insert(
            "file".into(),
            Value::from(reader.path().display().to_string()),
        );
        if let Some(e) = reader.index().get(record as usize) {
            m.insert("offset".into(), Value::from(e.offset));
        }
        m.insert("in_place".into(), Value::from(reader.codec().is_some()));
    }
    if read {
        let schema = ds.schema();
        let named = ["__key__", "key", "path"]
            .iter()
            .find_map(|n| schema.index_of(n).map(|i| (*n, i)));
        if let Some((name, i)) = named {
            match ds.get(id) {
                Ok(values) => {
                    if let Some(stokehold_format::FieldValue::String(v)) = values.get(i) {
                        let key = if name == "path" { "path" } else { "key" };
                        m.insert(key.into(), Value::from(v.to_string()));
                    }
                }
                Err(e) => {
                    m.insert("error".into(), Value::from(e.to_string()));
                }
            }
        }
    }
    m
}
