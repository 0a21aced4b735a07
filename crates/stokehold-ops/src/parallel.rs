//! One way to run an indexed job on scoped native threads: blocks of indices taken in turn from
//! a shared counter (so uneven items balance), results put back in index order. Used wherever a
//! call spreads per-item work over threads of its own (chat templates' `encode_many`, the
//! engine's count of whole conversations, the files a JSONL file read in place names).

use std::sync::atomic::{AtomicUsize, Ordering};

/// A worker thread panicked; the results are lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a worker thread panicked")]
pub struct Panicked;

/// `f(0) .. f(n - 1)` on `threads` scoped threads (0: one per core; never more than `n`), in
/// blocks of `block` indices; the results in index order.
pub fn map_indexed<R, F>(n: usize, threads: usize, block: usize, f: F) -> Result<Vec<R>, Panicked>
where
    R: Send,
    F: Fn(usize) -> R + Sync,
{
    let threads = match threads {
        0 => std::thread::available_parallelism().map_or(1, |t| t.get()),
        t => t,
    }
    .clamp(1, n.max(1));
    if threads == 1 {
        return Ok((0..n).map(f).collect());
    }
    let block = block.max(1);
    let next = AtomicUsize::new(0);
    let parts: Vec<Option<Vec<(usize, R)>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let start = next.fetch_add(block, Ordering::Relaxed);
                        if start >= n {
                            break;
                        }
                        for i in start..(start + block).min(n) {
                            done.push((i, f(i)));
                        }
                    }
                    done
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().ok()).collect()
    });
    let mut slots: Vec<Option<R>> = (0..n).map(|_| None).collect();
    for part in parts {
        for (i, r) in part.ok_or(Panicked)? {
            slots[i] = Some(r);
        }
    }
    slots.into_iter().map(|r| r.ok_or(Panicked)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_index_order_on_any_thread_count() {
        let want: Vec<usize> = (0..1000).map(|i| i * i % 97).collect();
        for threads in [0, 1, 2, 3, 8, 2000] {
            for block in [0, 1, 7, 64] {
                let got = map_indexed(1000, threads, block, |i| i * i % 97).unwrap();
                assert_eq!(got, want, "threads {threads}, block {block}");
            }
        }
        assert!(map_indexed(0, 4, 8, |i| i).unwrap().is_empty());
    }

    #[test]
    fn a_panicking_item_is_an_error_not_a_missing_result() {
        let r = map_indexed(100, 3, 5, |i| {
            assert!(i != 42, "boom");
            i
        });
        assert_eq!(r, Err(Panicked));
    }
}
