//! A mixture given to `stokehold bench` as a small JSON or TOML file (docs/mixtures.md):
//!
//! ```toml
//! epoch_samples = 100000          # optional: the sources' samples summed
//! [sources]
//! web = "s3://bucket/web"
//! code = "data/code"
//! [weights]
//! web = 0.7
//! code = 0.3
//! [[schedule]]                    # optional: weights from a step on
//! at = 5000
//! weights = { web = 0.5, code = 0.5 }
//! ```
//!
//! Relative source paths are relative to the file's directory. `unit = "samples"` counts the
//! schedule in samples instead of steps; `source_column = false` leaves the column out.

use std::path::Path;

use anyhow::Context;
use serde::Deserialize;
use stokehold::samples::mixture::{OnChange, ScheduleUnit};
use stokehold::{MixtureSourceSpec, MixtureSpec, ScheduleEntry, Weights};

// The keys of a mixture file are `MixtureSpec`'s (its defaults too), with `weights` for the
// schedule's first entry and `sources` also as a table of name = path; the test below holds
// them to the spec, and Python's option table (`python/stokehold/_options.py`) to both.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    at: u64,
    weights: Weights,
}

/// Sources by name (kept in the file's order: a source's index is its place there), or a list
/// of `{name, path}`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Sources {
    Named(Ordered),
    Listed(Vec<MixtureSourceSpec>),
}

/// A table of name = path, in the file's order (serde_json's and toml's maps sort their keys).
#[derive(Debug)]
struct Ordered(Vec<(String, String)>);

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a table of source name = path")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Ordered, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = m.next_entry::<String, String>()? {
                    out.push((k, v));
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    sources: Sources,
    #[serde(default)]
    weights: Option<Weights>,
    #[serde(default)]
    schedule: Vec<Entry>,
    #[serde(default)]
    unit: Option<ScheduleUnit>,
    #[serde(default)]
    epoch_samples: Option<u64>,
    #[serde(default)]
    source_column: Option<bool>,
    #[serde(default)]
    on_change: Option<OnChange>,
}

/// The keys of a mixture file besides `sources` (one of them without `sources` is a mixture file
/// with its sources misnamed, not a dataset).
const MIXTURE_KEYS: [&str; 7] = [
    "source",
    "weights",
    "schedule",
    "unit",
    "epoch_samples",
    "source_column",
    "on_change",
];

/// The mixture `path` describes, when it is a mixture file (a `.toml` / `.tml` file, or a
/// `.json` file with `sources` or another key of a mixture file); `None` for anything else (a
/// dataset). A TOML file, or a JSON one with a mixture file's keys, without `sources` is
/// refused, saying so: it is never taken for a dataset.
pub(crate) fn read(path: &Path) -> anyhow::Result<Option<MixtureSpec>> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let toml = matches!(ext.as_str(), "toml" | "tml");
    if !path.is_file() || !(toml || ext == "json") {
        return Ok(None);
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let keys: Vec<String> = if toml {
        let t: toml::Table =
            toml::from_str(&text).with_context(|| format!("{} is not TOML", path.display()))?;
        t.keys().cloned().collect()
    } else {
        let v: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        v.as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    if !keys.iter().any(|k| k == "sources") {
        let mixture_keys: Vec<&String> = keys
            .iter()
            .filter(|k| MIXTURE_KEYS.contains(&k.as_str()))
            .collect();
        // a dataset's manifest (`format`, `shards`, and a `source` of its own) is not one
        let manifest = keys.iter().any(|k| k == "shards" || k == "format");
        if !toml && (mixture_keys.is_empty() || manifest) {
            return Ok(None);
        }
        let hint = if keys.iter().any(|k| k == "source") {
            if toml {
                " (it has [source]: did you mean [sources]?)".to_string()
            } else {
                " (it has \"source\": did you mean \"sources\"?)".to_string()
            }
        } else if keys.is_empty() {
            String::new()
        } else {
            format!(" (its keys: {})", keys.join(", "))
        };
        anyhow::bail!(
            "{} is not a mixture file: it has no `sources` table of name = dataset path{hint}; a \
             mixture file gives [sources] and [weights] (docs/mixtures.md)",
            path.display()
        );
    }
    let what = || format!("{} is not a mixture file", path.display());
    let file: File = if toml {
        toml::from_str(&text).with_context(what)?
    } else {
        serde_json::from_str(&text).with_context(what)?
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let mut sources = match file.sources {
        Sources::Listed(l) => l,
        Sources::Named(m) => {
            m.0.into_iter()
                .map(|(name, p)| MixtureSourceSpec {
                    name,
                    path: Some(p),
                    transforms: None,
                    max_skip_fraction: None,
                    text: None,
                })
                .collect()
        }
    };
    for s in &mut sources {
        let p = s
            .path
            .clone()
            .with_context(|| format!("source '{}' has no path", s.name))?;
        if stokehold_storage::Place::of(Path::new(&p)).is_local() && Path::new(&p).is_relative() {
            s.path = Some(base.join(&p).to_string_lossy().into_owned());
        }
    }
    // weights by name or by list go to the engine as given: it resolves them for every front
    let mut schedule = Vec::new();
    match file.weights {
        Some(weights) => schedule.push(ScheduleEntry { at: 0, weights }),
        None if file.schedule.first().is_some_and(|e| e.at == 0) => {}
        // no weights: each source in proportion to its samples (as one dataset of them all)
        None => schedule.push(ScheduleEntry {
            at: 0,
            weights: Weights::Listed(Vec::new()),
        }),
    }
    schedule.extend(file.schedule.into_iter().map(|e| ScheduleEntry {
        at: e.at,
        weights: e.weights,
    }));
    // the keys given, as `MixtureSpec` spells them: one not given takes the spec's own default
    // (`pipeline/config.rs`, the one place Rust spells it)
    let mut spec = serde_json::json!({
        "sources": sources,
        "schedule": schedule,
        "unit": file.unit,
        "epoch_samples": file.epoch_samples,
        "source_column": file.source_column,
        "on_change": file.on_change,
    });
    if let Some(keys) = spec.as_object_mut() {
        keys.retain(|_, v| !v.is_null());
    }
    Ok(Some(serde_json::from_value(spec).with_context(what)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file's keys are the spec's own (plus `weights`): a key `MixtureSpec` gains or renames
    /// fails here until the file takes it.
    #[test]
    fn a_mixture_files_keys_are_the_specs() {
        let spec = MixtureSpec {
            sources: Vec::new(),
            schedule: Vec::new(),
            unit: ScheduleUnit::Steps,
            epoch_samples: None,
            source_column: true,
            on_change: OnChange::default(),
        };
        let value = serde_json::to_value(&spec).expect("a spec serializes");
        let mut spec_keys: Vec<&str> = value
            .as_object()
            .expect("an object")
            .keys()
            .map(String::as_str)
            .collect();
        spec_keys.push("weights");
        spec_keys.sort_unstable();
        let mut file_keys: Vec<&str> = MIXTURE_KEYS
            .iter()
            .copied()
            .filter(|k| *k != "source")
            .chain(["sources"])
            .collect();
        file_keys.sort_unstable();
        assert_eq!(file_keys, spec_keys);
    }

    /// A file that gives only its sources gets `MixtureSpec`'s defaults, as Python's `Mixture()`
    /// does.
    #[test]
    fn a_mixture_file_without_options_gets_the_specs_defaults() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("mix.toml");
        std::fs::write(&path, "[sources]\nweb = \"a\"\n").expect("written");
        let spec = read(&path).expect("read").expect("a mixture file");
        let bare: MixtureSpec = serde_json::from_value(serde_json::json!({
            "sources": [{"name": "web", "path": dir.path().join("a").to_string_lossy()}],
            "schedule": [{"at": 0, "weights": []}],
        }))
        .expect("a bare spec");
        assert_eq!(spec, bare);
    }
}
