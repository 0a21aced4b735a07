//! Where a [`crate::DatasetWriter`] writes: claiming the destination, deciding whether what is
//! there may be replaced, and publishing the finished staging directory.
//!
//! Beside a destination `DIR/NAME` a writer uses three hidden names in `DIR`:
//! - `.NAME.lock`: the writer's claim (the claim of the node-local directory protocol,
//!   [`crate::node_dir`]). It holds an exclusive `flock` on it from `create` to the
//!   end, so a second writer of the same destination (in this process or another) is refused
//!   with [`FormatError::DestinationBusy`]; the lock dies with its process, so a crash never
//!   leaves the destination claimed.
//! - `.NAME.partial-PID`: the staging directory everything is written into.
//! - `.NAME.replaced-PID`: an overwritten dataset, between the two renames that replace it.
//!
//! A writer that holds the lock knows every other staging and replaced directory of its
//! destination is left over from a writer that died, and cleans them up first: a replaced
//! dataset whose destination is gone (the writer died between the two renames) is put back.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::node_dir::{Claim, ClaimError, claim_file};

use stokehold_format::error::{FormatError, Result};
use stokehold_format::limits::Limits;
use stokehold_format::manifest::{MANIFEST_FILE, Manifest};

use crate::locate::ManifestIo;

/// The extra files a dataset directory may hold beside its manifest and the shards it lists
/// (docs/format.md §1 and §9). Nothing else is ever written into a dataset, so a directory holding
/// anything else is not one a writer may replace.
pub const EXTRA_FILES: [&str; 3] = ["skipped.txt", "kept-as-is.txt", "tokenizer.json"];

/// `dest`'s directory and file name (`.` for a bare name).
fn split(dest: &Path) -> Result<(&Path, String)> {
    let name = dest.file_name().ok_or_else(|| {
        FormatError::Schema(format!(
            "{} is not a valid destination directory",
            dest.display()
        ))
    })?;
    let parent = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    Ok((parent, name.to_string_lossy().into_owned()))
}

/// The hidden sibling `.NAME{suffix}` of `dest`.
pub(crate) fn sibling(dest: &Path, suffix: &str) -> Result<PathBuf> {
    let (parent, name) = split(dest)?;
    Ok(parent.join(format!(".{name}{suffix}")))
}

/// The staging directory of this process for `dest`.
pub(crate) fn staging_dir(dest: &Path) -> Result<PathBuf> {
    sibling(dest, &format!(".partial-{}", std::process::id()))
}

/// An exclusive claim on a destination (the node-local directory protocol's claim on
/// `.NAME.lock`); released (and its file removed) when dropped.
#[derive(Debug)]
pub(crate) struct DestLock {
    _claim: Claim,
}

impl DestLock {
    /// Claim `dest` without waiting.
    pub(crate) fn acquire(dest: &Path) -> Result<DestLock> {
        let path = sibling(dest, ".lock")?;
        // the lock file is the first thing written beside `dest`: failing to create it is the
        // destination's directory refusing writes, said of the destination (the lock file is
        // an internal name)
        let unwritable = |e: std::io::Error| {
            let dir = split(dest).map_or_else(|_| PathBuf::from("."), |(p, _)| p.to_path_buf());
            FormatError::io(
                dest,
                None,
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "cannot write beside it in {} ({e}); choose a destination in a \
                         directory this user can write",
                        dir.display()
                    ),
                ),
            )
        };
        match claim_file(&path, false) {
            Ok(Some(claim)) => Ok(DestLock { _claim: claim }),
            Ok(None) => Err(FormatError::DestinationBusy {
                path: dest.to_path_buf(),
                lock: path,
            }),
            Err(ClaimError::Create(e)) => Err(unwritable(e)),
            Err(ClaimError::Lock(e)) => Err(FormatError::io(&path, None, e)),
        }
    }
}

/// With `dest`'s lock held: put back a replaced dataset whose destination is gone, then remove
/// every other staging and replaced directory of `dest`. Returns how many were removed.
pub(crate) fn clean_up(dest: &Path, _lock: &DestLock) -> usize {
    let Ok((parent, name)) = split(dest) else {
        return 0;
    };
    let (partial, replaced) = (format!(".{name}.partial-"), format!(".{name}.replaced-"));
    let Ok(entries) = fs::read_dir(parent) else {
        return 0;
    };
    let mut left: Vec<(bool, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            let is_replaced = n.starts_with(&replaced);
            (is_replaced || n.starts_with(&partial)).then(|| (is_replaced, e.path()))
        })
        .collect();
    left.sort();
    if fs::symlink_metadata(dest).is_err()
        && let Some(i) = left.iter().position(|(r, _)| *r)
        && fs::rename(&left[i].1, dest).is_ok()
    {
        left.remove(i);
    }
    left.iter()
        .filter(|(_, p)| fs::remove_dir_all(p).is_ok())
        .count()
}

/// What is at a destination.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// Nothing, or an empty directory: a rename publishes there.
    Free,
    /// Something else.
    Taken,
}

/// What is at `dest` (a symbolic link, even to an empty directory, is refused: it is not clear
/// whether the link or what it points to would be replaced).
pub(crate) fn inspect(dest: &Path) -> Result<Found> {
    match fs::symlink_metadata(dest) {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(Found::Free),
        Err(e) => Err(FormatError::io(dest, None, e)),
        Ok(m) if m.file_type().is_symlink() => Err(FormatError::NotReplaceable {
            path: dest.to_path_buf(),
            reason: "it is a symbolic link; give the directory it points to".into(),
        }),
        Ok(m) if m.is_dir() => {
            let mut it = fs::read_dir(dest).map_err(|e| FormatError::io(dest, None, e))?;
            Ok(if it.next().is_none() {
                Found::Free
            } else {
                Found::Taken
            })
        }
        Ok(_) => Ok(Found::Taken),
    }
}

/// Check that `dest` is a stokehold dataset and nothing else: a directory with a valid manifest,
/// holding only that manifest, the shards it lists and [`EXTRA_FILES`], all regular files.
pub(crate) fn check_replaceable(dest: &Path) -> Result<()> {
    let refuse = |reason: String| FormatError::NotReplaceable {
        path: dest.to_path_buf(),
        reason,
    };
    let meta = fs::symlink_metadata(dest).map_err(|e| FormatError::io(dest, None, e))?;
    if !meta.is_dir() {
        return Err(refuse("it is not a directory".into()));
    }
    let manifest = Manifest::load(dest, &Limits::default()).map_err(|e| {
        refuse(format!(
            "it is not a stokehold dataset ({e}); only a dataset is ever replaced: remove it yourself if it is to go"
        ))
    })?;
    for e in fs::read_dir(dest).map_err(|e| FormatError::io(dest, None, e))? {
        let e = e.map_err(|e| FormatError::io(dest, None, e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let known = name == MANIFEST_FILE
            || EXTRA_FILES.contains(&name.as_str())
            || manifest.shards.iter().any(|s| s.file == name);
        let regular = e.file_type().is_ok_and(|t| t.is_file());
        if !known || !regular {
            return Err(refuse(format!(
                "it holds {name:?}, which is not part of the stokehold dataset there; only a dataset and nothing else is ever replaced"
            )));
        }
    }
    Ok(())
}

/// Move `staging` to `dest`. Without `overwrite`, `dest` must be free (one `rename(2)`, which
/// fails if anything but an empty directory appeared there meanwhile). With it, a dataset at
/// `dest` is checked again, moved aside, replaced, and only then deleted.
pub(crate) fn publish(staging: &Path, dest: &Path, overwrite: bool) -> Result<()> {
    let io = |p: &Path, e| FormatError::io(p, None, e);
    let taken = inspect(dest)? == Found::Taken;
    if !taken || !overwrite {
        if taken {
            return Err(FormatError::DestinationExists {
                path: dest.to_path_buf(),
            });
        }
        return fs::rename(staging, dest).map_err(|e| match e.kind() {
            ErrorKind::DirectoryNotEmpty | ErrorKind::AlreadyExists | ErrorKind::NotADirectory => {
                FormatError::DestinationExists {
                    path: dest.to_path_buf(),
                }
            }
            _ => io(dest, e),
        });
    }
    check_replaceable(dest)?;
    let old = sibling(dest, &format!(".replaced-{}", std::process::id()))?;
    fs::rename(dest, &old).map_err(|e| io(dest, e))?;
    if let Err(e) = fs::rename(staging, dest) {
        let _ = fs::rename(&old, dest);
        return Err(io(dest, e));
    }
    fs::remove_dir_all(&old).map_err(|e| io(&old, e))
}
