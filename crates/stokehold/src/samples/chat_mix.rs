//! [`ChatMixture`]: rows of whole conversations (or plain-text documents) drawn from several
//! datasets by weight, the samples of `SequenceLoader(Mixture(...), text=..., packing="whole")`
//! (docs/text.md, "Mixtures of conversations").
//!
//! **Blended, then packed.** Each source is a [`ChatPlanner`] of its own (its dataset, its chat
//! template or plain-text tokenizer, its token counts and kept encodings). The conversations of
//! all sources form one endless stream in the order of a [`Blend`] (the mixtures' error
//! diffusion, docs/mixtures.md): stream sample `g` goes to the source furthest behind its
//! weight, and a source's `k`-th conversation is at position `k mod len` of that source's
//! shuffle of pass `k / len`, keyed by the seed and the source's name. Weights therefore count
//! **conversations**. Epoch `e` is the slice `e * epoch_len .. (e + 1) * epoch_len` of the stream;
//! it is planned exactly as one dataset's epoch is ([`super::chats`]): windows of `window`
//! consecutive stream conversations (those left out, overlong dropped or unreadable, are not
//! candidates), each packed best-fit-decreasing, the rows of a window permuted by the seed. So a
//! row may hold conversations of several sources; `doc_ids` names each by its index in its own
//! dataset and `doc_sources` by its source's index.
//!
//! Weights may change at conversations of the stream (a schedule in samples: each phase's
//! weights from its first conversation on, as the blend's phases are).
//!
//! The plan of an epoch is a pure function of (seed, epoch, schedule, the sources' counts), so
//! the engine's position (rows) is a resume state that continues exactly on any number of ranks.
//! The fingerprint holds the sources, their definitions, the whole schedule and `epoch_len`: a
//! state of another blend is refused, a schedule changed after the state's position included. (A
//! schedule in steps and `on_change="reblend"` are not available here yet: they are refused when
//! the loader is made.)

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::blend::{Blend, BlendDef, BlendSource, Phase, UNIT, quantize};
use crate::error::{EngineError, Result};
use crate::order::{Loadable, Order};
use crate::sampler::{EpochOrder, Shuffle};
use crate::samples::chats::{
    ChatPlanner, EpochRows, LazyRows, PackSummary, ROW_BITS, estimate_rows, fill_row, row_order,
    row_outputs, rows_batch_outputs, window_rows,
};
use crate::samples::mixture::MAX_STREAM;
use crate::samples::{Layout, Samples, SlotWriter, TaskCtx, TaskIo};
use crate::stages::Output;

/// One epoch's plan, made window by window as its rows are asked for (as one dataset's,
/// [`super::chats::EpochPlan`]): window `w` is packed from the counts of its own conversations
/// only, each source's counted first when they are not yet, so the first batch needs only the
/// first window counted. The rows are the same however far and by whom it was planned.
#[derive(Debug)]
struct MixPlan {
    epoch: u64,
    state: Mutex<MixPlanned>,
    /// Every window is planned: the rows are all there.
    done: AtomicBool,
}

/// The windows of an epoch planned so far: its rows (conversations as mixture ids) and, per
/// source, the conversations and tokens it put in them.
#[derive(Debug)]
struct MixPlanned {
    rows: EpochRows,
    conversations: Vec<u64>,
    tokens: Vec<u64>,
    /// Conversations of the epoch's stream planned.
    at: u64,
    /// The next window.
    window: u64,
}

/// What a mixture's plan says, per source, for `stats()["packing"]["sources"]`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SourcePack {
    /// The source's index (its `doc_sources` value).
    pub index: u64,
    /// Its weight (a fraction of 1: of the conversations of the stream).
    pub weight: f64,
    /// Conversations (or documents) in its dataset.
    pub dataset: u64,
    /// Its conversations in the rows of the epoch planned.
    pub conversations: u64,
    /// Their tokens (not padding).
    pub tokens: u64,
    /// Its tokens over all the rows' tokens of the epoch.
    pub token_share: f64,
    /// Passes over its conversations by the end of the epoch (2.5: two and a half).
    pub passes: f64,
    /// Overlong conversations truncated, dropped; conversations that could not be read or
    /// encoded (`on_error="skip"`).
    pub truncated: u64,
    /// See `truncated`.
    pub dropped: u64,
    /// See `truncated`.
    pub skipped: u64,
}

/// [`PackSummary`] of the whole mixture, with each source's part.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct MixPackSummary {
    /// The mixture's figures (its `conversations`: the conversations of an epoch's stream).
    #[serde(flatten)]
    pub total: PackSummary,
    /// Per source name.
    pub sources: BTreeMap<String, SourcePack>,
}

/// Several datasets of conversations (or documents) blended, packed whole into rows.
pub struct ChatMixture {
    names: Vec<String>,
    planners: Vec<Arc<ChatPlanner>>,
    offsets: Vec<u64>,
    /// The phases: from which conversation of the stream each weights hold.
    schedule: Vec<(u64, Vec<u64>)>,
    blend: Blend,
    epoch_len: u64,
    seq_len: u32,
    window: u32,
    pad_id: u32,
    /// The most image tokens a row holds.
    max_image_tokens: Option<u32>,
    /// Floats per row of `pixel_values`, when a source has images.
    image_row: Option<usize>,
    shuffle: Shuffle,
    seed: u64,
    fingerprint: String,
    outputs: Vec<(String, Output)>,
    /// The epochs planned lately.
    epochs: Mutex<Vec<(u64, Arc<MixPlan>)>>,
}

impl std::fmt::Debug for ChatMixture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatMixture")
            .field("sources", &self.names)
            .field("schedule", &self.schedule)
            .field("epoch_len", &self.epoch_len)
            .finish_non_exhaustive()
    }
}

/// Column indices of the per-conversation columns (their widths are the batch's).
const DOCS: usize = 4;
const DOC_SOURCES: usize = 5;

impl ChatMixture {
    /// A mixture of the sources `(name, planner)` (counted at open or lazily, all with the
    /// same `seq_len`, `window`, `overlong` and `pad_id`), blended by the weights of `schedule`
    /// (from each entry's conversation of the stream on, the first at 0; one weight per source,
    /// finite and >= 0; empty: in proportion to the sources' conversations), `epoch_len`
    /// conversations of the stream per epoch (`None`: the sources' conversations summed).
    pub fn new(
        sources: Vec<(String, Arc<ChatPlanner>)>,
        schedule: &[(u64, Vec<f64>)],
        epoch_len: Option<u64>,
        shuffle: Shuffle,
        seed: u64,
    ) -> Result<ChatMixture> {
        let bad = |m: String| Err(EngineError::Config(m));
        let Some((_, first)) = sources.first() else {
            return Err(crate::blend::MixtureMistake::NoSources.into());
        };
        let options = first.options().clone();
        for (name, p) in &sources {
            let o = p.options();
            if (
                o.seq_len,
                o.window,
                o.overlong,
                o.pad_id,
                o.max_image_tokens,
            ) != (
                options.seq_len,
                options.window,
                options.overlong,
                options.pad_id,
                options.max_image_tokens,
            ) {
                return bad(format!(
                    "source '{name}' is packed with other options than the first source"
                ));
            }
        }
        let lens: Vec<f64> = sources.iter().map(|(_, p)| p.len() as f64).collect();
        if schedule.first().is_none_or(|(at, _)| *at != 0) {
            return bad("a mixture's weights start at its first conversation".into());
        }
        let mut phases = Vec::with_capacity(schedule.len());
        for (at, w) in schedule {
            let q = quantize(if w.is_empty() { &lens } else { w })?;
            if q.len() != sources.len() {
                return bad(format!(
                    "weights at {at} give {} values for {} sources",
                    q.len(),
                    sources.len()
                ));
            }
            phases.push((*at, q));
        }
        let total: u64 = sources.iter().map(|(_, p)| p.len()).sum();
        let epoch_len = epoch_len.unwrap_or(total);
        let blend = Blend::new(BlendDef {
            sources: sources
                .iter()
                .map(|(name, p)| BlendSource {
                    name: name.clone(),
                    len: p.len(),
                    blocks: None,
                })
                .collect(),
            phases: phases
                .iter()
                .map(|(start, weights)| Phase {
                    start: *start,
                    weights: weights.clone(),
                })
                .collect(),
            origin: 0,
            base: vec![0; sources.len()],
            epoch_len,
            shuffle,
            seed,
        })?;
        let mut offsets = Vec::with_capacity(sources.len());
        let mut next = 0u64;
        for (_, p) in &sources {
            offsets.push(next);
            next += p.len();
        }
        let mut fp = 0u32;
        for (name, p) in &sources {
            fp = stokehold_format::crc::append(fp, name.as_bytes());
            fp = stokehold_format::crc::append(fp, p.fingerprint().as_bytes());
        }
        for (at, w) in &phases {
            fp = stokehold_format::crc::append(fp, &at.to_le_bytes());
            for x in w {
                fp = stokehold_format::crc::append(fp, &x.to_le_bytes());
            }
        }
        fp = stokehold_format::crc::append(fp, &epoch_len.to_le_bytes());
        // every source with images gives patches of one length (one pixel_values per batch)
        let mut image_row = None;
        for (name, p) in &sources {
            let Some(v) = p.vision() else {
                continue;
            };
            match image_row {
                None => image_row = Some((name, v.row_len())),
                Some((first, len)) if len != v.row_len() => {
                    return bad(format!(
                        "sources '{first}' and '{name}' have vision processors of other patch \
                         sizes ({len} and {} floats a patch): one batch holds one pixel_values",
                        v.row_len()
                    ));
                }
                Some(_) => {}
            }
        }
        let image_row = image_row.map(|(_, len)| len);
        if options.max_image_tokens.is_some() && image_row.is_none() {
            return Err(super::chats::no_images());
        }
        Ok(ChatMixture {
            names: sources.iter().map(|(n, _)| n.clone()).collect(),
            planners: sources.into_iter().map(|(_, p)| p).collect(),
            offsets,
            schedule: phases,
            blend,
            epoch_len,
            seq_len: options.seq_len,
            window: options.window,
            pad_id: options.pad_id,
            max_image_tokens: options.max_image_tokens,
            image_row,
            shuffle,
            seed,
            fingerprint: format!("chat-mixture:{fp:08x}"),
            outputs: row_outputs(options.seq_len, &["doc_sources"], image_row.is_some()),
            epochs: Mutex::new(Vec::new()),
        })
    }

    /// The sources' names, in order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The sources' planners, in order.
    pub fn planners(&self) -> &[Arc<ChatPlanner>] {
        &self.planners
    }

    /// Conversations of the stream per epoch.
    pub fn epoch_len(&self) -> u64 {
        self.epoch_len
    }

    /// The source of mixture id `id` and the id within it.
    fn source_of(&self, id: u64) -> (usize, u64) {
        let s = self.offsets.partition_point(|&o| o <= id).saturating_sub(1);
        (s, id - self.offsets[s])
    }

    /// The token count of mixture id `id` in a row; `None`: left out.
    fn count_of(&self, id: u64) -> Option<u32> {
        let (s, local) = self.source_of(id);
        self.planners[s].count_of(local)
    }

    /// The plan of epoch `epoch` (planned window by window as its rows are asked for; the last
    /// few epochs kept).
    fn plan_of(&self, epoch: u64) -> Result<Arc<MixPlan>> {
        let mut kept = crate::sync::lock(&self.epochs);
        if let Some((_, r)) = kept.iter().find(|(e, _)| *e == epoch) {
            return Ok(Arc::clone(r));
        }
        let start = u128::from(epoch) * u128::from(self.epoch_len);
        if start + u128::from(self.epoch_len) > u128::from(MAX_STREAM)
            || epoch >= 1 << (64 - ROW_BITS)
        {
            return Err(EngineError::Config(format!(
                "epoch {epoch} of {} conversations is past the {MAX_STREAM} conversations a \
                 mixture's stream holds",
                self.epoch_len
            )));
        }
        let n = self.planners.len();
        let plan = Arc::new(MixPlan {
            epoch,
            state: Mutex::new(MixPlanned {
                rows: EpochRows::empty(),
                conversations: vec![0; n],
                tokens: vec![0; n],
                at: 0,
                window: 0,
            }),
            done: AtomicBool::new(self.epoch_len == 0),
        });
        kept.push((epoch, Arc::clone(&plan)));
        if kept.len() > 3 {
            kept.remove(0);
        }
        Ok(plan)
    }

    /// Whether every source's conversations are counted.
    fn all_counted(&self) -> bool {
        self.planners.iter().all(|p| p.all_counted())
    }

    /// The rows of epoch `epoch`, planned to its end.
    pub fn rows(&self, epoch: u64) -> Result<u64> {
        let plan = self.plan_of(epoch)?;
        plan.ensure(self, u64::MAX)?;
        Ok(plan.lock().rows.len())
    }

    /// Plan the first window of epoch `epoch` (the first batch needs it; the engine's `len()`
    /// estimates the epoch's rows from it), then count the rest of every source in the
    /// background ([`ChatPlanner::count_in_background`]).
    pub fn plan_first_window(&self, epoch: u64) -> Result<()> {
        self.plan_of(epoch)?.ensure(self, 0)?;
        for p in &self.planners {
            p.count_in_background();
        }
        Ok(())
    }

    /// The conversations of row `r` of epoch `epoch` (planned first), `None` past its rows.
    fn row(&self, epoch: u64, r: u64) -> Result<Option<Vec<u64>>> {
        let plan = self.plan_of(epoch)?;
        if !plan.ensure(self, r)? {
            return Ok(None);
        }
        Ok(plan.lock().rows.row(r).map(<[u64]>::to_vec))
    }

    /// What the plan of epoch `epoch` says, in all and per source.
    /// The rows are those planned so far (all of them once `exact`).
    pub fn summary(&self, epoch: u64) -> Result<MixPackSummary> {
        let plan = self.plan_of(epoch)?;
        let exact = plan.done.load(Ordering::Acquire);
        let planned = plan.lock();
        let cap = planned.rows.len() * u64::from(self.seq_len);
        let counts = self
            .blend
            .counts_at(epoch.saturating_add(1).saturating_mul(self.epoch_len));
        let mut total = PackSummary {
            conversations: self.epoch_len,
            counted: self.planners.iter().map(|p| p.counted()).sum(),
            exact,
            rows: planned.rows.len(),
            fill: if cap == 0 {
                0.0
            } else {
                planned.rows.tokens as f64 / cap as f64
            },
            ..PackSummary::default()
        };
        // the weights in force at the epoch's first conversation
        let weights = self.blend.weights_at(epoch.saturating_mul(self.epoch_len));
        let mut sources = BTreeMap::new();
        for (s, (name, p)) in self.names.iter().zip(&self.planners).enumerate() {
            let (truncated, dropped, skipped) = p.left_out();
            total.truncated += truncated;
            total.dropped += dropped;
            total.skipped += skipped.len() as u64;
            total.kept += p.kept();
            for (id, why) in &skipped {
                if total.skipped_examples.len() < 100 {
                    total
                        .skipped_examples
                        .push((self.offsets[s] + id, format!("source '{name}': {why}")));
                }
            }
            sources.insert(
                name.clone(),
                SourcePack {
                    index: s as u64,
                    weight: weights[s] as f64 / UNIT as f64,
                    dataset: p.len(),
                    conversations: planned.conversations[s],
                    tokens: planned.tokens[s],
                    token_share: if planned.rows.tokens == 0 {
                        0.0
                    } else {
                        planned.tokens[s] as f64 / planned.rows.tokens as f64
                    },
                    passes: counts[s] as f64 / p.len().max(1) as f64,
                    truncated,
                    dropped,
                    skipped: skipped.len() as u64,
                },
            );
        }
        Ok(MixPackSummary { total, sources })
    }
}

impl MixPlan {
    fn lock(&self) -> MutexGuard<'_, MixPlanned> {
        crate::sync::lock(&self.state)
    }

    /// The length once every window is planned.
    fn known(&self) -> Option<u64> {
        self.done
            .load(Ordering::Acquire)
            .then(|| self.lock().rows.len())
    }

    /// Plan windows of the epoch's slice of the blended stream until row `r` exists or the
    /// windows run out; whether it exists. Each window's conversations are counted first (by
    /// their sources' planners, on their threads), then packed best-fit-decreasing, its rows
    /// permuted by the seed when shuffling.
    fn ensure(&self, mix: &ChatMixture, r: u64) -> Result<bool> {
        let mut p = self.lock();
        let start = self.epoch * mix.epoch_len; // checked by `plan_of`
        let shuffled = !matches!(mix.shuffle, Shuffle::Sequential);
        let window = u64::from(mix.window);
        let mut ids = Vec::with_capacity(mix.window as usize);
        let mut locals: Vec<Vec<u64>> = vec![Vec::new(); mix.planners.len()];
        while p.rows.len() <= r && p.at < mix.epoch_len {
            let end = (p.at + window).min(mix.epoch_len);
            ids.clear();
            mix.blend.ids(start + p.at..start + end, &mut ids);
            for l in &mut locals {
                l.clear();
            }
            for &id in &ids {
                let (s, local) = mix.source_of(id);
                locals[s].push(local);
            }
            for (s, l) in locals.iter().enumerate() {
                mix.planners[s]
                    .count_these(l)
                    .map_err(|e| e.in_source(&mix.names[s]))?;
            }
            let items: Vec<(u32, u32, u64)> = ids
                .iter()
                .filter_map(|&id| {
                    let (s, local) = mix.source_of(id);
                    let planner = &mix.planners[s];
                    planner
                        .count_of(local)
                        .map(|c| (c, planner.images_of(local), id))
                })
                .collect();
            let rows = window_rows(
                &items,
                mix.seq_len,
                mix.max_image_tokens,
                shuffled.then_some((mix.seed, self.epoch, p.window)),
            );
            for row in rows {
                let mut tokens = 0u64;
                for &id in &row {
                    let c = u64::from(mix.count_of(id).unwrap_or(0));
                    let (s, _) = mix.source_of(id);
                    p.conversations[s] += 1;
                    p.tokens[s] += c;
                    tokens += c;
                }
                p.rows.push_row(&row, tokens);
            }
            if p.rows.len() >= 1 << ROW_BITS {
                return Err(EngineError::Config(format!(
                    "epoch {} has more than 2^{ROW_BITS} rows",
                    self.epoch
                )));
            }
            p.at = end;
            p.window += 1;
            if end == mix.epoch_len {
                self.done.store(true, Ordering::Release);
            }
        }
        Ok(r < p.rows.len())
    }
}

/// A mixture's epoch plan with its mixture.
#[derive(Debug)]
struct LateMixPlan {
    mix: Arc<ChatMixture>,
    plan: Arc<MixPlan>,
}

impl LazyRows for LateMixPlan {
    fn ensure(&self, r: u64) -> Result<bool> {
        self.plan.ensure(&self.mix, r)
    }
    fn known(&self) -> Option<u64> {
        self.plan.known()
    }
    fn planned(&self) -> u64 {
        self.plan.lock().rows.len()
    }
    fn estimate(&self) -> u64 {
        let p = self.plan.lock();
        estimate_rows(p.rows.len(), p.at, self.mix.epoch_len)
    }
    fn all_counted(&self) -> bool {
        self.mix.all_counted()
    }
}

/// The order of [`ChatMixRows`]: the row order of each epoch's plan. While the sources'
/// conversations are still being counted its length is known late ([`LateMixPlan`]); once all
/// are counted the epoch is planned whole first (its length exact from the start).
#[derive(Debug)]
struct MixRowOrder {
    mix: Arc<ChatMixture>,
}

impl Order for MixRowOrder {
    fn epoch(&self, shuffle: &Shuffle, seed: u64, epoch: u64) -> Result<EpochOrder> {
        let plan = self.mix.plan_of(epoch)?;
        let mix = Arc::clone(&self.mix);
        let planned_with = (&self.mix.shuffle, self.mix.seed);
        row_order(
            LateMixPlan { mix, plan },
            planned_with,
            shuffle,
            seed,
            epoch,
        )
    }
}

/// Rows of a [`ChatMixture`]: the columns of one dataset's rows ([`super::ChatRows`]) and
/// `doc_sources` (int64 `[K]`: each conversation's source, -1 padded).
#[derive(Debug)]
pub struct ChatMixRows {
    mix: Arc<ChatMixture>,
}

impl ChatMixRows {
    /// The rows `mix` plans.
    pub fn new(mix: Arc<ChatMixture>) -> ChatMixRows {
        ChatMixRows { mix }
    }

    /// The conversations of row id `id` (its epoch planned up to it).
    fn row_of(&self, id: u64) -> Result<Vec<u64>> {
        let (epoch, r) = (id >> ROW_BITS, id & ((1 << ROW_BITS) - 1));
        self.mix.row(epoch, r)?.ok_or_else(|| {
            EngineError::Worker(format!(
                "row {r} of epoch {epoch} is past the epoch's {} rows",
                self.mix.rows(epoch).unwrap_or(0)
            ))
        })
    }
}

impl From<Arc<ChatMixRows>> for Loadable {
    fn from(rows: Arc<ChatMixRows>) -> Loadable {
        Loadable {
            order: Arc::new(MixRowOrder {
                mix: Arc::clone(&rows.mix),
            }),
            samples: rows,
            groups: None,
        }
    }
}

impl Samples for ChatMixRows {
    fn len(&self) -> u64 {
        // rows never outnumber the conversations of an epoch's stream
        self.mix.epoch_len
    }

    fn layout(&self) -> Layout {
        Layout {
            mean_bytes: u64::from(self.mix.seq_len) * 4,
            blocks: None,
            whole_batch_tasks: false,
            stage_names: vec!["encode".to_string()],
            fingerprint: self.mix.fingerprint.clone(),
        }
    }

    fn columns(&self) -> &[(String, Output)] {
        &self.mix.outputs
    }

    fn batch_outputs(&self, ids: &[u64]) -> Option<Vec<Output>> {
        let rows: Vec<Option<Vec<(&ChatPlanner, u64)>>> = ids
            .iter()
            .map(|&id| {
                let convs = self.row_of(id).ok()?;
                Some(
                    convs
                        .iter()
                        .map(|&conv| {
                            let (s, local) = self.mix.source_of(conv);
                            (&*self.mix.planners[s], local)
                        })
                        .collect(),
                )
            })
            .collect();
        Some(rows_batch_outputs(
            &self.mix.outputs,
            DOCS..DOC_SOURCES + 1,
            &rows,
            self.mix.image_row,
        ))
    }

    fn fill(
        &self,
        id: u64,
        _k: usize,
        _io: &mut TaskIo,
        cx: &mut TaskCtx<'_, '_>,
        out: &mut SlotWriter<'_>,
    ) -> Result<()> {
        let mut clock = cx.ws.clock();
        let convs = self.row_of(id)?;
        let mut planners = Vec::with_capacity(convs.len());
        let (mut locals, mut sources) = (Vec::new(), Vec::new());
        for &conv in &convs {
            let (s, local) = self.mix.source_of(conv);
            planners.push((&*self.mix.planners[s], local));
            locals.push(local as i64);
            sources.push(s as i64);
        }
        let bytes = fill_row(
            &planners,
            &[&locals, &sources],
            self.mix.pad_id,
            self.mix.image_row,
            out,
        )?;
        cx.ws.read(bytes);
        cx.ws.lap(0, id, &mut clock);
        Ok(())
    }
}
