//! The order of an epoch as a value beside the samples ([`Order`]): the loader's shuffle over
//! `0..len` by default ([`Shuffled`]), a blend for a mixture. An order keeps its own part of a
//! resume state ([`OrderState`], opaque to the engine). [`Groups`] partition the samples (a
//! mixture's sources) for the per-group skip budgets and figures that delivery keeps.
//! [`Loadable`] is what a loader is made of: samples, their order and their groups.

use std::sync::Arc;

use crate::error::{EngineError, Result};
use crate::sampler::{EpochOrder, Shuffle, Slot};
use crate::samples::Samples;

pub use crate::state::OrderState;

/// How the positions of an epoch map to samples, and what a resume state keeps of it.
pub trait Order: Send + Sync + std::fmt::Debug + 'static {
    /// The order of epoch `epoch` under the loader's `shuffle` and `seed`.
    fn epoch(&self, shuffle: &Shuffle, seed: u64, epoch: u64) -> Result<EpochOrder>;

    /// Change which sample each slot of a batch gets (length bucketing); the default keeps the
    /// order's choice.
    fn adapt(&self, order: &EpochOrder, slots: &mut [Slot]) {
        let _ = (order, slots);
    }

    /// What a resume state keeps of the order at (`epoch`, `position`); `None`: nothing (the
    /// seed and shuffle say it all).
    fn state(&self, epoch: u64, position: u64) -> Option<OrderState> {
        let _ = (epoch, position);
        None
    }

    /// Continue from a resume state's part `state` at (`epoch`, `position`) (a blend checks that
    /// it continues the same blend, or starts a new one when told to). `Ok(true)`: the order
    /// checked the state's samples itself, so the state's `dataset` fingerprint is not compared.
    fn resume(&self, state: Option<&OrderState>, epoch: u64, position: u64) -> Result<bool> {
        let _ = (epoch, position);
        if state.is_some() {
            return Err(EngineError::IncompatibleResume {
                field: "mixture",
                expected: "the state of a loader of one dataset".into(),
                found: "the state of a mixture".into(),
            });
        }
        Ok(false)
    }
}

/// Changes which sample each slot of a batch gets (see [`Order::adapt`]).
pub type Adapter = Arc<dyn Fn(&EpochOrder, &mut [Slot]) + Send + Sync>;

/// The loader's shuffle over `0..len` (shard blocks kept together when the samples have them).
#[derive(Clone)]
pub struct Shuffled {
    len: u64,
    blocks: Option<Arc<[u64]>>,
    adapter: Option<Adapter>,
}

impl std::fmt::Debug for Shuffled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shuffled")
            .field("len", &self.len)
            .field("blocks", &self.blocks.as_ref().map(|b| b.len()))
            .field("adapter", &self.adapter.is_some())
            .finish()
    }
}

impl Shuffled {
    /// The shuffle of `samples` (their length and shard blocks).
    pub fn of(samples: &dyn Samples) -> Shuffled {
        Shuffled {
            len: samples.len(),
            blocks: samples.layout().blocks.map(Arc::from),
            adapter: None,
        }
    }

    /// The same order, its batches adapted by `adapter` (length bucketing).
    pub fn with_adapter(mut self, adapter: Adapter) -> Shuffled {
        self.adapter = Some(adapter);
        self
    }
}

impl Order for Shuffled {
    fn epoch(&self, shuffle: &Shuffle, seed: u64, epoch: u64) -> Result<EpochOrder> {
        if self.blocks.is_none() && matches!(shuffle, Shuffle::ShardBlock { .. }) {
            return Err(EngineError::Config(
                "these samples shuffle globally or not at all (no shard-block order)".into(),
            ));
        }
        Ok(EpochOrder::new(
            self.len,
            self.blocks.as_deref(),
            shuffle,
            seed,
            epoch,
        )?)
    }

    fn adapt(&self, order: &EpochOrder, slots: &mut [Slot]) {
        if let Some(a) = &self.adapter {
            a(order, slots);
        }
    }
}

/// One group's share of the samples at a position of the order.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Share {
    /// Its weight in the order there (a fraction of 1).
    pub weight: f64,
    /// Passes over its samples so far (2.5: two whole passes and half of a third).
    pub passes: f64,
}

/// A partition of the samples into named groups (a mixture's sources): delivery counts each
/// group's samples, failures and skips (against a budget of its own), workers its bytes and time.
pub trait Groups: Send + Sync + std::fmt::Debug + 'static {
    /// What a group is called in messages ("source").
    fn noun(&self) -> &'static str {
        "group"
    }

    /// The groups' names, in order.
    fn names(&self) -> &[String];

    /// The group of sample `id`.
    fn group_of(&self, id: u64) -> usize;

    /// Count `ids` into their groups: `per[g] += 1` for each id of group `g` (a group past
    /// `per`'s end counted in its last). By default [`Groups::group_of`] per id; a grouping
    /// that can tell a batch's groups more cheaply (without a call per id) overrides it.
    fn count(&self, ids: &[u64], per: &mut [u64]) {
        let last = per.len().saturating_sub(1);
        for &id in ids {
            if let Some(n) = per.get_mut(self.group_of(id).min(last)) {
                *n += 1;
            }
        }
    }

    /// Under `on_error = skip`, the largest fraction of group `group`'s share of an epoch that
    /// may be skipped; `None`: only the loader's budget.
    fn max_skip_fraction(&self, group: usize) -> Option<f64>;

    /// Each group's share at (`epoch`, `position`).
    fn shares(&self, epoch: u64, position: u64) -> Vec<Share>;
}

/// What a loader loads: the samples, the order of their epochs, and the groups whose accounts
/// delivery keeps (none for one dataset).
#[derive(Clone)]
pub struct Loadable {
    /// What to read and how to fill a slot.
    pub samples: Arc<dyn Samples>,
    /// The order of an epoch (the loader's shuffle by default).
    pub order: Arc<dyn Order>,
    /// The groups, when the samples have some.
    pub groups: Option<Arc<dyn Groups>>,
}

impl std::fmt::Debug for Loadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loadable")
            .field("samples", &self.samples)
            .field("order", &self.order)
            .field("groups", &self.groups)
            .finish()
    }
}

impl Loadable {
    /// `samples` in the loader's shuffle, without groups.
    pub fn shuffled(samples: Arc<dyn Samples>) -> Loadable {
        Loadable {
            order: Arc::new(Shuffled::of(&*samples)),
            samples,
            groups: None,
        }
    }
}

impl From<Arc<dyn Samples>> for Loadable {
    fn from(samples: Arc<dyn Samples>) -> Loadable {
        Loadable::shuffled(samples)
    }
}

impl From<Arc<crate::samples::Records>> for Loadable {
    fn from(samples: Arc<crate::samples::Records>) -> Loadable {
        Loadable::shuffled(samples)
    }
}
