//! [`EngineSpec::build`]: a [`Loader`] from its declarative description, the one way the Python
//! binding and `stokehold bench --config` make one.

use std::sync::Arc;

use stokehold_storage::{Dataset, OpenOptions};

use crate::cache::disk::{self, DiskCache};
use crate::error::{EngineError, Result};
use crate::order::Loadable;
use crate::pipeline::{
    Budget, DecodedCacheConfig, EngineSpec, Loader, SamplesSpec, half_of_memory,
};
use crate::samples::mixture::MixtureOptions;
use crate::samples::{
    ChatMixRows, ChatMixture, ChatPlanner, ChatRows, LeRobotSteps, Mixture, MixtureSource, Records,
    TokenDataset, Tokens,
};
use crate::stages::Transform;
use crate::stages::spec::{TransformSpec, build_columns_of};

/// A loader built from a spec, with what its kind of samples tells about the dataset.
#[derive(Debug)]
pub struct Built {
    /// The loader.
    pub loader: Loader,
    /// For token samples: the token datasets (one, or a mixture's sources; their totals,
    /// documents, dtype).
    pub tokens: Vec<Arc<TokenDataset>>,
    /// For packed conversations: their planner (counts, the row order, the fill).
    pub chats: Option<Arc<ChatPlanner>>,
    /// For a mixture of packed conversations: its plan (the sources' planners, the blend).
    pub chat_mix: Option<Arc<ChatMixture>>,
}

/// Packed conversations are counted lazily (see `ChatPlanner::new`), unless asked to count at
/// open (`STOKEHOLD_CHAT_COUNT_AT_OPEN=1`: the reference the tests compare with).
fn count_lazily() -> bool {
    std::env::var_os("STOKEHOLD_CHAT_COUNT_AT_OPEN").is_none_or(|v| v != "1")
}

impl EngineSpec {
    /// Build the loader this spec describes over `dataset` (opened with `options`, which the
    /// local copy of `cache_dir` is opened with too). `external` resolves stages the engine
    /// does not know by name (the binding's `{"name": "python", "params": {"index": k}}`);
    /// `None` from it is an unknown stage.
    pub fn build(
        &self,
        dataset: Arc<Dataset>,
        options: OpenOptions,
        external: &mut dyn FnMut(&TransformSpec) -> Option<Arc<dyn Transform>>,
    ) -> Result<Built> {
        if self.mixture.is_some() {
            return self.build_mixture(vec![dataset], options, external);
        }
        self.loader.validate()?;
        if let SamplesSpec::Lerobot(_) = &self.samples {
            return self.build_lerobot();
        }
        let whole = Share::default();
        if let SamplesSpec::Chats(chat) = &self.samples {
            if self.cache_dir.is_some() {
                return Err(EngineError::Config(
                    "cache_dir is not available with packed conversations yet".into(),
                ));
            }
            let planner = Arc::new(ChatPlanner::new(
                dataset,
                (**chat).clone(),
                self.loader.shuffle,
                self.loader.seed,
                self.loader.threads,
                match self.loader.on_error {
                    crate::pipeline::ErrorPolicy::Skip { max_fraction, .. } => Some(max_fraction),
                    crate::pipeline::ErrorPolicy::Fail => None,
                },
                count_lazily(),
            )?);
            // the first window planned now (the first batch needs it): `len()` estimates the
            // epoch's rows from it
            planner.plan_of(0)?.ensure(&planner, 0)?;
            planner.count_in_background();
            if chat.max_image_tokens.is_some() && planner.vision().is_none() {
                return Err(crate::samples::chats::no_images());
            }
            let rows = Arc::new(ChatRows::new(Arc::clone(&planner)));
            return Ok(Built {
                loader: Loader::from_samples(rows, self.loader.clone())?,
                tokens: Vec::new(),
                chats: Some(planner),
                chat_mix: None,
            });
        }
        let (samples, tokens) = self.samples_over(dataset, None, options, external, whole)?;
        Ok(Built {
            loader: Loader::from_samples(samples, self.loader.clone())?,
            tokens: tokens.into_iter().collect(),
            chats: None,
            chat_mix: None,
        })
    }

    /// Build the loader of a LeRobot dataset read in place (`samples: {"kind": "lerobot",
    /// ...}`): no stokehold dataset, the steps of the LeRobot folder the spec names.
    pub fn build_lerobot(&self) -> Result<Built> {
        let SamplesSpec::Lerobot(options) = &self.samples else {
            return Err(EngineError::Config(
                "a loader without a dataset loads a LeRobot folder (samples kind \"lerobot\")"
                    .into(),
            ));
        };
        if self.mixture.is_some() || self.cache_dir.is_some() {
            return Err(EngineError::Config(
                "a LeRobot dataset is read in place alone: no Mixture, no cache_dir".into(),
            ));
        }
        self.loader.validate()?;
        let steps: Arc<dyn crate::samples::Samples> = Arc::new(LeRobotSteps::open(options)?);
        Ok(Built {
            loader: Loader::from_samples(steps, self.loader.clone())?,
            tokens: Vec::new(),
            chats: None,
            chat_mix: None,
        })
    }

    /// Build the loader of this spec's mixture over `datasets` (one per source, in order).
    pub fn build_mixture(
        &self,
        datasets: Vec<Arc<Dataset>>,
        options: OpenOptions,
        external: &mut dyn FnMut(&TransformSpec) -> Option<Arc<dyn Transform>>,
    ) -> Result<Built> {
        self.loader.validate()?;
        let Some(mix) = &self.mixture else {
            return Err(EngineError::Config(
                "this loader configuration has no mixture".into(),
            ));
        };
        if datasets.len() != mix.sources.len() {
            return Err(EngineError::Config(format!(
                "the mixture has {} sources, but {} datasets were given",
                mix.sources.len(),
                datasets.len()
            )));
        }
        if let SamplesSpec::Chats(chat) = &self.samples {
            return self.build_chat_mixture(datasets, chat, mix);
        }
        if let Some(s) = mix.sources.iter().find(|s| s.text.is_some()) {
            return Err(EngineError::Config(format!(
                "source '{}' gives a text template, which only packed conversations take",
                s.name
            )));
        }
        let mut sources = Vec::with_capacity(datasets.len());
        let mut tokens: Vec<Arc<TokenDataset>> = Vec::new();
        // the caches' budgets are the loader's, shared by the sources in proportion to their
        // bytes (each source's caches are its own); one directory limit for all of them
        let total: u64 = datasets.iter().map(|d| d.bytes()).sum::<u64>().max(1);
        for (ds, src) in datasets.into_iter().zip(&mix.sources) {
            let share = Share {
                fraction: ds.bytes() as f64 / total as f64,
                dir_limit: Some(self.cache_dir_limit.map_or(total, |b| b.0)),
            };
            let (samples, t) = self
                .samples_over(
                    ds,
                    src.transforms.as_ref(),
                    options.clone(),
                    external,
                    share,
                )
                .map_err(|e| e.in_source(&src.name))?;
            if let Some(t) = t {
                if let Some(first) = tokens.first() {
                    check_tokens_agree(&mix.sources[0].name, first, &src.name, &t)?;
                }
                tokens.push(t);
            }
            sources.push(MixtureSource {
                name: src.name.clone(),
                samples: samples.samples,
                max_skip_fraction: src.max_skip_fraction,
            });
        }
        let steps = u64::from(self.loader.batch_size) * u64::from(self.loader.world_size);
        let schedule = resolved_schedule(mix)?;
        let mixture = Mixture::new(
            sources,
            MixtureOptions {
                schedule,
                unit: mix.unit,
                samples_per_step: steps,
                epoch_samples: mix.epoch_samples,
                source_column: mix.source_column,
                on_change: mix.on_change,
            },
        )?;
        Ok(Built {
            loader: Loader::from_samples(Arc::new(mixture), self.loader.clone())?,
            tokens,
            chats: None,
            chat_mix: None,
        })
    }

    /// A mixture of packed conversations (or plain-text documents): each source counted by a
    /// planner of its own (its own `text` when it gives one), blended, then packed.
    fn build_chat_mixture(
        &self,
        datasets: Vec<Arc<Dataset>>,
        chat: &crate::samples::ChatRowOptions,
        mix: &crate::pipeline::MixtureSpec,
    ) -> Result<Built> {
        if self.cache_dir.is_some() {
            return Err(EngineError::Config(
                "cache_dir is not available with packed conversations yet".into(),
            ));
        }
        if mix.schedule.len() > 1 && mix.unit == crate::samples::mixture::ScheduleUnit::Steps {
            return Err(EngineError::Config(
                "a schedule in steps is not available for a mixture of packed conversations \
                 yet (a step is rows, the blend counts conversations): give it in conversations \
                 of the stream, schedule_unit=\"samples\""
                    .into(),
            ));
        }
        if mix.on_change != crate::samples::mixture::OnChange::Refuse {
            return Err(EngineError::Config(
                "on_change=\"reblend\" is not available for a mixture of packed conversations \
                 yet"
                .into(),
            ));
        }
        let skip_bad = match self.loader.on_error {
            crate::pipeline::ErrorPolicy::Skip { max_fraction, .. } => Some(max_fraction),
            crate::pipeline::ErrorPolicy::Fail => None,
        };
        let mut sources = Vec::with_capacity(datasets.len());
        for (ds, src) in datasets.into_iter().zip(&mix.sources) {
            if src.transforms.is_some() {
                return Err(EngineError::Config(format!(
                    "source '{}': packed conversations take no transforms",
                    src.name
                )));
            }
            let mut options = chat.clone();
            if let Some(text) = &src.text {
                options.chat = text.clone();
            }
            let planner = ChatPlanner::new(
                ds,
                options,
                self.loader.shuffle,
                self.loader.seed,
                self.loader.threads,
                src.max_skip_fraction
                    .or(skip_bad)
                    .filter(|_| skip_bad.is_some()),
                // counted lazily, window by window of the blended stream, as one dataset's
                count_lazily(),
            )
            .map_err(|e| e.in_source(&src.name))?;
            sources.push((src.name.clone(), Arc::new(planner)));
        }
        let schedule = resolved_schedule(mix)?;
        let mixture = Arc::new(ChatMixture::new(
            sources,
            &schedule,
            mix.epoch_samples,
            self.loader.shuffle,
            self.loader.seed,
        )?);
        // the first window planned now (the first batch needs it), the rest counted behind
        mixture.plan_first_window(0)?;
        let rows = Arc::new(ChatMixRows::new(Arc::clone(&mixture)));
        Ok(Built {
            loader: Loader::from_samples(rows, self.loader.clone())?,
            tokens: Vec::new(),
            chats: None,
            chat_mix: Some(mixture),
        })
    }

    /// The samples of this spec over `dataset` (records with `transforms` instead of the
    /// spec's when given), and the token dataset for token samples.
    fn samples_over(
        &self,
        dataset: Arc<Dataset>,
        transforms: Option<&std::collections::BTreeMap<String, Vec<TransformSpec>>>,
        options: OpenOptions,
        external: &mut dyn FnMut(&TransformSpec) -> Option<Arc<dyn Transform>>,
        share: Share,
    ) -> Result<SamplesOver> {
        let config = &self.loader;
        let whole = share.fraction >= 1.0;
        let part = |bytes: u64| ((bytes as f64 * share.fraction) as u64).max(u64::from(bytes > 0));
        let cache_bytes = match whole {
            true => config.cache_budget_bytes(),
            false => part(config.cache_budget_bytes()),
        };
        let decoded = config.decoded_cache.as_ref().map(|d| match whole {
            true => d.clone(),
            false => DecodedCacheConfig {
                budget: Budget::bytes(part(d.budget.resolve(half_of_memory))),
                ..d.clone()
            },
        });
        let mut ds = dataset;
        let mut disk = None;
        if let Some(dir) = &self.cache_dir {
            if let Some(format) = ds
                .manifest()
                .source
                .get("in_place")
                .and_then(|f| f.as_str())
            {
                return Err(EngineError::Config(format!(
                    "cache_dir copies a packed dataset's shards to local disk; {} holds {format} \
                     files read in place: pack them (`stokehold pack`) to cache them, or leave \
                     cache_dir out (the in-memory `cache` and `decoded_cache` options work in place)",
                    ds.dir().display()
                )));
            }
            let limit = share
                .dir_limit
                .unwrap_or_else(|| self.cache_dir_limit.map_or_else(|| ds.bytes(), |b| b.0));
            let cache = DiskCache::open(dir.clone(), limit)?;
            let (opened, progress) = disk::open_dataset(ds.dir(), &cache, options)?;
            ds = Arc::new(opened);
            disk = Some((cache, progress));
        }
        Ok(match &self.samples {
            SamplesSpec::Records {
                transforms: default,
                fields,
            } => {
                let transforms = transforms.unwrap_or(default);
                let columns =
                    build_columns_of(ds.schema(), transforms, fields.as_deref(), external)?;
                let mut records = Records::new(ds, columns, cache_bytes, decoded.as_ref())?;
                if let Some((cache, progress)) = disk {
                    records = records.with_disk_cache(cache, progress);
                }
                (Loadable::from(Arc::new(records)), None)
            }
            SamplesSpec::Lerobot(_) => {
                return Err(EngineError::Config(
                    "a LeRobot dataset is read in place alone, not in a Mixture".into(),
                ));
            }
            SamplesSpec::Chats(_) => {
                return Err(EngineError::Config(
                    "packed conversations are not available in a Mixture yet: load one \
                     conversation dataset"
                        .into(),
                ));
            }
            SamplesSpec::Tokens(options) => {
                if transforms.is_some() {
                    return Err(EngineError::Config(
                        "token samples take no transforms".into(),
                    ));
                }
                let data = Arc::new(TokenDataset::open(ds)?);
                data.use_cache(cache_bytes);
                let t = Arc::clone(&data);
                (
                    Loadable::from(Arc::new(Tokens::new(data, *options)?)),
                    Some(t),
                )
            }
        })
    }
}

/// What part of the loader's caches one dataset gets: all of them alone, a share in a mixture.
#[derive(Debug, Clone, Copy)]
struct Share {
    /// Of the RAM and decoded caches' budgets.
    fraction: f64,
    /// The local copy's directory limit (a mixture's: one for all its sources).
    dir_limit: Option<u64>,
}

impl Default for Share {
    fn default() -> Share {
        Share {
            fraction: 1.0,
            dir_limit: None,
        }
    }
}

/// A spec's samples over one dataset, and its token dataset for token samples.
type SamplesOver = (Loadable, Option<Arc<TokenDataset>>);

/// Two token sources of a mixture must store the same kind of ids: the same width and, where
/// both manifests say, the same vocabulary size (their tokenizers may differ only then).
fn check_tokens_agree(
    first_name: &str,
    first: &TokenDataset,
    name: &str,
    other: &TokenDataset,
) -> Result<()> {
    if first.dtype() != other.dtype() {
        return Err(EngineError::Config(format!(
            "source '{name}' stores token ids as {:?}, source '{first_name}' as {:?}: the token \
             sources of a mixture must agree on the token dtype",
            other.dtype(),
            first.dtype()
        )));
    }
    let (a, b) = (first.meta().vocab_size, other.meta().vocab_size);
    if let (Some(a), Some(b)) = (a, b)
        && a != b
    {
        return Err(EngineError::Config(format!(
            "source '{name}' has a vocabulary of {b} tokens, source '{first_name}' of {a}: the \
             token sources of a mixture must agree on the vocabulary (a different tokenizer is \
             only allowed with the same vocabulary size and dtype)"
        )));
    }
    Ok(())
}

/// The mixture's weight schedule with each entry's weights resolved against its sources' names.
fn resolved_schedule(mix: &crate::MixtureSpec) -> Result<Vec<(u64, Vec<f64>)>> {
    let names: Vec<&str> = mix.sources.iter().map(|s| s.name.as_str()).collect();
    mix.schedule
        .iter()
        .map(|e| {
            let what = match e.at {
                0 => "weights".to_string(),
                at => format!("the schedule's weights at {at}"),
            };
            Ok((e.at, e.weights.resolve(&names, &what)?))
        })
        .collect()
}
