//! Transform specifications: a serialisable description of a column's stages (what the Python
//! package sends, e.g. `{"name": "random_resized_crop", "params": {"size": [224, 224]}}`), and the
//! planner that turns them into a [`Column`] with its output shape.

use std::collections::BTreeMap;
use std::sync::Arc;

use stokehold_format::Schema;

use crate::error::{EngineError, Result};
use crate::stages::{Column, Output, Transform};

pub use crate::stages::stage_spec::TransformSpec;

/// Names of the built-in stages this build knows.
pub const BUILT_IN: &[&str] = crate::stages::image::STAGES;

/// Build the column for `field` from its stage specs. `custom` builds stages this crate does not
/// know (for example Python callables); a column with a custom stage produces a list output.
/// With no specs the field is passed through ([`Column::passthrough`]).
pub fn build_column(
    schema: &Schema,
    field: &str,
    specs: &[TransformSpec],
    custom: &mut dyn FnMut(&TransformSpec) -> Option<Arc<dyn Transform>>,
) -> Result<Column> {
    let mut column = Column::passthrough(schema, field)?;
    if specs.is_empty() {
        return Ok(column);
    }
    if let Some(planned) = crate::stages::video::plan(field, specs) {
        // a clip decodes a video value (its frame index and its container)
        if let Some(f) = schema.index_of(field).map(|i| &schema.fields[i])
            && f.ty != stokehold_format::FieldType::Video
        {
            return Err(EngineError::Config(format!(
                "column {field:?}: clip needs a video field, and the field is of type {}; pack \
                 videos with `stokehold pack` (a folder or a table of MP4 files)",
                f.ty
            )));
        }
        let (t, output) = planned?;
        column.transforms = vec![t];
        column.output = output;
        return Ok(column);
    }
    if let Some(planned) = crate::stages::text::plan(field, specs)
        .or_else(|| crate::stages::vision::plan(field, specs))
    {
        let (t, output) = planned?;
        if [
            crate::stages::vision::QWEN2VL,
            crate::stages::vision::FIXED_SIZE,
        ]
        .contains(&t.name())
            && let Some(f) = schema.index_of(field).map(|i| &schema.fields[i])
            && !matches!(
                f.ty,
                stokehold_format::FieldType::Bytes | stokehold_format::FieldType::Image { .. }
            )
        {
            return Err(EngineError::Config(format!(
                "column {field:?}: {} needs encoded image bytes, and the field is of type {}",
                t.name(),
                f.ty
            )));
        }
        column.transforms = vec![t];
        column.output = output;
        return Ok(column);
    }
    if specs
        .iter()
        .any(|s| crate::stages::image::is_image_stage(&s.name))
    {
        // An image chain is planned as one fused stage with a fixed output.
        if let Some(other) = specs
            .iter()
            .find(|s| !crate::stages::image::is_image_stage(&s.name))
        {
            return Err(EngineError::Config(format!(
                "column {field:?}: {:?} cannot be mixed with image stages in one chain",
                other.name
            )));
        }
        // encoded images are bytes: an image chain on a number, string or array field would
        // fail at every sample, so it is refused here, before the first batch
        if let Some(f) = schema.index_of(field).map(|i| &schema.fields[i])
            && !matches!(
                f.ty,
                stokehold_format::FieldType::Bytes | stokehold_format::FieldType::Image { .. }
            )
        {
            return Err(EngineError::Config(format!(
                "column {field:?}: image stages ({}) need encoded image bytes, and the field is \
                 of type {}; choose an image or bytes field for them",
                specs
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                f.ty
            )));
        }
        let (t, output) = crate::stages::image::plan(field, specs)?;
        column.transforms = vec![t];
        column.output = output;
        return Ok(column);
    }
    let mut transforms = Vec::with_capacity(specs.len());
    for s in specs {
        match custom(s) {
            Some(t) => transforms.push(t),
            None => {
                return Err(EngineError::Config(format!(
                    "column {field:?}: unknown transform {:?} (built-in transforms: {}, {}, {}, {}, {})",
                    s.name,
                    BUILT_IN.join(", "),
                    crate::stages::text::TOKENIZE,
                    crate::stages::vision::QWEN2VL,
                    crate::stages::vision::FIXED_SIZE,
                    crate::stages::video::CLIP
                )));
            }
        }
    }
    column.transforms = transforms;
    column.output = Output::List;
    Ok(column)
}

/// Build every column: the fields named in `specs` with their stages, and (when `all_fields`)
/// every other field of the schema passed through, in schema order.
pub fn build_columns(
    schema: &Schema,
    specs: &BTreeMap<String, Vec<TransformSpec>>,
    all_fields: bool,
    custom: &mut dyn FnMut(&TransformSpec) -> Option<Arc<dyn Transform>>,
) -> Result<Vec<Column>> {
    let fields: Option<Vec<String>> = (!all_fields).then(|| specs.keys().cloned().collect());
    build_columns_of(schema, specs, fields.as_deref(), custom)
}

/// Build the columns of `fields` (the loader's `fields=`; None: every field of the schema), in
/// schema order: those named in `specs` with their stages, the others passed through. A field
/// with stages must be one of `fields`; the other fields are not read out of their records at
/// all (a camera's video that is not asked for is neither copied nor decoded).
pub fn build_columns_of(
    schema: &Schema,
    specs: &BTreeMap<String, Vec<TransformSpec>>,
    fields: Option<&[String]>,
    custom: &mut dyn FnMut(&TransformSpec) -> Option<Arc<dyn Transform>>,
) -> Result<Vec<Column>> {
    for name in specs.keys() {
        if schema.index_of(name).is_none() {
            return Err(EngineError::Config(format!(
                "transforms given for {name:?}, which the dataset does not have ({schema})"
            )));
        }
        if let Some(fields) = fields
            && !fields.contains(name)
        {
            return Err(EngineError::Config(format!(
                "transforms given for {name:?}, which fields= leaves out (fields: {fields:?})"
            )));
        }
    }
    if let Some(f) = fields
        .into_iter()
        .flatten()
        .find(|f| schema.index_of(f).is_none())
    {
        return Err(EngineError::Config(format!(
            "fields= names {f:?}, which the dataset does not have ({schema})"
        )));
    }
    crate::stages::video::check_clocks(specs)?;
    let mut cols = Vec::new();
    for f in &schema.fields {
        if fields.is_some_and(|fs| !fs.contains(&f.name)) {
            continue;
        }
        match specs.get(&f.name) {
            Some(s) => {
                cols.push(build_column(schema, &f.name, s, custom)?);
                // a clip's frames come with their times, `<field>_timestamps`
                if let Some(ts) = crate::stages::video::timestamps_column(&f.name, s)? {
                    if schema.index_of(&ts.name).is_some() {
                        return Err(EngineError::Config(format!(
                            "column {:?}: the clip's timestamps column would have the name of \
                             the dataset's field {:?}",
                            f.name, ts.name
                        )));
                    }
                    cols.push(ts);
                }
            }
            None => cols.push(Column::passthrough(schema, &f.name)?),
        }
    }
    Ok(cols)
}
