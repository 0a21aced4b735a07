//! [`EngineSpec::build`]: a [`Loader`] from its declarative description, the one way the Python
//! binding and `stokehold bench --config` make one.

use std::sync::Arc;

use stokehold_format::{Dataset, OpenOptions};

use crate::cache::disk::{self, DiskCache};
use crate::error::{EngineError, Result};
use crate::pipeline::{EngineSpec, Loader, SamplesSpec};
use crate::samples::{Records, Samples, TokenDataset, Tokens};
use crate::stages::Transform;
use crate::stages::spec::{TransformSpec, build_columns};

/// A loader built from a spec, with what its kind of samples tells about the dataset.
#[derive(Debug)]
pub struct Built {
    /// The loader.
    pub loader: Loader,
    /// For token samples: the token dataset (its totals, documents, dtype).
    pub tokens: Option<Arc<TokenDataset>>,
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
        self.loader.validate()?;
        let config = self.loader.clone();
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
                     cache_dir out (the in-memory cache_budget and decoded_cache work in place)",
                    ds.dir().display()
                )));
            }
            let limit = self.cache_dir_limit.map_or_else(|| ds.bytes(), |b| b.0);
            let cache = DiskCache::open(dir.clone(), limit)?;
            let (opened, progress) = disk::open_dataset(ds.dir(), &cache, options)?;
            ds = Arc::new(opened);
            disk = Some((cache, progress));
        }
        let mut tokens = None;
        let samples: Arc<dyn Samples> = match &self.samples {
            SamplesSpec::Records { transforms } => {
                let columns = build_columns(ds.schema(), transforms, true, external)?;
                let mut records = Records::new(
                    ds,
                    columns,
                    config.cache_budget_bytes(),
                    config.decoded_cache.as_ref(),
                )?;
                if let Some((cache, progress)) = disk {
                    records = records.with_disk_cache(cache, progress);
                }
                Arc::new(records)
            }
            SamplesSpec::Tokens(options) => {
                let data = Arc::new(TokenDataset::open(ds)?);
                data.use_cache(config.cache_budget_bytes());
                tokens = Some(Arc::clone(&data));
                Arc::new(Tokens::new(data, *options)?)
            }
        };
        Ok(Built {
            loader: Loader::from_samples(samples, config)?,
            tokens,
        })
    }
}
