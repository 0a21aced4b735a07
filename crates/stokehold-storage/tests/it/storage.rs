//! Every local storage backend runs the one conformance suite of the `Storage` contract.

use std::io;
use std::path::Path;

use stokehold_format::Storage;
use stokehold_storage::conformance::check_storage;
use stokehold_storage::file::{Access, DirectFile, MmapFile, PreadFile, supports_direct};

fn boxed<S: Storage + 'static>(r: io::Result<S>) -> io::Result<Box<dyn Storage>> {
    r.map(|s| Box::new(s) as Box<dyn Storage>)
}

#[test]
fn pread_conforms() {
    let dir = tempfile::tempdir().unwrap();
    check_storage("pread", dir.path(), &|p: &Path| boxed(PreadFile::open(p))).unwrap();
}

#[test]
fn mmap_conforms() {
    let dir = tempfile::tempdir().unwrap();
    check_storage("mmap", dir.path(), &|p: &Path| boxed(MmapFile::open(p))).unwrap();
}

#[test]
fn memory_conforms() {
    let dir = tempfile::tempdir().unwrap();
    check_storage("memory", dir.path(), &|p: &Path| {
        boxed(stokehold_storage::file::read_memory(p))
    })
    .unwrap();
}

#[test]
fn direct_conforms_where_the_filesystem_has_direct_io() {
    let dir = tempfile::tempdir().unwrap();
    let probe = dir.path().join("probe");
    std::fs::write(&probe, [1u8; 10]).unwrap();
    if !supports_direct(&probe) {
        eprintln!("skipped: no O_DIRECT on {}", dir.path().display());
        return;
    }
    check_storage("direct", dir.path(), &|p: &Path| boxed(DirectFile::open(p))).unwrap();
}

#[test]
fn every_access_opens_through_the_same_suite() {
    let dir = tempfile::tempdir().unwrap();
    for access in [Access::Auto, Access::Pread, Access::Mmap, Access::Memory] {
        check_storage(access.name(), dir.path(), &|p: &Path| access.open(p, true)).unwrap();
    }
}

#[test]
fn the_suite_catches_a_backend_that_breaks_the_contract() {
    // A backend that pads short reads with zeros instead of failing must not pass.
    #[derive(Debug)]
    struct Padding(PreadFile, u64);
    impl Storage for Padding {
        fn kind(&self) -> &'static str {
            "padding"
        }
        fn profile(&self) -> stokehold_format::ReadProfile {
            stokehold_format::ReadProfile::LocalFile
        }
        fn size(&self) -> io::Result<u64> {
            Ok(self.1)
        }
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
            buf.fill(0);
            let end = (offset.saturating_add(buf.len() as u64)).min(self.1);
            if offset < end {
                let n = (end - offset) as usize;
                self.0.read_at(offset, &mut buf[..n])?;
            }
            Ok(())
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let err = check_storage("padding", dir.path(), &|p: &Path| {
        let len = std::fs::metadata(p)?.len();
        boxed(PreadFile::open(p).map(|f| Padding(f, len)))
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("past the end"), "{err}");
}

#[test]
fn automatic_access_follows_the_documented_rule() {
    let gib = 1u64 << 30;
    assert_eq!(Access::Auto.resolve(gib, 8 * gib), Access::Pread);
    assert_eq!(Access::Auto.resolve(4 * gib, 8 * gib), Access::Pread);
    assert_eq!(Access::Auto.resolve(4 * gib + 1, 8 * gib), Access::Direct);
    assert_eq!(
        Access::Auto.resolve(gib, 0),
        Access::Pread,
        "unknown RAM: page cache"
    );
    assert_eq!(
        Access::Mmap.resolve(100 * gib, gib),
        Access::Mmap,
        "explicit choices stay"
    );
    for a in [
        Access::Auto,
        Access::Pread,
        Access::Mmap,
        Access::Direct,
        Access::Memory,
    ] {
        assert_eq!(Access::parse(a.name()), Some(a));
    }
    assert_eq!(Access::parse("nvme"), None);
}

#[test]
fn local_directories_and_memory_pass_the_location_conformance_suite() {
    use stokehold_storage::conformance::check_location;
    use stokehold_storage::{LocalDir, MemoryDir};
    let dir = tempfile::tempdir().unwrap();
    // a directory that does not exist yet: written into, it is made
    check_location("local", &LocalDir::new(dir.path().join("new/loc"))).unwrap();
    // no temporary file of a writer is left behind (the dropped one included)
    let left: Vec<_> = std::fs::read_dir(dir.path().join("new/loc"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left.len(), 3, "{left:?}");
    check_location("memory", &MemoryDir::new("mem://suite")).unwrap();
}

#[test]
fn the_location_suite_fails_a_backend_that_breaks_the_contract() {
    use stokehold_format::Storage;
    use stokehold_storage::LocalDir;
    use stokehold_storage::conformance::check_location;
    use stokehold_storage::location::{Location, ObjectMeta, ObjectWriter, RangeRead};
    /// A local directory whose conditional create always writes.
    #[derive(Debug)]
    struct Careless(LocalDir);
    impl Location for Careless {
        fn root(&self) -> &Path {
            self.0.root()
        }
        fn head(&self, name: &str) -> io::Result<ObjectMeta> {
            self.0.head(name)
        }
        fn read_ranges(&self, reads: &[RangeRead<'_>]) -> Vec<io::Result<Vec<u8>>> {
            self.0.read_ranges(reads)
        }
        fn open_storage(
            &self,
            name: &str,
            meta: &ObjectMeta,
            access: Access,
            fallback: bool,
        ) -> io::Result<Box<dyn Storage>> {
            self.0.open_storage(name, meta, access, fallback)
        }
        fn list(&self) -> io::Result<std::collections::BTreeMap<String, ObjectMeta>> {
            self.0.list()
        }
        fn put(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
            self.0.put(name, bytes)
        }
        fn put_if_absent(&self, name: &str, bytes: &[u8]) -> io::Result<bool> {
            self.0.put(name, bytes).map(|()| true)
        }
        fn writer(&self, name: &str) -> io::Result<Box<dyn ObjectWriter>> {
            self.0.writer(name)
        }
        fn delete(&self, name: &str) -> io::Result<()> {
            self.0.delete(name)
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let err = check_location("careless", &Careless(LocalDir::new(dir.path()))).unwrap_err();
    assert_eq!((err.kind, err.name.as_str()), ("location", "careless"));
    assert!(err.what.contains("put_if_absent"), "{err}");
}
