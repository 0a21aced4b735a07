//! [`FolderFiles`]: the files a JSONL file read in place names (its images and videos), read
//! from its folder: with `std::fs` where the folder is on a local disk, through the file's
//! [`Location`] where it is an object store's prefix (HEAD once per file, then ranged GETs
//! pinned to the version that HEAD saw).

use std::collections::HashMap;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use stokehold_format::NamedFiles;
use stokehold_storage::{Location, ObjectMeta, location::RangeRead};

/// How many HEADs an object-store folder remembers (beyond, it forgets them all and asks
/// again: a HEAD is one request).
const METAS_KEPT: usize = 1 << 16;

/// The folder a table's named files are relative to.
#[derive(Debug)]
pub(crate) struct FolderFiles {
    place: Place,
}

#[derive(Debug)]
enum Place {
    /// A folder on a local disk.
    Local(PathBuf),
    /// A folder (`dir`, relative to the location's root, empty for the root) of an object store.
    Remote {
        location: Arc<dyn Location>,
        dir: String,
        metas: Mutex<HashMap<String, ObjectMeta>>,
    },
}

impl FolderFiles {
    /// The folder of file `name` of `location`.
    pub(crate) fn of(location: &Arc<dyn Location>, name: &str) -> FolderFiles {
        let place = match location.directory() {
            Some(d) => Place::Local(super::parent(&d.join(name))),
            None => Place::Remote {
                location: Arc::clone(location),
                dir: match name.rsplit_once('/') {
                    Some((dir, _)) => dir.to_string(),
                    None => String::new(),
                },
                metas: Mutex::new(HashMap::new()),
            },
        };
        FolderFiles { place }
    }

    /// A local folder.
    #[cfg(test)]
    pub(crate) fn local(dir: impl Into<PathBuf>) -> FolderFiles {
        FolderFiles {
            place: Place::Local(dir.into()),
        }
    }

    /// The local path of file `name`, where the folder is on a local disk.
    fn path(&self, name: &str) -> Option<PathBuf> {
        match &self.place {
            Place::Local(d) => Some(d.join(name)),
            Place::Remote { .. } => None,
        }
    }
}

/// The object name of file `name` in folder `dir` of an object store: relative names only (an
/// absolute path or a URL names nothing in the store).
fn object_name(dir: &str, name: &str) -> io::Result<String> {
    if name.starts_with('/') || name.contains("://") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "an absolute path or a URL: a JSONL file in object storage names its files relative \
             to its folder",
        ));
    }
    let mut name = name;
    while let Some(rest) = name.strip_prefix("./") {
        name = rest;
    }
    if name.split('/').any(|part| part == "..") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a path through `..`: a JSONL file in object storage names files in its folder and \
             below",
        ));
    }
    Ok(if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    })
}

impl FolderFiles {
    /// An object store's name and meta of file `name` (a HEAD the first time).
    fn remote(
        location: &dyn Location,
        dir: &str,
        metas: &Mutex<HashMap<String, ObjectMeta>>,
        name: &str,
    ) -> io::Result<(String, ObjectMeta)> {
        let object = object_name(dir, name)?;
        if let Some(m) = metas.lock().unwrap_or_else(|p| p.into_inner()).get(&object) {
            return Ok((object, m.clone()));
        }
        let meta = location.head(&object)?;
        let mut kept = metas.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() >= METAS_KEPT {
            kept.clear();
        }
        // a HEAD racing another keeps the first: every read of the file is pinned to one version
        let meta = kept.entry(object.clone()).or_insert(meta).clone();
        Ok((object, meta))
    }
}

impl NamedFiles for FolderFiles {
    fn place(&self, name: &str) -> String {
        match &self.place {
            Place::Local(d) => d.join(name).display().to_string(),
            Place::Remote { location, dir, .. } => match object_name(dir, name) {
                Ok(o) => location.place(&o).display().to_string(),
                // (said as given: it names nothing in the store)
                Err(_) if dir.is_empty() => location.place(name).display().to_string(),
                Err(_) => location
                    .place(&format!("{dir}/{name}"))
                    .display()
                    .to_string(),
            },
        }
    }

    fn size(&self, name: &str) -> io::Result<u64> {
        match &self.place {
            Place::Local(d) => Ok(std::fs::metadata(d.join(name))?.len()),
            Place::Remote {
                location,
                dir,
                metas,
            } => Ok(Self::remote(&**location, dir, metas, name)?.1.size),
        }
    }

    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        match &self.place {
            Place::Local(d) => std::fs::File::open(d.join(name))?.read_exact_at(buf, offset),
            Place::Remote {
                location,
                dir,
                metas,
            } => {
                let (object, meta) = Self::remote(&**location, dir, metas, name)?;
                let read = RangeRead {
                    name: &object,
                    meta: &meta,
                    offset,
                    len: buf.len() as u64,
                };
                let got = location.read_ranges(&[read]).pop().unwrap_or_else(|| {
                    Err(io::Error::other("the object store answered no read"))
                })?;
                if got.len() != buf.len() {
                    return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
                }
                buf.copy_from_slice(&got);
                Ok(())
            }
        }
    }

    /// A local file is read to its end once (no size asked first: the file may grow between).
    fn read_head(&self, name: &str, len: u64) -> io::Result<Vec<u8>> {
        match self.path(name) {
            Some(p) => {
                let mut v = Vec::new();
                std::fs::File::open(p)?.take(len).read_to_end(&mut v)?;
                Ok(v)
            }
            None => {
                let n = self.size(name)?.min(len);
                let mut buf = vec![0u8; usize::try_from(n).map_err(io::Error::other)?];
                self.read_at(name, 0, &mut buf)?;
                Ok(buf)
            }
        }
    }

    fn read_all(&self, name: &str, max: u64) -> io::Result<Vec<u8>> {
        match self.path(name) {
            Some(p) => read_local(&p, max),
            None => {
                let n = self.size(name)?;
                if n > max {
                    return Err(too_large(max));
                }
                self.read_head(name, n)
            }
        }
    }
}

fn too_large(max: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::FileTooLarge,
        format!("larger than the limit of {max} bytes"),
    )
}

/// A local file whole, refused past `max` bytes (pack's reader: never sized by a length the
/// file system gives, which may change).
fn read_local(p: &Path, max: u64) -> io::Result<Vec<u8>> {
    crate::pack::read_file(p, max).map_err(|e| match e {
        crate::pack::ReadFileError::Io(e) => e,
        crate::pack::ReadFileError::TooLarge { max } => too_large(max),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use stokehold_storage::MemoryDir;

    #[test]
    fn object_names_stay_in_the_tables_folder() {
        assert_eq!(object_name("", "a.mp4").unwrap(), "a.mp4");
        assert_eq!(object_name("t", "./clips/a.mp4").unwrap(), "t/clips/a.mp4");
        for bad in [
            "/abs/a.mp4",
            "s3://other/a.mp4",
            "../a.mp4",
            "clips/../../a.mp4",
        ] {
            let e = object_name("t", bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad}");
        }
    }

    #[test]
    fn a_store_folder_reads_ranges_sizes_and_refuses_past_the_limit() {
        let location: Arc<dyn Location> = Arc::new(MemoryDir::new("mem://d"));
        let bytes: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        location.put("t/clips/a.mp4", &bytes).unwrap();
        let files = FolderFiles::of(&location, "t/table.jsonl");
        assert!(
            files.path("clips/a.mp4").is_none(),
            "a memory location is not a folder"
        );
        assert_eq!(files.size("clips/a.mp4").unwrap(), 10_000);
        let mut buf = [0u8; 100];
        files.read_at("clips/a.mp4", 300, &mut buf).unwrap();
        assert_eq!(&buf[..], &bytes[300..400]);
        assert_eq!(files.read_head("clips/a.mp4", 7).unwrap(), &bytes[..7]);
        assert_eq!(files.read_all("./clips/a.mp4", 10_000).unwrap(), bytes);
        let e = files.read_all("clips/a.mp4", 9_999).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        let e = files.read_at("clips/a.mp4", 9_950, &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        let e = files.size("clips/b.mp4").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(files.place("clips/a.mp4").ends_with("t/clips/a.mp4"));
    }

    #[test]
    fn a_local_folder_reads_as_the_file_system_does() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.bin"), b"0123456789").unwrap();
        let files = FolderFiles::local(dir.path());
        assert_eq!(files.size("a.bin").unwrap(), 10);
        assert_eq!(files.read_all("a.bin", 10).unwrap(), b"0123456789");
        assert_eq!(
            files.read_all("a.bin", 9).unwrap_err().kind(),
            io::ErrorKind::FileTooLarge
        );
        assert_eq!(files.read_head("a.bin", 4).unwrap(), b"0123");
        let mut b = [0u8; 3];
        files.read_at("a.bin", 5, &mut b).unwrap();
        assert_eq!(&b, b"567");
        assert_eq!(
            files.size("none.bin").unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }
}
