//! JSON Lines without a column of files: each non-empty line is a sample, each key a field,
//! chosen and typed as files read in place choose them (`sources::jsonl`: the first lines'
//! kinds; lists and objects, a conversation's `messages`, as their canonical JSON text), so that
//! `pack` of a JSONL file gives the samples reading it in place gives. A line that is not a
//! JSON object, or lacks a required key, is skipped and counted (`FILE:LINE`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use stokehold_format::{Field, Schema};

use super::{Loaded, PackError, PackOptions, Plan, Skipped};
use crate::sources::jsonl::{LineStats, SAMPLED_LINES, field_value, lines};

/// The first lines' statistics of a JSONL file's bytes.
pub(super) fn first_lines(all: &[u8]) -> LineStats {
    let mut stats = LineStats::default();
    for (n, _, line) in lines(all).take(SAMPLED_LINES as usize) {
        stats.observe(n, line);
    }
    stats
}

/// The plan of packing JSONL file `src` (its bytes `all`, the first lines' `stats`) as rows.
pub(super) fn plan<'a>(
    src: &Path,
    all: Vec<u8>,
    stats: &LineStats,
    options: &'a PackOptions,
) -> Result<Plan<'a>, PackError> {
    let mut notes = Vec::new();
    let mut source = serde_json::Map::new();
    if let Some((line, why)) = &stats.first_invalid {
        notes.push(format!(
            "{} of the first {} lines are not JSON objects (line {line}: {why}): skipped",
            stats.invalid, stats.lines
        ));
    }
    let fields = crate::sources::jsonl::choose(
        stats,
        1,
        options.fields.as_deref(),
        &mut notes,
        &mut source,
    )?;
    let schema = Schema::new(
        fields
            .iter()
            .map(|f| Field::new(f.name.clone(), f.ty.clone()))
            .collect(),
    )?;
    let all: Arc<[u8]> = all.into();
    let jobs: Vec<(u64, usize, usize)> = lines(&all)
        .map(|(n, at, line)| (n, at, line.len()))
        .collect();
    let src: PathBuf = src.to_path_buf();
    Ok(Plan {
        schema,
        classes: None,
        items: Some(jobs.len() as u64),
        bytes: Some(all.len() as u64),
        skipped_early: Vec::new(),
        notes,
        source,
        run: Box::new(move |sink| {
            sink.run(jobs, move |(n, at, len)| {
                let line = &all[at..at + len];
                let input = format!("{}:{n}", src.display());
                let mut values = Vec::with_capacity(fields.len());
                for f in &fields {
                    match field_value(line, &f.name, &f.ty, f.optional) {
                        Ok(v) => values.push(v.into_owned()),
                        Err(reason) => return Loaded::Skip(Skipped { input, reason }),
                    }
                }
                Loaded::Sample {
                    input,
                    values,
                    bytes: len as u64,
                    progressive: false,
                }
            })
        }),
    })
}
