//! What `stokehold pack` would gain over files read in place, measured on a sample of this
//! data: the bench's own image stages run on images as given and on the same images with the
//! restart markers pack adds (the fused crop then decodes only the intervals the crop covers),
//! alternating, best of three rounds each; and whether the records are checksummed.

use std::collections::BTreeMap;
use std::time::Instant;

use stokehold::format::{Dataset, FieldType, FieldValue};
use stokehold::stages::spec::TransformSpec;
use stokehold::stages::{SampleCtx, Transform};
use stokehold::{SampleRng, SamplesSpec};

use crate::units;

/// Images measured (evenly spaced over the dataset).
const SAMPLE: u64 = 64;
/// Rounds of each kind; the best counts.
const ROUNDS: usize = 3;

/// The `packing` line of a bench over files read in place (`None` for a packed dataset).
pub(super) fn report(ds: &Dataset, samples: &SamplesSpec, seed: u64) -> Option<String> {
    let format = stokehold_ingest::inplace::in_place_format(ds)?;
    let checksums = match format {
        "tfrecord" => "TFRecord records carry a CRC-32C already",
        "parquet" => {
            "Parquet rows are checked by the CRC-32C their index took of their pages; an image \
             is read and decompressed with its whole page, once for the page's rows while the \
             cache of decoded pages holds it (the parquet-pages line; pack stores each image on \
             its own)"
        }
        _ => "tar members carry no checksum (pack stores a CRC-32C per record)",
    };
    let measured = match samples {
        SamplesSpec::Records { transforms, .. } => image_pipeline(ds, transforms)
            .map(|(field, column, specs)| measure(ds, field, &column, &specs, seed)),
        _ => None,
    };
    Some(match measured {
        Some(Ok(m)) => format!("{m}; {checksums}"),
        Some(Err(why)) => format!("not measured ({why}); {checksums}"),
        None => format!(
            "no image stage to measure (pack's gain is in cropped decoding: give \
             --random-resized-crop); {checksums}"
        ),
    })
}

/// The image field, its column name and its stages, when the bench runs an image pipeline.
fn image_pipeline(
    ds: &Dataset,
    transforms: &BTreeMap<String, Vec<TransformSpec>>,
) -> Option<(usize, String, Vec<TransformSpec>)> {
    transforms.iter().find_map(|(column, specs)| {
        let i = ds.schema().fields.iter().position(|f| {
            f.name == *column && matches!(f.ty, FieldType::Image { .. }) && !specs.is_empty()
        })?;
        Some((i, column.clone(), specs.clone()))
    })
}

/// The image stages on the sample as given and as pack would store it.
fn measure(
    ds: &Dataset,
    field: usize,
    column: &str,
    specs: &[TransformSpec],
    seed: u64,
) -> Result<String, String> {
    let (stage, output) =
        stokehold::stages::image::plan(column, specs).map_err(|e| e.to_string())?;
    let n = ds.len().min(SAMPLE);
    let mut given = Vec::new();
    for k in 0..n {
        let id = k * ds.len() / n;
        // a damaged record is the loader's business (its policy), not this estimate's
        if let Ok(mut values) = ds.get(id)
            && let FieldValue::Image(bytes) = values.swap_remove(field)
        {
            given.push((id, bytes.into_owned()));
        }
    }
    if given.is_empty() {
        return Err("no image could be read".into());
    }
    let t = Instant::now();
    let marked: Vec<(u64, Vec<u8>)> = given
        .iter()
        .map(|(id, b)| {
            let m = stokehold::ops::jpeg::with_restarts(b).unwrap_or_else(|_| b.clone());
            (*id, m)
        })
        .collect();
    let rewrite = t.elapsed().as_secs_f64() / given.len() as f64;
    let grown = marked.iter().map(|(_, b)| b.len()).sum::<usize>() as f64
        / given.iter().map(|(_, b)| b.len()).sum::<usize>() as f64;
    let mut slot = vec![0u8; output.slot_bytes()];
    let (mut t_given, mut t_marked) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..ROUNDS {
        t_given = t_given.min(run(&*stage, &given, &mut slot, seed)?);
        t_marked = t_marked.min(run(&*stage, &marked, &mut slot, seed)?);
    }
    let per = |t: f64| 1e3 * t / given.len() as f64;
    Ok(format!(
        "pack would run these image stages {:.2}x as fast (measured on {}: {:.2} ms per image \
         as given, {:.2} ms with pack's restart markers; the rewrite costs {:.2} ms per image \
         once, the files grow {:+.1}%)",
        t_given / t_marked,
        units::counted(given.len() as u64, "image", "images"),
        per(t_given),
        per(t_marked),
        1e3 * rewrite,
        100.0 * (grown - 1.0),
    ))
}

/// Seconds to run `stage` over `images` once, each with the random numbers the loader would
/// draw for it in epoch 0.
fn run(
    stage: &dyn Transform,
    images: &[(u64, Vec<u8>)],
    slot: &mut [u8],
    seed: u64,
) -> Result<f64, String> {
    let t = Instant::now();
    for (id, bytes) in images {
        let mut rng = SampleRng::for_sample(seed, 0, *id, 0);
        let mut ctx = SampleCtx {
            id: *id,
            seed,
            epoch: 0,
            rng: &mut rng,
            other: None,
        };
        stage
            .apply_into(FieldValue::Image(bytes.as_slice().into()), &mut ctx, slot)
            .map_err(|e| format!("sample {id}: {e}"))?;
    }
    Ok(t.elapsed().as_secs_f64())
}
