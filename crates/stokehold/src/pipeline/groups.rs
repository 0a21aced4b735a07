//! The accounts the engine keeps of each group of the samples ([`Groups`]: a mixture's sources),
//! whatever the grouping: delivery counts each group's samples and failures and holds its skips to
//! the group's own budget; workers add the bytes and the time its samples took.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::order::Groups;
use crate::stats::GroupStats;
use crate::sync::lock;

#[derive(Debug, Default)]
struct Counters {
    samples: AtomicU64,
    bytes: AtomicU64,
    failed: AtomicU64,
    busy_ns: AtomicU64,
}

/// Each group's counters, and its skips in the epoch being delivered.
#[derive(Debug)]
pub(crate) struct GroupAccounts {
    groups: Arc<dyn Groups>,
    counters: Vec<Counters>,
    /// Whether any group has a skip budget of its own.
    budgets: bool,
    /// Skips per group in the epoch being delivered: (epoch, counts).
    skips: Mutex<(u64, Vec<u64>)>,
}

impl GroupAccounts {
    pub(crate) fn new(groups: Arc<dyn Groups>) -> GroupAccounts {
        let n = groups.names().len();
        GroupAccounts {
            counters: (0..n).map(|_| Counters::default()).collect(),
            budgets: (0..n).any(|g| groups.max_skip_fraction(g).is_some()),
            skips: Mutex::new((u64::MAX, Vec::new())),
            groups,
        }
    }

    /// Count `ids` into their groups' `field`.
    fn count(&self, ids: impl Iterator<Item = u64>, field: fn(&Counters) -> &AtomicU64) {
        let mut per = [0u64; 8];
        if self.counters.len() <= per.len() {
            for id in ids {
                per[self.group_of(id)] += 1;
            }
            for (c, n) in self.counters.iter().zip(per) {
                if n > 0 {
                    field(c).fetch_add(n, Ordering::Relaxed);
                }
            }
        } else {
            for id in ids {
                field(&self.counters[self.group_of(id)]).fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// How many groups there are.
    pub(crate) fn len(&self) -> usize {
        self.counters.len()
    }

    /// The group of sample `id`.
    pub(crate) fn group_of(&self, id: u64) -> usize {
        self.groups
            .group_of(id)
            .min(self.counters.len().saturating_sub(1))
    }

    /// A batch of `ids` was delivered (counted by the grouping in one call: [`Groups::count`]).
    pub(crate) fn delivered(&self, ids: &[u64]) {
        let mut per = [0u64; 8];
        if self.counters.len() > per.len() {
            self.count(ids.iter().copied(), |c| &c.samples);
            return;
        }
        self.groups.count(ids, &mut per[..self.counters.len()]);
        for (c, n) in self.counters.iter().zip(per) {
            if n > 0 {
                c.samples.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// Samples `ids` of a batch delivered failed.
    pub(crate) fn failed(&self, ids: impl Iterator<Item = u64>) {
        self.count(ids, |c| &c.failed);
    }

    /// Samples `ids` of epoch `epoch` were skipped (in the order of delivery; `epoch_samples`:
    /// this rank's samples in the epoch): `Err` with what was exceeded when a group's skips pass
    /// its budget (its fraction of its share of the epoch).
    pub(crate) fn check_skips(
        &self,
        epoch: u64,
        ids: &[u64],
        epoch_samples: u64,
    ) -> std::result::Result<(), OverBudget> {
        if !self.budgets {
            return Ok(());
        }
        let mut skips = lock(&self.skips);
        if skips.0 != epoch {
            *skips = (epoch, vec![0; self.counters.len()]);
        }
        let shares = self.groups.shares(epoch, 0);
        for &id in ids {
            let g = self.group_of(id);
            skips.1[g] += 1;
            let Some(f) = self.groups.max_skip_fraction(g) else {
                continue;
            };
            let share = shares.get(g).map_or(1.0, |s| s.weight);
            let budget = f * share * epoch_samples as f64;
            if skips.1[g] as f64 > budget {
                return Err(OverBudget {
                    skipped: skips.1[g],
                    noun: self.groups.noun(),
                    name: self.groups.names()[g].clone(),
                    fraction: f,
                    budget: share * epoch_samples as f64,
                    epoch_samples,
                });
            }
        }
        Ok(())
    }

    /// Each group's figures at the loader's position (`epoch`, `position`).
    pub(crate) fn stats(&self, epoch: u64, position: u64) -> Vec<GroupStats> {
        let shares = self.groups.shares(epoch, position);
        self.groups
            .names()
            .iter()
            .zip(&self.counters)
            .enumerate()
            .map(|(i, (name, c))| {
                let share = shares.get(i).copied().unwrap_or_default();
                GroupStats {
                    name: name.clone(),
                    weight: share.weight,
                    samples: c.samples.load(Ordering::Relaxed),
                    bytes: c.bytes.load(Ordering::Relaxed),
                    failed: c.failed.load(Ordering::Relaxed),
                    busy: Duration::from_nanos(c.busy_ns.load(Ordering::Relaxed)),
                    passes: share.passes,
                }
            })
            .collect()
    }

    /// Add a worker's `tally` into the groups' figures (and clear it).
    pub(crate) fn add(&self, tally: &mut [(u64, u64)]) {
        for (p, c) in tally.iter_mut().zip(&self.counters) {
            if p.0 > 0 || p.1 > 0 {
                c.bytes.fetch_add(p.0, Ordering::Relaxed);
                c.busy_ns.fetch_add(p.1, Ordering::Relaxed);
                *p = (0, 0);
            }
        }
    }
}

/// A group's skips passed its budget this epoch (what [`GroupAccounts::check_skips`] refuses).
#[derive(Debug, thiserror::Error)]
#[error(
    "{skipped} samples of {noun} '{name}' skipped this epoch, more than its budget \
     ({:.1}% of its share, about {:.0} of this rank's {epoch_samples} samples)",
    .fraction * 100.0,
    .budget
)]
pub(crate) struct OverBudget {
    skipped: u64,
    noun: &'static str,
    name: String,
    fraction: f64,
    budget: f64,
    epoch_samples: u64,
}
