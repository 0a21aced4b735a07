//! WebDataset members as fields, for `pack` and files read in place alike: a member name's
//! sample key and extension (`split_name`), and the field type an extension gives
//! (`field_type`).

use stokehold_format::{FieldType, ImageCodec};

pub(crate) const IMAGE: [&str; 5] = ["jpg", "jpeg", "png", "webp", "jpe"];
const INT: [&str; 5] = ["cls", "cls2", "class", "index", "label"];
const TEXT: [&str; 4] = ["txt", "text", "caption", "json"];
const PICKLE: [&str; 5] = ["pyd", "pickle", "pkl", "pt", "pth"];

pub(crate) fn field_type(ext: &str) -> FieldType {
    let e = ext.to_ascii_lowercase();
    let last = e.rsplit('.').next().unwrap_or(&e);
    if IMAGE.contains(&last) {
        FieldType::Image {
            codec: ImageCodec::Auto,
        }
    } else if INT.contains(&e.as_str()) {
        FieldType::Int64
    } else if TEXT.contains(&e.as_str()) {
        FieldType::String
    } else {
        FieldType::Bytes
    }
}

/// The list of images that member extension `ext` is an item of, and its number: `0.jpg`,
/// `1.png`, ... are items of `images`, `img.0.jpg`, `img.1.jpg`, ... items of `img` (a decimal
/// number of at most 9 digits before an image extension). `None`: a member of its own.
pub(crate) fn image_item(ext: &str) -> Option<(&str, u32)> {
    let mut parts = ext.rsplitn(3, '.');
    let last = parts.next()?.to_ascii_lowercase();
    let number = parts.next()?;
    if !IMAGE.contains(&last.as_str())
        || number.is_empty()
        || number.len() > 9
        || !number.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let list = parts.next().unwrap_or(IMAGE_LIST);
    (!list.is_empty()).then(|| (list, number.parse().expect("at most 9 digits")))
}

/// The field of a sample's numbered images without a prefix (`0.jpg`, `1.jpg`, ...).
pub(crate) const IMAGE_LIST: &str = "images";

pub(crate) fn is_pickle(ext: &str) -> bool {
    let e = ext.to_ascii_lowercase();
    PICKLE.contains(&e.rsplit('.').next().unwrap_or(&e))
}

/// Split a member name into (sample key, extension) as WebDataset does: the extension starts at
/// the first '.' of the last path component.
pub(crate) fn split_name(name: &str) -> Option<(&str, &str)> {
    let base_start = name.rfind('/').map_or(0, |i| i + 1);
    let dot = name[base_start..].find('.')? + base_start;
    let (key, ext) = (&name[..dot], &name[dot + 1..]);
    (!ext.is_empty()).then_some((key, ext))
}
