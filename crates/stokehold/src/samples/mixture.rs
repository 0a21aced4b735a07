//! [`Mixture`]: several sets of samples (datasets of images, token windows, ...) loaded as one,
//! in the order of a [`Blend`] (docs/mixtures.md).
//!
//! A mixture's ids are its sources' ids, concatenated (source `s`'s id `i` is
//! `offsets[s] + i`); its epoch is a slice of the endless blended stream, so `len` is the
//! epoch's length, not the sum of the sources'. Each source keeps its own `Samples` (its
//! transforms, caches, storage); the mixture's byte sources are its sources' together, so a
//! task's ids, grouped by source and planned by their source, are read in one fetch, and each
//! sample is filled by its source into the same columns, then tagged with its source's index
//! (the `source` column).
//!
//! The blend is a value beside the samples ([`Blended`]: the mixture's [`Order`] and
//! [`Groups`], with the blend's part of a resume state), made with the mixture
//! ([`Mixture::loadable`]).

use std::sync::{Arc, Mutex};

use stokehold_format::DType;

use crate::blend::{
    Blend, BlendDef, BlendSource, BlendState, MixtureMistake, Phase, UNIT, quantize,
};
use crate::cache::CacheStats;
use crate::error::{EngineError, Result};
use crate::fetch::ByteSource;
use crate::order::{Groups, Loadable, Order, OrderState, Share};
use crate::sampler::{EpochOrder, PositionMap, Shuffle};
use crate::samples::{Cache, Layout, Samples, SlotWriter, TaskCtx, TaskFill, TaskIo, TaskView};
use crate::stages::Output;
use crate::sync::lock;

/// The name of the column that says each sample's source.
pub const SOURCE_COLUMN: &str = "source";

/// The furthest stream sample a resume state may name (2^50, about 10^15 samples: 30 years at a
/// million samples a second). The blend walks to a position from its nearest known state, so a
/// state beyond this (damaged or forged) is refused instead of walked.
pub const MAX_STREAM: u64 = 1 << 50;

/// One source of a mixture.
#[derive(Debug, Clone)]
pub struct MixtureSource {
    /// Its name (unique in the mixture; it keys the source's shuffle and names it in errors,
    /// statistics and resume states).
    pub name: String,
    /// Its samples.
    pub samples: Arc<dyn Samples>,
    /// Under `on_error = skip`, the largest fraction of this source's share of an epoch that
    /// may be skipped (its weight at the epoch's start times the rank's samples in the epoch);
    /// `None`: only the loader's budget.
    pub max_skip_fraction: Option<f64>,
}

impl MixtureSource {
    /// A source named `name` of `samples`, without a skip budget of its own.
    pub fn new(name: impl Into<String>, samples: Arc<dyn Samples>) -> MixtureSource {
        MixtureSource {
            name: name.into(),
            samples,
            max_skip_fraction: None,
        }
    }
}

/// When a schedule's entries count: in samples of the blended stream, or in steps (batches of
/// the loader over all ranks: `batch_size * world_size` samples each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleUnit {
    /// Steps of `samples_per_step` samples (the global batch of the run that started the blend).
    Steps,
    /// Samples of the blended stream.
    Samples,
}

/// What to do when a resume state's blend differs from this mixture's before the state's
/// position (a source added or removed, weights changed in the past).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnChange {
    /// Refuse the state with an error that says what differs (the default).
    #[default]
    Refuse,
    /// Start a new blend at the state's position: every source continues from the samples it
    /// gave before (none repeated early), with this mixture's weights from there on.
    Reblend,
}

/// How a mixture blends its sources.
#[derive(Debug, Clone, PartialEq)]
pub struct MixtureOptions {
    /// The weights from each entry's point on (the first at 0), one per source, in the sources'
    /// order (any non-negative numbers; normalised); empty: in proportion to the sources'
    /// samples.
    pub schedule: Vec<(u64, Vec<f64>)>,
    /// What the schedule's points count.
    pub unit: ScheduleUnit,
    /// Samples per step (for [`ScheduleUnit::Steps`]): the loader's `batch_size * world_size`.
    pub samples_per_step: u64,
    /// Samples per epoch (`None`: the sources' lengths summed).
    pub epoch_samples: Option<u64>,
    /// Add the `source` column (int64: the source's index).
    pub source_column: bool,
    /// What a changed blend in a resume state does.
    pub on_change: OnChange,
}

/// The blend's plan now: where it starts, each source's count before that, the phases (in
/// stream samples) and the samples per step the schedule was converted with.
#[derive(Debug, Clone, PartialEq)]
struct Plan {
    origin: u64,
    base: Vec<u64>,
    phases: Vec<Phase>,
    samples_per_step: Option<u64>,
}
/// Several sets of samples as one, blended ([`crate::blend`]).
pub struct Mixture {
    sources: Vec<MixtureSource>,
    /// The byte sources of all the sources, in order.
    bytes: Vec<ByteSource>,
    /// Per source: the index of its first byte source in `bytes`.
    first_byte_source: Vec<u16>,
    offsets: Vec<u64>,
    columns: Vec<(String, Output)>,
    stage_names: Vec<String>,
    source_column: bool,
    /// Whether any source shapes its outputs per batch (padded documents): otherwise
    /// `batch_outputs` costs nothing per batch.
    shaped: bool,
    whole_batch_tasks: bool,
    fingerprint: String,
    /// The order, the groups and the blend's resume state.
    blended: Arc<Blended>,
}

impl std::fmt::Debug for Mixture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mixture")
            .field(
                "sources",
                &self.sources.iter().map(|s| &s.name).collect::<Vec<_>>(),
            )
            .field("schedule", &self.blended.schedule)
            .field("epoch_len", &self.blended.epoch_len)
            .finish_non_exhaustive()
    }
}

/// The blend of a mixture: its [`Order`] (the blended stream, sliced into epochs), its
/// [`Groups`] (the sources, with their skip budgets and shares) and what a resume state keeps
/// of it ([`BlendState`]).
pub struct Blended {
    names: Vec<String>,
    fingerprints: Vec<String>,
    lens: Vec<u64>,
    blocks: Vec<Option<Vec<u64>>>,
    max_skip_fraction: Vec<Option<f64>>,
    offsets: Vec<u64>,
    /// The schedule as given, quantised, in its unit.
    schedule: Vec<(u64, Vec<u64>)>,
    unit: ScheduleUnit,
    samples_per_step: u64,
    epoch_len: u64,
    on_change: OnChange,
    plan: Mutex<Plan>,
    /// The blend of the plan for the last (shuffle, seed) asked for.
    blend: Mutex<Option<(Shuffle, u64, Arc<Blend>)>>,
}

impl std::fmt::Debug for Blended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blended")
            .field("sources", &self.names)
            .field("schedule", &self.schedule)
            .field("epoch_len", &self.epoch_len)
            .finish_non_exhaustive()
    }
}

/// The mixture's part of a task: which source holds each sample, the sources' groups of ids and
/// each source's own scratch.
#[derive(Default)]
struct MixScratch {
    subs: Vec<Option<Box<dyn std::any::Any + Send>>>,
    groups: Vec<Vec<u64>>,
    /// Per source: the plan's index of its first sample in the task.
    first: Vec<usize>,
    /// Per sample of the task: (source, index in its group).
    slot: Vec<(u32, u32)>,
    /// Per source: the task's index of each sample of its group.
    at: Vec<Vec<u32>>,
}

impl MixScratch {
    fn group(&mut self, mix: &Mixture, ids: &[u64]) {
        let n = mix.sources.len();
        self.subs.resize_with(n, || None);
        self.groups.resize_with(n, Vec::new);
        self.at.resize_with(n, Vec::new);
        self.first.resize(n, 0);
        for (g, a) in self.groups.iter_mut().zip(&mut self.at) {
            g.clear();
            a.clear();
        }
        self.slot.clear();
        for (k, &id) in ids.iter().enumerate() {
            let (s, local) = mix.source_of(id);
            self.slot.push((s as u32, self.groups[s].len() as u32));
            self.groups[s].push(local);
            self.at[s].push(k as u32);
        }
    }
}

/// The mixture's scratch, taken out of a task's scratch while its sources plan or fill
/// through it, and put back however that ends (a source's panic included).
struct Held<'a> {
    io: &'a mut TaskIo,
    sc: Option<Box<MixScratch>>,
    /// The source entered, and the view to go back to.
    entered: Option<(usize, TaskView)>,
}

impl<'a> Held<'a> {
    fn new(io: &'a mut TaskIo) -> Held<'a> {
        let sc = io.take_scratch::<MixScratch>();
        Held {
            io,
            sc: Some(sc),
            entered: None,
        }
    }

    fn sc(&mut self) -> &mut MixScratch {
        self.sc.as_mut().expect("held until dropped")
    }

    /// Plan or fill source `s`'s part of the task from `view` on.
    fn enter(&mut self, s: usize, view: TaskView) {
        let sc = self.sc.as_mut().expect("held until dropped");
        let before = self.io.enter(view, &mut sc.subs[s]);
        self.entered = Some((s, before));
    }

    fn leave(&mut self) {
        if let Some((s, before)) = self.entered.take() {
            let sc = self.sc.as_mut().expect("held until dropped");
            self.io.leave(before, &mut sc.subs[s]);
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.leave();
        if let Some(sc) = self.sc.take() {
            self.io.put_scratch(sc);
        }
    }
}

/// The caches of a mixture's sources, reported as one per kind.
#[derive(Debug)]
struct MixtureCaches(Vec<Arc<dyn Cache>>);

impl Cache for MixtureCaches {
    fn stats(&self) -> Vec<CacheStats> {
        crate::samples::cache_stats(&self.0, true)
    }

    fn epoch_done(&self) {
        for c in &self.0 {
            c.epoch_done();
        }
    }

    fn under_node_budget(&self, share: &Arc<crate::cache::NodeShare>) {
        for c in &self.0 {
            c.under_node_budget(share);
        }
    }
}

fn describe(o: &Output) -> String {
    match o {
        Output::Fixed { dtype, shape } => format!("{dtype:?} {shape:?}"),
        Output::List => "a list".into(),
        Output::Patches { merge, row } => format!("image patches ({merge}x{merge} of {row})"),
        Output::Ragged {
            dtype, row_shape, ..
        } => format!("{dtype:?} rows of {row_shape:?}"),
    }
}

impl Mixture {
    /// A mixture of `sources` (at least one, names unique, the same columns) blended as
    /// `options` say.
    pub fn new(sources: Vec<MixtureSource>, options: MixtureOptions) -> Result<Mixture> {
        let bad = |m: String| Err(EngineError::Config(m));
        if sources.is_empty() {
            return Err(MixtureMistake::NoSources.into());
        }
        for (i, s) in sources.iter().enumerate() {
            if s.name.is_empty() {
                return bad(format!("source {i} of the mixture has an empty name"));
            }
            if sources[..i].iter().any(|t| t.name == s.name) {
                return bad(format!("two sources of the mixture are named '{}'", s.name));
            }
            if let Some(f) = s.max_skip_fraction
                && !(0.0..=1.0).contains(&f)
            {
                return bad(format!(
                    "source '{}': max_skip_fraction {f} is not in 0..=1",
                    s.name
                ));
            }
        }
        // the columns: the first source's; every other must give the same, in the same order
        let first = &sources[0];
        let columns: Vec<(String, Output)> = first.samples.columns().to_vec();
        for s in &sources[1..] {
            let theirs = s.samples.columns();
            for (name, out) in &columns {
                match theirs.iter().find(|(n, _)| n == name) {
                    None => {
                        return bad(format!(
                            "source '{}' has no field '{name}', which source '{}' gives: the \
                             sources of a mixture must agree on the fields the loader reads",
                            s.name, first.name
                        ));
                    }
                    Some((_, o)) if o != out => {
                        return bad(format!(
                            "source '{}' gives '{name}' as {}, source '{}' as {}: the sources \
                             of a mixture must give each field the same shape and type (give \
                             a source transforms of its own that make them agree)",
                            s.name,
                            describe(o),
                            first.name,
                            describe(out)
                        ));
                    }
                    Some(_) => {}
                }
            }
            if theirs.len() != columns.len() || theirs.iter().zip(&columns).any(|(a, b)| a.0 != b.0)
            {
                let extra = theirs
                    .iter()
                    .find(|(n, _)| !columns.iter().any(|(c, _)| c == n))
                    .map_or_else(String::new, |(n, _)| n.clone());
                return bad(format!(
                    "source '{}' gives the field '{extra}', which source '{}' does not (or \
                     in another order): the sources of a mixture must agree on the fields the \
                     loader reads",
                    s.name, first.name
                ));
            }
        }
        let mut columns = columns;
        if options.source_column {
            if columns.iter().any(|(n, _)| n == SOURCE_COLUMN) {
                return bad(format!(
                    "the sources have a field '{SOURCE_COLUMN}', which the mixture's own column \
                     would hide: switch the mixture's source column off"
                ));
            }
            columns.push((
                SOURCE_COLUMN.to_string(),
                Output::Fixed {
                    dtype: DType::I64,
                    shape: vec![],
                },
            ));
        }
        // stage names: index by index, the sources' names (joined where they differ)
        let layouts: Vec<Layout> = sources.iter().map(|s| s.samples.layout()).collect();
        let lists: Vec<&Vec<String>> = layouts.iter().map(|l| &l.stage_names).collect();
        let longest = lists.iter().map(|l| l.len()).max().unwrap_or(0);
        let stage_names = (0..longest)
            .map(|i| {
                let mut names: Vec<&str> = Vec::new();
                for l in &lists {
                    if let Some(n) = l.get(i)
                        && !names.contains(&n.as_str())
                    {
                        names.push(n);
                    }
                }
                names.join(" | ")
            })
            .collect();
        let mut offsets = Vec::with_capacity(sources.len());
        let mut total = 0u64;
        for s in &sources {
            offsets.push(total);
            total = total.checked_add(s.samples.len()).ok_or_else(|| {
                EngineError::Config("the sources hold more than 2^64 samples together".into())
            })?;
        }
        let epoch_len = options.epoch_samples.unwrap_or(total);
        if epoch_len == 0 {
            return bad("a mixture's epoch must hold at least one sample".into());
        }
        if options.schedule.is_empty() {
            return Err(MixtureMistake::NoWeights.into());
        }
        let mut schedule = Vec::with_capacity(options.schedule.len());
        let lengths: Vec<f64> = sources.iter().map(|s| s.samples.len() as f64).collect();
        for (at, w) in &options.schedule {
            // no weights: each source in proportion to its samples
            let w = if w.is_empty() { &lengths } else { w };
            if w.len() != sources.len() {
                return bad(format!(
                    "weights at {at} give {} values for {} sources",
                    w.len(),
                    sources.len()
                ));
            }
            let q = quantize(w)?;
            for (s, &qw) in q.iter().enumerate() {
                if qw > 0 && sources[s].samples.len() == 0 {
                    return bad(format!(
                        "source '{}' has no samples but a weight above 0",
                        sources[s].name
                    ));
                }
            }
            schedule.push((*at, q));
        }
        if schedule[0].0 != 0 {
            return bad(format!(
                "a mixture's schedule must start at 0 (its first weights), not at {}",
                schedule[0].0
            ));
        }
        if let Some(w) = schedule.windows(2).find(|w| w[1].0 <= w[0].0) {
            return Err(MixtureMistake::StepsDoNotIncrease {
                earlier: w[0].0,
                later: w[1].0,
            }
            .into());
        }
        if options.unit == ScheduleUnit::Steps && options.samples_per_step == 0 {
            return bad("a schedule in steps needs the samples per step".into());
        }
        let mut fp = 0u32;
        for (s, l) in sources.iter().zip(&layouts) {
            fp = stokehold_format::crc::append(fp, s.name.as_bytes());
            fp = stokehold_format::crc::append(fp, l.fingerprint.as_bytes());
        }
        fp = stokehold_format::crc::append(fp, &epoch_len.to_le_bytes());
        let mut bytes = Vec::new();
        let mut first_byte_source = Vec::with_capacity(sources.len());
        for s in &sources {
            first_byte_source.push(u16::try_from(bytes.len()).map_err(|_| {
                EngineError::Config("a mixture reads from at most 65,535 datasets".into())
            })?);
            bytes.extend(s.samples.sources().iter().cloned());
        }
        if bytes.len() > usize::from(u16::MAX) {
            return bad("a mixture reads from at most 65,535 datasets".into());
        }
        let blended = Blended {
            names: sources.iter().map(|s| s.name.clone()).collect(),
            fingerprints: layouts.iter().map(|l| l.fingerprint.clone()).collect(),
            lens: sources.iter().map(|s| s.samples.len()).collect(),
            blocks: layouts.iter().map(|l| l.blocks.clone()).collect(),
            max_skip_fraction: sources.iter().map(|s| s.max_skip_fraction).collect(),
            offsets: offsets.clone(),
            schedule,
            unit: options.unit,
            samples_per_step: options.samples_per_step,
            epoch_len,
            on_change: options.on_change,
            plan: Mutex::new(Plan {
                origin: 0,
                base: Vec::new(),
                phases: Vec::new(),
                samples_per_step: None,
            }),
            blend: Mutex::new(None),
        };
        let sps = (blended.unit == ScheduleUnit::Steps).then_some(blended.samples_per_step);
        let plan = Plan {
            origin: 0,
            base: vec![0; sources.len()],
            phases: blended.phases(sps)?,
            samples_per_step: sps,
        };
        *lock(&blended.plan) = plan;
        // a blend now, so that a bad definition fails here
        blended.blend_for(&Shuffle::Global, 0)?;
        Ok(Mixture {
            shaped: sources
                .iter()
                .any(|s| s.samples.batch_outputs(&[]).is_some()),
            whole_batch_tasks: layouts.iter().all(|l| l.whole_batch_tasks),
            sources,
            bytes,
            first_byte_source,
            offsets,
            columns,
            stage_names,
            source_column: options.source_column,
            fingerprint: format!("mixture:{fp:08x}"),
            blended: Arc::new(blended),
        })
    }

    /// The sources, in order (its byte sources are [`Samples::sources`]).
    pub fn mixture_sources(&self) -> &[MixtureSource] {
        &self.sources
    }

    /// The source of mixture id `id` and the id within it.
    pub fn source_of(&self, id: u64) -> (usize, u64) {
        source_of(&self.offsets, id)
    }

    /// The blend: the mixture's order and groups.
    pub fn blended(&self) -> &Arc<Blended> {
        &self.blended
    }

    /// The mixture as a loader loads it: its samples, in the order of its blend, its sources
    /// as groups.
    pub fn loadable(self: Arc<Self>) -> Loadable {
        let blended = Arc::clone(&self.blended);
        Loadable {
            samples: self,
            order: Arc::clone(&blended) as Arc<dyn Order>,
            groups: Some(blended),
        }
    }
}

impl From<Arc<Mixture>> for Loadable {
    fn from(mix: Arc<Mixture>) -> Loadable {
        mix.loadable()
    }
}

fn source_of(offsets: &[u64], id: u64) -> (usize, u64) {
    let s = offsets.partition_point(|&o| o <= id).saturating_sub(1);
    (s, id - offsets[s])
}

impl Blended {
    /// The schedule in stream samples (steps converted with `samples_per_step`).
    fn phases(&self, samples_per_step: Option<u64>) -> Result<Vec<Phase>> {
        self.schedule
            .iter()
            .map(|(at, w)| {
                let start = match samples_per_step {
                    Some(sps) => at.checked_mul(sps).ok_or_else(|| {
                        EngineError::Config(format!(
                            "step {at} of the schedule is past 2^64 samples"
                        ))
                    })?,
                    None => *at,
                };
                Ok(Phase {
                    start,
                    weights: w.clone(),
                })
            })
            .collect()
    }

    /// The blend of the current plan for `shuffle` and `seed` (made once, then shared).
    fn blend_for(&self, shuffle: &Shuffle, seed: u64) -> Result<Arc<Blend>> {
        let mut b = lock(&self.blend);
        if let Some((sh, sd, blend)) = &*b
            && sh == shuffle
            && *sd == seed
        {
            return Ok(Arc::clone(blend));
        }
        let plan = lock(&self.plan).clone();
        let blend = Arc::new(Blend::new(self.def(&plan, shuffle, seed))?);
        *b = Some((*shuffle, seed, Arc::clone(&blend)));
        Ok(blend)
    }

    fn def(&self, plan: &Plan, shuffle: &Shuffle, seed: u64) -> BlendDef {
        BlendDef {
            sources: self
                .names
                .iter()
                .zip(&self.lens)
                .zip(&self.blocks)
                .map(|((name, &len), blocks)| BlendSource {
                    name: name.clone(),
                    len,
                    blocks: blocks.clone(),
                })
                .collect(),
            phases: plan.phases.clone(),
            origin: plan.origin,
            base: plan.base.clone(),
            epoch_len: self.epoch_len,
            shuffle: *shuffle,
            seed,
        }
    }

    /// The blend last used (any shuffle: counts do not depend on it).
    fn current_blend(&self) -> Option<Arc<Blend>> {
        if let Some((_, _, b)) = &*lock(&self.blend) {
            return Some(Arc::clone(b));
        }
        self.blend_for(&Shuffle::Global, 0).ok()
    }

    fn stream_index(&self, epoch: u64, position: u64) -> u64 {
        epoch
            .saturating_mul(self.epoch_len)
            .saturating_add(position.min(self.epoch_len))
    }

    /// The weights of the plan's first phase (each source's share, in units of [`UNIT`]).
    fn first_weights(&self) -> Vec<u64> {
        lock(&self.plan).phases[0].weights.clone()
    }

    /// Install `plan` (a resumed or new blend).
    fn set_plan(&self, plan: Plan) {
        *lock(&self.plan) = plan;
        *lock(&self.blend) = None;
    }

    fn refuse(&self, what: String) -> EngineError {
        EngineError::IncompatibleResume {
            field: "mixture",
            expected: "the same blend up to the state's position".into(),
            found: format!(
                "{what}; to start a new blend from the state's position instead (each source \
                 continuing where it was), make the mixture with on_change=\"reblend\""
            ),
        }
    }

    /// Continue from the blend state `st` at (`epoch`, `position`).
    fn resume_blend(&self, st: &BlendState, epoch: u64, position: u64) -> Result<bool> {
        if st.epoch_len != self.epoch_len {
            return Err(EngineError::IncompatibleResume {
                field: "mixture",
                expected: format!("epochs of {} samples", self.epoch_len),
                found: format!(
                    "epochs of {} samples: epoch_samples must stay the same across a resume \
                     (by default it is the sources' lengths summed: give it explicitly to add or \
                     remove a source)",
                    st.epoch_len
                ),
            });
        }
        // a stream position the blend could not walk to in any run's lifetime (a damaged or
        // forged state), or counts that would overflow: refused, never walked
        let g = u128::from(epoch) * u128::from(self.epoch_len) + u128::from(position);
        let far = |x: u128| x > u128::from(MAX_STREAM);
        if far(g)
            || far(u128::from(st.origin))
            || st.base.iter().any(|&b| far(u128::from(b)))
            || st.phases.iter().any(|p| far(u128::from(p.start)))
        {
            return Err(EngineError::InvalidState {
                field: Some("mixture".into()),
                detail: format!(
                    "its position or counts are past {MAX_STREAM} samples of the blend, more \
                     than any run reads"
                ),
            });
        }
        let n = st.sources.len();
        if st.fingerprints.len() != n || st.base.len() != n || st.phases.is_empty() {
            return Err(EngineError::InvalidState {
                field: Some("mixture".into()),
                detail: "its sources, fingerprints, base counts and phases do not agree".into(),
            });
        }
        if st.phases.iter().any(|p| p.weights.len() != n) {
            return Err(EngineError::InvalidState {
                field: Some("mixture".into()),
                detail: "a phase's weights do not match its sources".into(),
            });
        }
        let g = self.stream_index(epoch, position);
        let names: Vec<&str> = self.names.iter().map(String::as_str).collect();
        let same_sources = st
            .sources
            .iter()
            .map(String::as_str)
            .eq(names.iter().copied())
            && st
                .fingerprints
                .iter()
                .zip(&self.fingerprints)
                .all(|(f, s)| f == s);
        // the schedule as this mixture gives it, converted as the state's blend was
        let sps = match self.unit {
            ScheduleUnit::Steps => Some(st.samples_per_step.unwrap_or(self.samples_per_step)),
            ScheduleUnit::Samples => None,
        };
        let ours = self.phases(sps)?;
        // what this mixture says happened up to g: the phase in effect at the state's origin
        // (from the origin), then the later ones up to g
        let at_origin = ours.iter().rposition(|p| p.start <= st.origin).unwrap_or(0);
        let history: Vec<&Vec<u64>> = std::iter::once(&ours[at_origin].weights)
            .chain(
                ours.iter()
                    .filter(|p| p.start > st.origin && p.start <= g)
                    .map(|p| &p.weights),
            )
            .collect();
        let theirs: Vec<&Vec<u64>> = st.phases.iter().map(|p| &p.weights).collect();
        let same_history = same_sources && history == theirs;
        if same_history {
            let mut phases = st.phases.clone();
            phases.extend(ours.into_iter().filter(|p| p.start > g));
            self.set_plan(Plan {
                origin: st.origin,
                base: st.base.clone(),
                phases,
                samples_per_step: sps,
            });
            return Ok(true);
        }
        if self.on_change == OnChange::Refuse {
            return Err(if !same_sources {
                self.refuse(format!(
                    "the state's mixture has the sources [{}], this one [{}] (or a source's \
                     data changed)",
                    st.sources.join(", "),
                    names.join(", ")
                ))
            } else {
                self.refuse(format!(
                    "the weights before the state's position (sample {g} of the blend) differ: \
                     the state's blend changed weights {} times up to there, this mixture {} \
                     times, or to other values",
                    theirs.len() - 1,
                    history.len() - 1
                ))
            });
        }
        // a new blend from g: the old one's counts there, by source name
        let old = Blend::new(BlendDef {
            sources: st
                .sources
                .iter()
                .map(|name| BlendSource {
                    name: name.clone(),
                    len: 1,
                    blocks: None,
                })
                .collect(),
            phases: st.phases.clone(),
            origin: st.origin,
            base: st.base.clone(),
            epoch_len: st.epoch_len,
            shuffle: Shuffle::Sequential,
            seed: 0,
        })
        .map_err(|e| EngineError::InvalidState {
            field: Some("mixture".into()),
            detail: e.to_string(),
        })?;
        let counts = old.counts_at(g);
        let base: Vec<u64> = self
            .names
            .iter()
            .map(|name| {
                st.sources
                    .iter()
                    .position(|n| n == name)
                    .map_or(0, |i| counts[i])
            })
            .collect();
        let now = ours.iter().rposition(|p| p.start <= g).unwrap_or(0);
        let mut phases = vec![Phase {
            start: g,
            weights: ours[now].weights.clone(),
        }];
        phases.extend(ours.into_iter().filter(|p| p.start > g));
        self.set_plan(Plan {
            origin: g,
            base,
            phases,
            samples_per_step: sps,
        });
        Ok(true)
    }
}

impl Order for Blended {
    fn epoch(&self, shuffle: &Shuffle, seed: u64, epoch: u64) -> Result<EpochOrder> {
        let map: Arc<dyn PositionMap> = self.blend_for(shuffle, seed)?;
        Ok(EpochOrder::custom(
            self.epoch_len,
            shuffle,
            seed,
            epoch,
            map,
        ))
    }

    fn state(&self, epoch: u64, position: u64) -> Option<OrderState> {
        let g = self.stream_index(epoch, position);
        let plan = lock(&self.plan).clone();
        Some(OrderState::of(&BlendState {
            sources: self.names.clone(),
            fingerprints: self.fingerprints.clone(),
            epoch_len: self.epoch_len,
            origin: plan.origin,
            base: plan.base,
            phases: plan.phases.into_iter().filter(|p| p.start <= g).collect(),
            samples_per_step: plan.samples_per_step,
        }))
    }

    fn resume(&self, state: Option<&OrderState>, epoch: u64, position: u64) -> Result<bool> {
        let Some(st) = state else {
            return Err(EngineError::IncompatibleResume {
                field: "mixture",
                expected: "the state of a mixture".into(),
                found: "the state of a loader of one dataset".into(),
            });
        };
        let st: BlendState = st.read("mixture")?;
        self.resume_blend(&st, epoch, position)
    }
}

impl Groups for Blended {
    fn noun(&self) -> &'static str {
        "source"
    }

    fn names(&self) -> &[String] {
        &self.names
    }

    fn group_of(&self, id: u64) -> usize {
        source_of(&self.offsets, id).0
    }

    fn count(&self, ids: &[u64], per: &mut [u64]) {
        // the sources' id ranges in one loop (no call per id)
        let last = per.len().saturating_sub(1);
        for &id in ids {
            let s = self.offsets.partition_point(|&o| o <= id).saturating_sub(1);
            if let Some(n) = per.get_mut(s.min(last)) {
                *n += 1;
            }
        }
    }

    fn max_skip_fraction(&self, group: usize) -> Option<f64> {
        self.max_skip_fraction.get(group).copied().flatten()
    }

    fn shares(&self, epoch: u64, position: u64) -> Vec<Share> {
        let g = self.stream_index(epoch, position);
        let blend = self.current_blend();
        let counts = blend.as_ref().map(|b| b.counts_at(g));
        let weights = blend.as_ref().map(|b| b.weights_at(g).to_vec());
        (0..self.names.len())
            .map(|i| Share {
                weight: weights.as_ref().map_or(0.0, |w| w[i] as f64 / UNIT as f64),
                passes: counts
                    .as_ref()
                    .map_or(0.0, |k| k[i] as f64 / self.lens[i].max(1) as f64),
            })
            .collect()
    }
}

impl Samples for Mixture {
    fn len(&self) -> u64 {
        self.blended.epoch_len
    }

    fn layout(&self) -> Layout {
        let w = self.blended.first_weights();
        let sum: u128 = self
            .sources
            .iter()
            .zip(&w)
            .map(|(s, &w)| u128::from(s.samples.layout().mean_bytes) * u128::from(w))
            .sum();
        Layout {
            mean_bytes: (sum / u128::from(UNIT)) as u64,
            blocks: None,
            whole_batch_tasks: self.whole_batch_tasks,
            stage_names: self.stage_names.clone(),
            fingerprint: self.fingerprint.clone(),
        }
    }

    fn columns(&self) -> &[(String, Output)] {
        &self.columns
    }

    fn batch_outputs(&self, ids: &[u64]) -> Option<Vec<Output>> {
        if !self.shaped {
            return None;
        }
        let mut groups: Vec<Vec<u64>> = vec![Vec::new(); self.sources.len()];
        for &id in ids {
            let (s, local) = self.source_of(id);
            groups[s].push(local);
        }
        let mut merged: Option<Vec<Output>> = None;
        for (s, g) in self.sources.iter().zip(&groups) {
            if g.is_empty() {
                continue;
            }
            let Some(outs) = s.samples.batch_outputs(g) else {
                continue;
            };
            merged = Some(match merged {
                None => outs,
                Some(m) => {
                    m.into_iter()
                        .zip(outs)
                        .map(|(a, b)| match (a, b) {
                            (
                                Output::Fixed { dtype, shape: sa },
                                Output::Fixed { shape: sb, .. },
                            ) if sa.len() == sb.len() => Output::Fixed {
                                dtype,
                                shape: sa.iter().zip(&sb).map(|(x, y)| *x.max(y)).collect(),
                            },
                            (a, _) => a,
                        })
                        .collect()
                }
            });
        }
        let mut merged = merged?;
        if self.source_column {
            merged.push(self.columns.last().map(|c| c.1.clone())?);
        }
        Some(merged)
    }

    fn sources(&self) -> &[ByteSource] {
        &self.bytes
    }

    fn plan(&self, ids: &[u64], io: &mut TaskIo) {
        let mut held = Held::new(io);
        held.sc().group(self, ids);
        let base = held.io.view().source;
        for (s, src) in self.sources.iter().enumerate() {
            let first = held.io.plan.samples();
            held.sc().first[s] = first;
            if held.sc().groups[s].is_empty() {
                continue;
            }
            let view = TaskView {
                first,
                source: base + self.first_byte_source[s],
            };
            held.enter(s, view);
            let group = std::mem::take(&mut held.sc().groups[s]);
            src.samples.plan(&group, held.io);
            held.sc().groups[s] = group;
            held.leave();
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
        let mut held = Held::new(io);
        let Some(&(s, kk)) = held.sc().slot.get(k) else {
            return Err(EngineError::Worker(format!(
                "sample {k} of a mixture's task was not planned"
            )));
        };
        let (s, kk) = (s as usize, kk as usize);
        // the sample's id in its source, as planned (the group keeps it)
        let Some(&local) = held.sc().groups[s].get(kk) else {
            return Err(EngineError::Worker(format!(
                "sample {id} of a mixture's task was not planned"
            )));
        };
        let view = TaskView {
            first: held.sc().first[s],
            source: held.io.view().source + self.first_byte_source[s],
        };
        held.enter(s, view);
        let r = self.sources[s].samples.fill(local, kk, held.io, cx, out);
        held.leave();
        drop(held);
        if self.source_column {
            let col = self.columns.len() - 1;
            out.fixed(col).copy_from_slice(&(s as i64).to_le_bytes());
        }
        r
    }

    /// Each source's samples of the task filled together: its part entered once per task, not
    /// once per sample.
    fn fill_task(&self, ids: &[u64], io: &mut TaskIo, task: &mut TaskFill<'_, '_, '_>) {
        let mut held = Held::new(io);
        if held.sc().slot.len() != ids.len() {
            // not planned as this task: each sample says so ([`Mixture::fill`])
            drop(held);
            for (k, &id) in ids.iter().enumerate() {
                task.sample(k, |cx, out| self.fill(id, k, io, cx, out));
            }
            return;
        }
        let base = held.io.view().source;
        let column = self.source_column.then(|| self.columns.len() - 1);
        for (s, src) in self.sources.iter().enumerate() {
            let sc = held.sc();
            if sc.groups[s].is_empty() {
                continue;
            }
            let view = TaskView {
                first: sc.first[s],
                source: base + self.first_byte_source[s],
            };
            held.enter(s, view);
            let Held { io, sc, .. } = &mut held;
            let sc = sc.as_ref().expect("held until dropped");
            let tag = (s as i64).to_le_bytes();
            for (kk, (&local, &k)) in sc.groups[s].iter().zip(&sc.at[s]).enumerate() {
                // the source is the sample's group (`Blended::group_of`)
                task.sample_of_group(k as usize, s, |cx, out| {
                    let r = src.samples.fill(local, kk, io, cx, out);
                    if let Some(col) = column {
                        out.fixed(col).copy_from_slice(&tag);
                    }
                    r
                });
            }
            held.leave();
        }
    }

    fn describe(&self, id: u64, read: bool) -> serde_json::Map<String, serde_json::Value> {
        let (s, local) = self.source_of(id);
        let mut m = serde_json::Map::new();
        m.insert("source".into(), serde_json::Value::from(s as u64));
        if let Some(src) = self.sources.get(s) {
            m.insert(
                "source_name".into(),
                serde_json::Value::from(src.name.clone()),
            );
            m.insert("index".into(), serde_json::Value::from(local));
            m.extend(src.samples.describe(local, read));
        }
        m
    }

    fn caches(&self) -> Vec<Arc<dyn Cache>> {
        let all: Vec<Arc<dyn Cache>> = self
            .sources
            .iter()
            .flat_map(|s| s.samples.caches())
            .collect();
        if all.is_empty() {
            return all;
        }
        vec![Arc::new(MixtureCaches(all))]
    }
}
