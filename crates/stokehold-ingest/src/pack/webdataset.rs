//! WebDataset tar shards: consecutive members `KEY.EXT` form one sample; each extension becomes a
//! field: image extensions → image:auto, `cls`/`cls2`/`index`/`label` → int64 (decimal text),
//! `txt`/`text`/`caption`/`json` → string, anything else → bytes; plus `__key__` (string).
//! Numbered image members (`KEY.0.jpg`, `KEY.1.png`, ...) are one `list:image` field `images`,
//! in the order of their numbers (`KEY.img.0.jpg`, `KEY.img.1.jpg`: field `img`); a sample
//! without any holds an empty list there.
//!
//! Member names are opaque keys: nothing is ever written to disk from them; links and devices are
//! refused; pickle members are left out unless `keep_pickle` (and even then stored as opaque
//! bytes: stokehold never unpickles anything).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use stokehold_format::{Field, FieldType, FieldValue, ImageCodec, ListItem, Schema};

use super::{Loaded, PackError, PackOptions, Plan, Progress, Skipped, check_image, source_files};
use crate::sources::choose_fields;
use crate::sources::webdataset::{field_type, image_item, is_pickle, split_name};
use crate::tar::{EntryKind, TarLimits, TarReader};

fn tar_files(sources: &[PathBuf]) -> Result<Vec<PathBuf>, PackError> {
    source_files(
        sources,
        |p| p.extension().is_some_and(|e| e == "tar"),
        ".tar files",
    )
}

/// A sample's members: (extension, data), in archive order.
type Members = Vec<(String, Vec<u8>)>;

/// One grouped sample, or a problem found while reading the archives.
enum Job {
    Sample {
        at: String,
        key: String,
        members: Members,
    },
    Bad(Skipped),
}

pub(super) fn plan<'a>(
    sources: &'a [PathBuf],
    options: &'a PackOptions,
    progress: &dyn Progress,
) -> Result<Plan<'a>, PackError> {
    let files = tar_files(sources)?;
    let limits = TarLimits {
        max_member_size: options.max_item_bytes,
        ..TarLimits::default()
    };
    // Pass 1: headers only (data is seeked over), to learn which members the samples hold.
    progress.start("scanning", Some(files.len() as u64), None);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut samples = 0u64;
    let mut bytes = 0u64;
    let mut pickles = 0u64;
    // the fields that are lists of numbered images
    let mut lists: BTreeSet<String> = BTreeSet::new();
    for f in &files {
        let file = File::open(f).map_err(|e| PackError::io(f, e))?;
        let mut r = TarReader::new(BufReader::with_capacity(1 << 16, file), limits);
        // (key, extensions) of the sample being read
        let mut current: Option<(String, BTreeSet<String>)> = None;
        let mut count = |s: Option<(String, BTreeSet<String>)>| {
            if let Some((_, exts)) = s {
                samples += 1;
                for e in exts {
                    *counts.entry(e).or_default() += 1;
                }
            }
        };
        while let Ok(Some(e)) = r.next_entry() {
            if e.kind != EntryKind::Regular {
                continue;
            }
            let Some((key, ext)) = split_name(&e.name) else {
                continue;
            };
            if is_pickle(ext) && !options.keep_pickle {
                pickles += 1;
                continue;
            }
            bytes += e.size;
            if current.as_ref().is_none_or(|c| c.0 != key) {
                count(current.replace((key.to_string(), BTreeSet::new())));
            }
            // the numbered images of a sample count as one field, their list
            let field = match image_item(ext) {
                Some((list, _)) => {
                    lists.insert(list.to_string());
                    list
                }
                None => ext,
            };
            current
                .as_mut()
                .expect("set above")
                .1
                .insert(field.to_string());
        }
        count(current);
        progress.advance(1, 0);
    }
    progress.finish();
    if counts.is_empty() {
        return Err(PackError::Empty(format!(
            "no KEY.EXT members in {} tar files",
            files.len()
        )));
    }
    let mut notes = Vec::new();
    let mut source = serde_json::Map::new();
    let chosen = choose_fields(
        &counts,
        samples,
        options.fields.as_deref(),
        |ext| {
            lists.contains(ext) || matches!(field_type(ext), FieldType::String | FieldType::Bytes)
        },
        |ext| format!("member .{ext}"),
        &mut notes,
        &mut source,
    )?;
    let mut fields = vec![Field::new("__key__", FieldType::String)];
    let mut types = Vec::new();
    for c in chosen {
        let ty = if lists.contains(&c.name) {
            FieldType::List {
                item: ListItem::Image {
                    codec: ImageCodec::Auto,
                },
            }
        } else {
            field_type(&c.name)
        };
        fields.push(Field::new(c.name.clone(), ty.clone()));
        types.push((c.name, ty, c.optional));
    }
    let schema = Schema::new(fields)?;
    if pickles > 0 {
        notes.push(format!(
            "{pickles} pickle members (.pyd/.pickle/.pt/.pth) were left out: stokehold never unpickles data; \
             pass --keep-pickle to store them as opaque bytes"
        ));
    }
    let keep_pickle = options.keep_pickle;
    let jobs = Samples {
        files,
        next_file: 0,
        reader: None,
        ready: VecDeque::new(),
        current: None,
        limits,
        keep_pickle,
    };
    Ok(Plan {
        schema,
        classes: None,
        items: Some(samples),
        bytes: Some(bytes),
        skipped_early: Vec::new(),
        notes,
        source,
        run: Box::new(move |sink| sink.run(jobs, move |job| load(job, &types))),
    })
}

/// A field of the schema: its extension, type, and whether a sample may lack it.
type FieldPlan = (String, FieldType, bool);

fn load(job: Job, types: &[FieldPlan]) -> Loaded {
    let (at, key, members) = match job {
        Job::Bad(s) => return Loaded::Skip(s),
        Job::Sample { at, key, members } => (at, key, members),
    };
    let skip = |reason: String| {
        Loaded::Skip(Skipped {
            input: at.clone(),
            reason,
        })
    };
    let mut by_ext: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    // numbered images by list: (number, extension, data)
    let mut lists: BTreeMap<String, Vec<(u32, String, Vec<u8>)>> = BTreeMap::new();
    for (ext, data) in members {
        if let Some((list, n)) = image_item(&ext) {
            lists
                .entry(list.to_string())
                .or_default()
                .push((n, ext, data));
            continue;
        }
        if by_ext.contains_key(&ext) {
            return skip(format!("two members with extension {ext:?}"));
        }
        by_ext.insert(ext, data);
    }
    let mut values = Vec::with_capacity(types.len() + 1);
    values.push(FieldValue::String(key.into()));
    let mut total = 0u64;
    let mut progressive = false;
    for (ext, ty, optional) in types {
        if ty.is_image_list() {
            let mut items = lists.remove(ext).unwrap_or_default();
            if items.is_empty() && !*optional {
                return skip(format!(
                    "no numbered image members ({}), a required field",
                    if ext == crate::sources::webdataset::IMAGE_LIST {
                        ".0.jpg, .1.jpg, ...".to_string()
                    } else {
                        format!(".{ext}.0.jpg, .{ext}.1.jpg, ...")
                    }
                ));
            }
            items.sort_by_key(|(n, _, _)| *n);
            if let Some(w) = items.windows(2).find(|w| w[0].0 == w[1].0) {
                return skip(format!(
                    "two members for image {} of {ext:?}: .{} and .{}",
                    w[0].0, w[0].1, w[1].1
                ));
            }
            let mut list = Vec::with_capacity(items.len());
            for (k, (_, member, data)) in items.into_iter().enumerate() {
                match check_image(&data) {
                    Ok(p) => progressive |= p,
                    Err(e) => {
                        return skip(format!("member .{member} (item {k} of {ext:?}): {e}"));
                    }
                }
                total += data.len() as u64;
                list.push(FieldValue::Image(data.into()));
            }
            values.push(FieldValue::List(list));
            continue;
        }
        let data = match by_ext.remove(ext) {
            Some(data) => data,
            None if *optional => Vec::new(), // a text or bytes field: stored empty
            None => {
                return skip(format!(
                    "no .{ext} member, a required field (--fields chooses the fields; NAME? makes \
                     a text or bytes one optional)"
                ));
            }
        };
        total += data.len() as u64;
        values.push(match ty {
            FieldType::Image { .. } => match check_image(&data) {
                Ok(p) => {
                    progressive |= p;
                    FieldValue::Image(data.into())
                }
                Err(e) => return skip(format!("member .{ext}: {e}")),
            },
            FieldType::Int64 => match std::str::from_utf8(&data)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                Some(v) => FieldValue::Int64(v),
                None => return skip(format!("member .{ext} is not a decimal integer")),
            },
            FieldType::String => match String::from_utf8(data) {
                Ok(s) => FieldValue::String(s.into()),
                Err(_) => return skip(format!("member .{ext} is not UTF-8 text")),
            },
            _ => FieldValue::Bytes(data.into()),
        });
    }
    Loaded::Sample {
        input: at,
        values,
        bytes: total,
        progressive,
    }
}

/// Reads the archives in order and groups consecutive members by key.
struct Samples {
    files: Vec<PathBuf>,
    next_file: usize,
    reader: Option<(PathBuf, TarReader<BufReader<File>>)>,
    ready: VecDeque<Job>,
    /// (where, key, members) of the sample being gathered.
    current: Option<(String, String, Members)>,
    limits: TarLimits,
    keep_pickle: bool,
}

impl Samples {
    fn flush(&mut self) {
        if let Some((at, key, members)) = self.current.take() {
            self.ready.push_back(Job::Sample { at, key, members });
        }
    }

    fn bad(&mut self, input: String, reason: String) {
        self.ready.push_back(Job::Bad(Skipped { input, reason }));
    }

    /// Read one more entry; returns false when every archive is done.
    fn step(&mut self) -> bool {
        if self.reader.is_none() {
            let Some(path) = self.files.get(self.next_file).cloned() else {
                self.flush();
                return false;
            };
            self.next_file += 1;
            match File::open(&path) {
                Ok(f) => {
                    self.reader = Some((
                        path,
                        TarReader::new(BufReader::with_capacity(1 << 20, f), self.limits),
                    ))
                }
                Err(e) => self.bad(path.display().to_string(), format!("cannot open: {e}")),
            }
            return true;
        }
        let (path, r) = self.reader.as_mut().expect("checked above");
        let path = path.clone();
        let entry = match r.next_entry() {
            Ok(Some(e)) => e,
            Ok(None) => {
                let cut = r.cut_at();
                self.flush();
                self.reader = None;
                if let Some(at) = cut {
                    self.bad(
                        path.display().to_string(),
                        format!("byte {at}: {}", crate::tar::CUT),
                    );
                }
                return true;
            }
            Err(e) => {
                self.flush();
                self.reader = None;
                self.bad(
                    path.display().to_string(),
                    format!("{e}; the rest of this archive is skipped"),
                );
                return true;
            }
        };
        let at = format!(
            "{} member {:?} (byte {})",
            path.display(),
            entry.name,
            entry.header_offset
        );
        match entry.kind {
            EntryKind::Regular => {}
            EntryKind::Directory => return true,
            k => {
                self.bad(
                    at,
                    format!("{k:?} members are refused (links and devices are never followed)"),
                );
                return true;
            }
        }
        let Some((key, ext)) = split_name(&entry.name) else {
            self.bad(at, "member name has no extension".into());
            return true;
        };
        let (key, ext) = (key.to_string(), ext.to_string());
        if is_pickle(&ext) && !self.keep_pickle {
            return true; // counted in pass 1 and reported as a note; its data is skipped unread
        }
        let data = match self.reader.as_mut().expect("open").1.read_data() {
            Ok(d) => d,
            Err(e) => {
                self.flush();
                self.reader = None;
                self.bad(
                    path.display().to_string(),
                    format!("{e}; the rest of this archive is skipped"),
                );
                return true;
            }
        };
        if self.current.as_ref().is_some_and(|c| c.1 != key) {
            self.flush();
        }
        self.current
            .get_or_insert_with(|| (at, key, Vec::new()))
            .2
            .push((ext, data));
        true
    }
}

impl Iterator for Samples {
    type Item = Job;

    fn next(&mut self) -> Option<Job> {
        loop {
            if let Some(j) = self.ready.pop_front() {
                return Some(j);
            }
            if !self.step() && self.ready.is_empty() {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stokehold_format::ImageCodec;

    #[test]
    fn names_split_like_webdataset() {
        assert_eq!(split_name("a/b/000123.jpg"), Some(("a/b/000123", "jpg")));
        assert_eq!(
            split_name("x.y/000123.seg.png"),
            Some(("x.y/000123", "seg.png"))
        );
        assert_eq!(
            split_name("../evil.txt"),
            Some(("..", ""))
                .filter(|_| false)
                .or(Some(("../evil", "txt")))
        );
        assert_eq!(split_name("noext"), None);
        assert_eq!(split_name("trailing."), None);
    }

    #[test]
    fn numbered_image_members_are_items_of_a_list() {
        assert_eq!(image_item("0.jpg"), Some(("images", 0)));
        assert_eq!(image_item("12.PNG"), Some(("images", 12)));
        assert_eq!(image_item("img.3.webp"), Some(("img", 3)));
        assert_eq!(image_item("a.b.007.jpeg"), Some(("a.b", 7)));
        // not an image, not a number, too long a number, no number, an empty prefix
        for ext in [
            "0.txt",
            "x.jpg",
            "1e3.jpg",
            "1234567890.jpg",
            "jpg",
            ".0.jpg",
            "-1.jpg",
        ] {
            assert_eq!(image_item(ext), None, "{ext}");
        }
    }

    #[test]
    fn extensions_map_to_types() {
        assert_eq!(
            field_type("JPG"),
            FieldType::Image {
                codec: ImageCodec::Auto
            }
        );
        assert_eq!(
            field_type("seg.png"),
            FieldType::Image {
                codec: ImageCodec::Auto
            }
        );
        assert_eq!(field_type("cls"), FieldType::Int64);
        assert_eq!(field_type("json"), FieldType::String);
        assert_eq!(field_type("npy"), FieldType::Bytes);
        assert!(is_pickle("pyd") && is_pickle("model.pth") && !is_pickle("txt"));
    }
}
