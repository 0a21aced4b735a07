//! The bound on thread options (it asks the machine how many cores it has).

/// The most worker threads an option may ask for: 4 per core, and at least 16 (object storage's
/// requests wait on the network, not the cores). Beyond it a thread adds only memory and
/// scheduling: `pack --threads 100000` once started 23,590 threads and packed nothing in 26
/// minutes.
pub fn max_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.saturating_mul(4).max(16)
}

/// A thread option over [`max_threads`]: the bound and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} must be at most {max} on this machine (4 per core, at least 16; 0 means one per \
     core), got {got}: more threads than that only add memory and scheduling"
)]
pub struct TooManyThreads {
    /// The option's name.
    pub what: String,
    /// The bound on this machine.
    pub max: usize,
    /// What was asked.
    pub got: usize,
}

/// `threads` (an option named `what`; 0 means one per core) if at most [`max_threads`].
pub fn check_threads(what: &str, threads: usize) -> Result<usize, TooManyThreads> {
    let max = max_threads();
    if threads <= max {
        return Ok(threads);
    }
    Err(TooManyThreads {
        what: what.into(),
        max,
        got: threads,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_options_are_bounded_with_the_reason() {
        let max = max_threads();
        assert!(max >= 16);
        assert_eq!(check_threads("threads", 0), Ok(0));
        assert_eq!(check_threads("threads", max), Ok(max));
        let err = check_threads("--threads", 100_000).unwrap_err().to_string();
        assert!(err.starts_with(&format!("--threads must be at most {max} on this machine")));
        assert!(err.ends_with("got 100000: more threads than that only add memory and scheduling"));
    }
}
