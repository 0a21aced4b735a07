//! One memory budget for a whole node, shared by every loader of every process on it (issue #55):
//! a directory on node-local storage holds one lease file per holder, each saying how many
//! bytes it holds and `flock`ed by it for as long as it lives.
//!
//! - **Reserve.** Under the directory's lock (`budget.lock`, an exclusive `flock`), the leases
//!   of live holders are added up (a lease whose lock can be taken belongs to a process that
//!   died: it is removed, and its bytes return to the budget), and the new lease gets what is
//!   left, up to what it asks ([`NodeBudget::reserve`]).
//! - **Resize.** A holder grows or shrinks its lease the same way ([`Lease::resize`]): an
//!   autotuner stays inside what the others leave.
//! - **Release.** Dropping a lease removes its file; a process that dies releases its locks with
//!   it, and the next reservation sweeps its files.
//!
//! The directory is the node's (the same path for every process: `$STOKEHOLD_NODE_BUDGET_DIR`,
//! else a directory under the system's temporary directory named after the budget), never on
//! shared storage, where `flock` may not hold across machines.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{FlockOperation, flock};

/// Where a node's budget directories are kept (one per budget name) unless set.
pub const NODE_BUDGET_DIR_ENV: &str = "STOKEHOLD_NODE_BUDGET_DIR";

/// A node-wide byte budget (see the module documentation).
#[derive(Debug, Clone)]
pub struct NodeBudget {
    dir: PathBuf,
    total: u64,
}

/// Bytes held from a [`NodeBudget`] until dropped.
#[derive(Debug)]
pub struct Lease {
    dir: PathBuf,
    path: PathBuf,
    file: File,
    bytes: u64,
}

/// A lease file's name is unique within its process by this counter.
static NEXT: AtomicU64 = AtomicU64::new(0);

impl NodeBudget {
    /// The budget of `total` bytes kept in `dir` (created when missing). Every process sharing
    /// the budget must name the same directory and the same total.
    pub fn open(dir: impl Into<PathBuf>, total: u64) -> io::Result<NodeBudget> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        Ok(NodeBudget { dir, total })
    }

    /// The default directory of the budget named `name`: `$STOKEHOLD_NODE_BUDGET_DIR/NAME`, else
    /// `TMPDIR/stokehold-node-budget/NAME`.
    pub fn default_dir(name: &str) -> PathBuf {
        std::env::var_os(NODE_BUDGET_DIR_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("stokehold-node-budget"))
            .join(name)
    }

    /// The budget's total bytes.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bytes the live holders hold now (dead holders' leases swept).
    pub fn used(&self) -> io::Result<u64> {
        let _guard = self.lock()?;
        live_total(&self.dir, None)
    }

    /// Reserve up to `want` bytes, at least `min`: `Ok(None)` when less than `min` is left.
    pub fn reserve(&self, want: u64, min: u64) -> io::Result<Option<Lease>> {
        let _guard = self.lock()?;
        let used = live_total(&self.dir, None)?;
        let left = self.total.saturating_sub(used);
        let grant = want.min(left);
        if grant < min {
            return Ok(None);
        }
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(format!("lease-{}-{n}", std::process::id()));
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        flock(&file, FlockOperation::NonBlockingLockExclusive).map_err(io::Error::from)?;
        write_bytes(&mut file, grant)?;
        Ok(Some(Lease {
            dir: self.dir.clone(),
            path,
            file,
            bytes: grant,
        }))
    }

    fn lock(&self) -> io::Result<File> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.dir.join("budget.lock"))?;
        flock(&f, FlockOperation::LockExclusive).map_err(io::Error::from)?;
        Ok(f)
    }
}

impl Lease {
    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Hold `want` bytes instead (shrinking always succeeds; growing gets what the others
    /// leave, up to `want`). Returns the bytes now held.
    pub fn resize(&mut self, budget: &NodeBudget, want: u64) -> io::Result<u64> {
        let _guard = budget.lock()?;
        let others = live_total(&self.dir, Some(&self.path))?;
        let grant = want.min(budget.total.saturating_sub(others));
        write_bytes(&mut self.file, grant)?;
        self.bytes = grant;
        Ok(grant)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // removed while still locked: a sweep never reads a half-gone lease as a dead one's
        let _ = fs::remove_file(&self.path);
    }
}

fn write_bytes(file: &mut File, bytes: u64) -> io::Result<()> {
    file.seek(SeekFrom::Start(0))?;
    file.write_all(format!("{bytes:020}\n").as_bytes())?;
    file.set_len(21)?;
    Ok(())
}

/// The bytes the live leases in `dir` hold (`except` left out); leases whose lock can be taken
/// belong to processes that died: removed. Called under the directory's lock.
fn live_total(dir: &Path, except: Option<&Path>) -> io::Result<u64> {
    let mut total = 0u64;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with("lease-") {
            continue;
        }
        let path = entry.path();
        if Some(path.as_path()) == except {
            continue;
        }
        let mut f = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if flock(&f, FlockOperation::NonBlockingLockShared).is_ok() {
            // no one holds it: its process is gone
            let _ = fs::remove_file(&path);
            continue;
        }
        let mut text = String::new();
        f.read_to_string(&mut text)?;
        // a lease being written (created, locked, not yet filled) counts as 0 until it is
        total = total.saturating_add(text.trim().parse::<u64>().unwrap_or(0));
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_share_the_total_and_return_it_when_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let b = NodeBudget::open(tmp.path().join("b"), 1000).unwrap();
        let a = b.reserve(600, 1).unwrap().unwrap();
        assert_eq!(a.bytes(), 600);
        let mut c = b.reserve(600, 1).unwrap().unwrap();
        assert_eq!(c.bytes(), 400); // what is left
        assert!(b.reserve(10, 1).unwrap().is_none());
        assert_eq!(b.used().unwrap(), 1000);
        assert_eq!(c.resize(&b, 100).unwrap(), 100);
        assert_eq!(b.used().unwrap(), 700);
        drop(a);
        assert_eq!(b.used().unwrap(), 100);
        assert_eq!(c.resize(&b, 5000).unwrap(), 1000);
        // a budget opened again (another loader of the process) sees the same leases
        let again = NodeBudget::open(b.dir(), 1000).unwrap();
        assert_eq!(again.used().unwrap(), 1000);
    }
}
