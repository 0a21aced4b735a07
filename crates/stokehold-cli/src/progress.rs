//! Progress bars on a terminal (items/s, MB/s, ETA); nothing when stderr is not a terminal.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use stokehold_ingest::Progress;

use crate::units;

/// An indicatif bar that implements the packer's [`Progress`].
pub struct Bar {
    bar: Mutex<Option<ProgressBar>>,
    bytes: AtomicU64,
    items: AtomicU64,
    started: Mutex<Instant>,
    /// The phase counts tokens in `bytes` ("tokenizing"): show tokens/s.
    tokens: std::sync::atomic::AtomicBool,
}

impl Bar {
    pub fn new() -> Bar {
        Bar {
            bar: Mutex::new(None),
            bytes: AtomicU64::new(0),
            items: AtomicU64::new(0),
            started: Mutex::new(Instant::now()),
            tokens: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&ProgressBar) -> R) -> Option<R> {
        self.bar.lock().ok()?.as_ref().map(f)
    }
}

impl Progress for Bar {
    fn start(&self, phase: &str, items: Option<u64>, _bytes: Option<u64>) {
        let bar = match items {
            Some(n) => ProgressBar::new(n),
            None => ProgressBar::new_spinner(),
        };
        let template = if items.is_some() {
            "{prefix:>9} {bar:30} {percent:>3}%  {pos}/{len}  {per_sec}  {msg}  ETA {eta}"
        } else {
            "{prefix:>9} {spinner} {pos}  {msg}"
        };
        bar.set_style(
            ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_prefix(phase.to_string());
        self.tokens.store(phase == "tokenizing", Ordering::Relaxed);
        self.bytes.store(0, Ordering::Relaxed);
        self.items.store(0, Ordering::Relaxed);
        if let Ok(mut s) = self.started.lock() {
            *s = Instant::now();
        }
        if let Ok(mut b) = self.bar.lock() {
            *b = Some(bar);
        }
    }

    fn advance(&self, items: u64, bytes: u64) {
        let total = self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        let n = self.items.fetch_add(items, Ordering::Relaxed) + items;
        self.with(|b| {
            b.inc(items);
            if n.is_multiple_of(64) || items >= 64 {
                let secs = self
                    .started
                    .lock()
                    .map(|s| s.elapsed().as_secs_f64())
                    .unwrap_or(1.0);
                b.set_message(if self.tokens.load(Ordering::Relaxed) {
                    units::token_rate(total, secs)
                } else {
                    units::rate(total, secs)
                });
            }
        });
    }

    fn finish(&self) {
        if let Ok(mut b) = self.bar.lock()
            && let Some(bar) = b.take()
        {
            bar.finish_and_clear();
        }
    }
}
