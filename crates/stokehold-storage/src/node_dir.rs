//! The one protocol of node-local directories that several processes share: a dataset writer's
//! destination, `cache_dir`'s shard copies, the decoded cache's parts and kept indexes.
//!
//! - **Claim.** [`NodeDir::claim`] takes an exclusive `flock` on a lock file (`NAME.lock` beside
//!   the entry, or any path [`claim_file`] is given), waiting or not. The claim removes its file
//!   before it lets go, and a claim taken on a file no longer at its path is taken again, so two
//!   processes never both hold one; it dies with its process, so a crash never leaves an entry
//!   claimed.
//! - **Publish.** An entry is written under a temporary name of its writer
//!   ([`NodeDir::temp_path`], `NAME.tmp-PID`), then renamed to its name and the directory synced
//!   ([`NodeDir::publish`]): readers see the whole entry or nothing.
//! - **Sweep.** A temporary whose entry no live process claims is an orphan of a crash;
//!   [`NodeDir::sweep`] removes them.
//! - **Free-space floor.** [`FreeSpace::check`] refuses a write that would leave the filesystem
//!   with less free than a floor: 5% of it, at most 1 GiB, unless set ([`KEEP_FREE_ENV`] or an
//!   option).

use std::fs::{self, File};
use std::io::{self, ErrorKind};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};

/// The environment variable that sets the free-space floor (a byte count; see [`FreeSpace`]).
pub const KEEP_FREE_ENV: &str = "STOKEHOLD_KEEP_FREE";
/// The default floor keeps this fraction of the filesystem free...
pub const KEEP_FREE_FRACTION: f64 = 0.05;
/// ...or, on a large filesystem, this many bytes.
pub const KEEP_FREE_MAX: u64 = 1 << 30;

/// Where stokehold keeps what it derives from data between runs (the indexes of files read in
/// place, the token counts of packed conversations): `$STOKEHOLD_INDEX_DIR`, else
/// `$XDG_CACHE_HOME/stokehold/index`, else `~/.cache/stokehold/index`; `None` without a home.
pub fn kept_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("STOKEHOLD_INDEX_DIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("stokehold").join("index"))
}

/// An exclusive claim (an `flock` on a lock file), held until dropped; see the module
/// documentation.
#[derive(Debug)]
pub struct Claim {
    path: PathBuf,
    /// Holds the lock until dropped.
    _file: File,
}

impl Claim {
    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        // Removed while still locked (the file closes after this), so no one can take a lock
        // on it that a third claimant would not see.
        let _ = fs::remove_file(&self.path);
    }
}

/// Why a claim could not be taken (not: that another holds it).
#[derive(Debug)]
pub enum ClaimError {
    /// The lock file could not be created or opened: the directory refuses writes.
    Create(io::Error),
    /// The lock could not be taken or checked.
    Lock(io::Error),
}

impl From<ClaimError> for io::Error {
    fn from(e: ClaimError) -> io::Error {
        match e {
            ClaimError::Create(e) | ClaimError::Lock(e) => e,
        }
    }
}

/// Claim the lock file `path` (created when missing): `Ok(None)` when another process (or another
/// claim of this one) holds it and `wait` is false; with `wait`, block until it is free.
pub fn claim_file(path: &Path, wait: bool) -> Result<Option<Claim>, ClaimError> {
    let op = if wait {
        FlockOperation::LockExclusive
    } else {
        FlockOperation::NonBlockingLockExclusive
    };
    // The holder removes the file before it lets go, so a lock taken on a file that is no
    // longer at `path` guards nothing: then try again with the new file.
    for _ in 0..16 {
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(ClaimError::Create)?;
        match flock(&file, op) {
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => return Ok(None),
            Err(e) => return Err(ClaimError::Lock(e.into())),
        }
        let held = file.metadata().map_err(ClaimError::Lock)?;
        match fs::metadata(path) {
            Ok(m) if m.dev() == held.dev() && m.ino() == held.ino() => {
                return Ok(Some(Claim {
                    path: path.to_path_buf(),
                    _file: file,
                }));
            }
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(ClaimError::Lock(e)),
        }
    }
    // sixteen claimants in a row took and released it under us: it is busy
    Ok(None)
}

/// A node-local directory shared by processes under the protocol of the module documentation.
#[derive(Debug, Clone)]
pub struct NodeDir {
    dir: PathBuf,
}

const TMP: &str = ".tmp-";
const LOCK: &str = ".lock";

impl NodeDir {
    /// The directory `dir`, created when missing.
    pub fn create(dir: impl Into<PathBuf>) -> io::Result<NodeDir> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        Ok(NodeDir { dir })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of entry `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Claim entry `name` (its lock file `NAME.lock`); see [`claim_file`].
    pub fn claim(&self, name: &str, wait: bool) -> io::Result<Option<Claim>> {
        Ok(claim_file(&self.dir.join(format!("{name}{LOCK}")), wait)?)
    }

    /// This process's temporary name for entry `name`: `NAME.tmp-PID`.
    pub fn temp_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}{TMP}{}", std::process::id()))
    }

    /// Whether `file_name` is one of the protocol's own files (a lock or a temporary), not an
    /// entry.
    pub fn is_internal(file_name: &str) -> bool {
        file_name.ends_with(LOCK) || file_name.contains(TMP)
    }

    /// Publish the finished temporary `temp` as entry `name` (one rename, then the directory
    /// synced, so that the entry survives a crash once this returns); its path.
    pub fn publish(&self, temp: &Path, name: &str) -> io::Result<PathBuf> {
        let path = self.dir.join(name);
        fs::rename(temp, &path)?;
        File::open(&self.dir).and_then(|d| d.sync_all())?;
        Ok(path)
    }

    /// Remove the temporaries whose entry no live process claims (the orphans of a crash);
    /// returns how many.
    pub fn sweep(&self) -> usize {
        let Ok(rd) = fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut n = 0;
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some((entry, _)) = name.split_once(TMP) else {
                continue;
            };
            // The writer claims the entry for as long as it writes.
            if let Ok(Some(_claim)) = self.claim(entry, false)
                && fs::remove_file(e.path()).is_ok()
            {
                n += 1;
            }
        }
        n
    }

    /// The entries (not the protocol's own files): (name, bytes, modification time).
    pub fn entries(&self) -> Vec<(String, u64, std::time::SystemTime)> {
        let Ok(rd) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        rd.flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                if Self::is_internal(&name) {
                    return None;
                }
                let m = e.metadata().ok()?;
                Some((name, m.len(), m.modified().ok()?))
            })
            .collect()
    }

    /// The free space of the directory's filesystem.
    pub fn free_space(&self) -> io::Result<FreeSpace> {
        FreeSpace::of(&self.dir)
    }
}

/// The free and total bytes of a filesystem, and the floor of free bytes a writer keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreeSpace {
    /// Bytes an unprivileged writer may still use.
    pub free: u64,
    /// The filesystem's size.
    pub total: u64,
}

impl FreeSpace {
    /// The filesystem holding `dir`.
    pub fn of(dir: &Path) -> io::Result<FreeSpace> {
        let s = rustix::fs::statvfs(dir)?;
        Ok(FreeSpace {
            free: s.f_bavail.saturating_mul(s.f_frsize),
            total: s.f_blocks.saturating_mul(s.f_frsize),
        })
    }

    /// The floor of free bytes: `keep_free` when set, else [`KEEP_FREE_FRACTION`] of the
    /// filesystem, at most [`KEEP_FREE_MAX`].
    pub fn floor(&self, keep_free: Option<u64>) -> u64 {
        keep_free.unwrap_or(((self.total as f64 * KEEP_FREE_FRACTION) as u64).min(KEEP_FREE_MAX))
    }

    /// Whether writing `need` more bytes keeps at least the floor free (`Err(floor)` if not).
    pub fn check(&self, need: u64, keep_free: Option<u64>) -> Result<(), u64> {
        let floor = self.floor(keep_free);
        if self.free.saturating_sub(need) < floor {
            Err(floor)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_excludes_a_second_until_dropped_and_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let d = NodeDir::create(dir.path().join("n")).unwrap();
        let first = d.claim("e", false).unwrap().expect("free");
        assert!(d.claim("e", false).unwrap().is_none(), "claimed twice");
        assert!(d.claim("other", false).unwrap().is_some());
        let lock = first.path().to_path_buf();
        drop(first);
        assert!(!lock.exists());
        assert!(d.claim("e", false).unwrap().is_some());
    }

    #[test]
    fn sweep_removes_unclaimed_temporaries_only_and_publish_renames() {
        let dir = tempfile::tempdir().unwrap();
        let d = NodeDir::create(dir.path()).unwrap();
        fs::write(dir.path().join("a.tmp-1"), b"orphan").unwrap();
        let claim = d.claim("b", false).unwrap().unwrap();
        let tmp = d.temp_path("b");
        fs::write(&tmp, b"being written").unwrap();
        fs::write(dir.path().join("c"), b"entry").unwrap();
        assert_eq!(d.sweep(), 1);
        assert!(!dir.path().join("a.tmp-1").exists());
        assert!(tmp.exists(), "a claimed temporary is kept");
        let names: Vec<_> = d.entries().into_iter().map(|e| e.0).collect();
        assert_eq!(names, ["c"]);
        let published = d.publish(&tmp, "b").unwrap();
        drop(claim);
        assert_eq!(fs::read(published).unwrap(), b"being written");
        let mut names: Vec<_> = d.entries().into_iter().map(|e| e.0).collect();
        names.sort();
        assert_eq!(names, ["b", "c"]);
    }

    #[test]
    fn the_floor_is_five_percent_at_most_a_gib_unless_set() {
        let small = FreeSpace {
            free: 100,
            total: 1000,
        };
        assert_eq!(small.floor(None), 50);
        assert_eq!(small.floor(Some(7)), 7);
        assert_eq!(small.check(50, None), Ok(()));
        assert_eq!(small.check(51, None), Err(50));
        assert_eq!(small.check(100, Some(0)), Ok(()));
        let large = FreeSpace {
            free: 1 << 40,
            total: 1 << 42,
        };
        assert_eq!(large.floor(None), KEEP_FREE_MAX);
    }
}
