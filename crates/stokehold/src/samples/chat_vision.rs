//! Images inside packed conversations (vision-language SFT): the planner's part and the filler's.
//!
//! **Planning reads sizes, not pixels.** A conversation's tokens are its template's tokens with
//! each image placeholder expanded to the tokens its image becomes, and that number depends only
//! on the image's width and height ([`Qwen2Vl::tokens`]). The sizes come from the shards' meta
//! blocks (the `lists` table `pack` and `ShardWriter` fill from each image's header), or, where a
//! dataset keeps none (files read in place), from each image's header in the record: no image is
//! decoded to plan. Each conversation's image tokens are counted beside its tokens, so rows can
//! keep a budget of image tokens (`max_image_tokens`) as well as `seq_len`.
//!
//! **No image is cut.** A conversation longer than a row is truncated (`overlong="truncate"`)
//! before the first image whose tokens would cross the row's end, so every image in a row is
//! whole and its `pixel_values` match its placeholders; one whose first image already crosses
//! is left out (counted as dropped).
//!
//! **Filling** (`super::chats::row_images`, beside the planner it asks). A row's images, in
//! row, conversation and image order, are decoded, resized and patchified on the loader's thread into one float32 `[patches, row]` array (`pixel_values`,
//! laid out as `transformers`' Qwen2-VL processor lays them out) and their grids into int64
//! `[images, 3]` (`image_grid_thw`); each image's grid, from its header, is checked against the
//! tokens its row was planned for.

use stokehold_format::FieldValue;
use stokehold_ops::chat::ChatTemplate;
use stokehold_ops::vision::Qwen2Vl;
use stokehold_storage::Dataset;

use crate::error::{EngineError, Result};
use crate::stages::Qwen2VlParams;

/// Images inside the conversations of a packed loader (`ChatTemplate(..., images=, vision=)`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VisionSpec {
    /// The field holding each sample's list of images (`list:image`).
    #[serde(default = "default_images")]
    pub images: String,
    /// The placeholder token the template renders per image (`ChatTemplate`'s `image_token`,
    /// whose default is the front's: always given).
    pub image_token: String,
    /// The processor (`stokehold.vision.Qwen2VL`'s parameters).
    #[serde(default)]
    pub processor: Qwen2VlParams,
}

fn default_images() -> String {
    "images".into()
}

/// Why a sample's images cannot be planned or placed (the planner's error names the
/// conversation and its record).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ImageError {
    /// The shards' sizes of the images could not be read.
    #[error("its images' sizes: {0}")]
    Sizes(#[source] stokehold_format::FormatError),
    /// An image's header gives no size.
    #[error("image {k} of field {field:?}: {detail}")]
    Header {
        field: String,
        k: usize,
        detail: String,
    },
    /// An image size the processor refuses.
    #[error("image {k} ({w}x{h}): {source}")]
    Size {
        k: usize,
        w: u32,
        h: u32,
        #[source]
        source: stokehold_ops::OpsError,
    },
    /// An item of the list is not an image.
    #[error("item {k} of field {field:?} is {kind}, not an image")]
    NotImage {
        field: String,
        k: usize,
        kind: &'static str,
    },
    /// The field is not a list.
    #[error("field {field:?} is {kind}, not a list of images")]
    NotList { field: String, kind: &'static str },
    /// The record lacks the field.
    #[error("the record has no field {0:?}")]
    NoField(String),
    /// The row's image tokens and images do not match.
    #[error("the row's image positions: {0}")]
    Positions(String),
}

/// A planner's images: the field, the placeholder's id and the processor.
#[derive(Debug)]
pub(crate) struct ChatVision {
    field: usize,
    name: String,
    pub(crate) placeholder: u32,
    pub(crate) proc: Qwen2Vl,
}

impl ChatVision {
    /// The images of `spec` over `ds`, whose conversations `template` encodes.
    pub(crate) fn new(
        spec: &VisionSpec,
        ds: &Dataset,
        template: &ChatTemplate,
    ) -> Result<ChatVision> {
        let config = |m: String| EngineError::Config(m);
        let field = ds.schema().index_of(&spec.images).ok_or_else(|| {
            config(format!(
                "{} has no field {:?} (the ChatTemplate's `images`, each sample's list of \
                 images); its fields: {}",
                ds.dir().display(),
                spec.images,
                ds.schema()
            ))
        })?;
        let ty = &ds.schema().fields[field].ty;
        if !ty.is_image_list() {
            return Err(config(format!(
                "field {:?} of {} is {ty}, not a list of images (list:image): the ChatTemplate's \
                 `images` names each sample's list of images",
                spec.images,
                ds.dir().display()
            )));
        }
        let placeholder = template
            .tokenizer()
            .token_id(&spec.image_token)
            .map_err(|e| {
                config(format!(
                    "image_token {:?} is not a token of the tokenizer: {e}",
                    spec.image_token
                ))
            })?;
        let proc = spec
            .processor
            .processor()
            .map_err(|e| config(format!("vision: {e}")))?;
        Ok(ChatVision {
            field,
            name: spec.images.clone(),
            placeholder,
            proc,
        })
    }

    /// The sizes of sample `id`'s images the shards keep (`[w0, h0, w1, h1, ...]`; `None`
    /// where they keep none: files read in place).
    pub(crate) fn stored_sizes<'d>(
        &self,
        ds: &'d Dataset,
        id: u64,
    ) -> stokehold_format::error::Result<Option<&'d [u32]>> {
        ds.image_sizes(&self.name, id)
    }

    /// Floats per row of `pixel_values`.
    pub(crate) fn row_len(&self) -> usize {
        self.proc.row_len()
    }

    /// The tokens each image of sample `id` becomes, from its size: the meta block's, else its
    /// header's (`values`: the sample's fields). Errors say which image and why.
    pub(crate) fn image_tokens(
        &self,
        ds: &Dataset,
        id: u64,
        values: &[FieldValue<'_>],
    ) -> std::result::Result<Vec<u64>, ImageError> {
        let stored = self.stored_sizes(ds, id).map_err(ImageError::Sizes)?;
        let sizes: Vec<(u32, u32)> = match stored {
            Some(s) => s.chunks_exact(2).map(|p| (p[0], p[1])).collect(),
            None => self
                .images(values)?
                .iter()
                .enumerate()
                .map(|(k, data)| {
                    stokehold_format::image_size::image_size(data).map_err(|detail| {
                        ImageError::Header {
                            field: self.name.clone(),
                            k,
                            detail: detail.to_string(),
                        }
                    })
                })
                .collect::<std::result::Result<_, _>>()?,
        };
        sizes
            .iter()
            .enumerate()
            .map(|(k, &(w, h))| {
                self.proc
                    .tokens(w, h)
                    .map_err(|source| ImageError::Size { k, w, h, source })
            })
            .collect()
    }

    /// The encoded images of a sample (its fields `values`), in order.
    pub(crate) fn images<'v>(
        &self,
        values: &'v [FieldValue<'_>],
    ) -> std::result::Result<Vec<&'v [u8]>, ImageError> {
        let field = || self.name.clone();
        match values.get(self.field) {
            Some(FieldValue::List(items)) => items
                .iter()
                .enumerate()
                .map(|(k, v)| match v {
                    FieldValue::Image(b) | FieldValue::Bytes(b) => Ok(b.as_ref()),
                    other => Err(ImageError::NotImage {
                        field: field(),
                        k,
                        kind: other.kind(),
                    }),
                })
                .collect(),
            Some(other) => Err(ImageError::NotList {
                field: field(),
                kind: other.kind(),
            }),
            None => Err(ImageError::NoField(field())),
        }
    }

    /// Where an encoding of `ids` longer than `seq_len` is cut so that no image is
    /// ([`cut_before_image`]).
    pub(crate) fn cut(&self, ids: &[u32], seq_len: usize) -> usize {
        cut_before_image(ids, seq_len, self.placeholder)
    }

    /// Image tokens in `ids`.
    pub(crate) fn count_in(&self, ids: &[u32]) -> u64 {
        ids.iter().filter(|&&t| t == self.placeholder).count() as u64
    }
}

/// Where an encoding `ids` longer than `seq_len` is cut so that no image is: `seq_len`, or the
/// start of the run of image tokens (`placeholder`) that crosses it. A run of several images
/// back to back is cut whole: where one image's tokens end is not in the tokens.
pub(crate) fn cut_before_image(ids: &[u32], seq_len: usize, placeholder: u32) -> usize {
    if ids.len() <= seq_len || seq_len == 0 {
        return ids.len().min(seq_len);
    }
    if ids[seq_len - 1] != placeholder || ids[seq_len] != placeholder {
        return seq_len;
    }
    let mut at = seq_len - 1;
    while at > 0 && ids[at - 1] == placeholder {
        at -= 1;
    }
    at
}

/// The multimodal RoPE positions of a packed row (`out`: 3 × its length, temporal, height and
/// width), as Qwen2-VL's `get_rope_index` gives them for each conversation on its own: text
/// tokens at `p, p, p` (`p` counting from 0 at the conversation's start), an image of grid
/// `(t, h, w)` and merge size `m` at `(p + i, p + y, p + x)` over its `t × h/m × w/m` tokens,
/// `p` then moving on by `max(h, w) / m`; padding counts from 0 as `position_ids` does. `input`
/// and `segment` are the row's columns, `placeholders` each conversation's image token (`None`:
/// no images), `grids` the row's images in order.
pub(crate) fn mrope_positions(
    input: &[i32],
    segment: &[i32],
    placeholders: &[Option<u32>],
    grids: &[([u32; 3], u32)],
    out: &mut [i64],
) -> std::result::Result<(), ImageError> {
    let n = input.len();
    let (t_out, rest) = out.split_at_mut(n);
    let (h_out, w_out) = rest.split_at_mut(n);
    let mut next = grids.iter();
    // the image token of segment `s` (u32::MAX, no token, where it has none: padding too)
    let placeholder = |s: i32| {
        usize::try_from(s)
            .ok()
            .and_then(|s| placeholders.get(s).copied().flatten())
            .unwrap_or(u32::MAX)
    };
    let (mut j, mut seg, mut p) = (0usize, -2i32, 0i64);
    while j < n {
        if segment[j] != seg {
            seg = segment[j];
            p = 0;
        }
        let image = u32::try_from(input[j]) == Ok(placeholder(seg));
        if !image {
            (t_out[j], h_out[j], w_out[j]) = (p, p, p);
            p += 1;
            j += 1;
            continue;
        }
        let Some(&([t, h, w], m)) = next.next() else {
            return Err(ImageError::Positions(format!(
                "an image token at {j} with no image left in the row"
            )));
        };
        let (lh, lw) = ((h / m) as usize, (w / m) as usize);
        let tokens = t as usize * lh * lw;
        let whole = j + tokens <= n
            && segment[j..j + tokens].iter().all(|&s| s == seg)
            && input[j..j + tokens]
                .iter()
                .all(|&t| u32::try_from(t) == Ok(placeholder(seg)));
        if !whole {
            return Err(ImageError::Positions(format!(
                "an image of {tokens} tokens at {j} is not that many image tokens of its \
                 conversation"
            )));
        }
        let mut k = j;
        for ti in 0..i64::from(t) {
            for y in 0..lh as i64 {
                for x in 0..lw as i64 {
                    (t_out[k], h_out[k], w_out[k]) = (p + ti, p + y, p + x);
                    k += 1;
                }
            }
        }
        p += i64::from(h.max(w) / m);
        j += tokens;
    }
    if next.next().is_some() {
        return Err(ImageError::Positions(
            "images left over after the row's image tokens".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overlong_encoding_is_cut_before_the_image_run_that_crosses_the_row() {
        const P: u32 = 9;
        let ids = [1, 2, P, P, P, 3, P, P, 4];
        // the end falls between text tokens, at a run's start or after its end: cut there
        assert_eq!(cut_before_image(&ids, 2, P), 2);
        assert_eq!(cut_before_image(&ids, 5, P), 5);
        assert_eq!(cut_before_image(&ids, 6, P), 6);
        // inside a run: back to its start
        assert_eq!(cut_before_image(&ids, 3, P), 2);
        assert_eq!(cut_before_image(&ids, 4, P), 2);
        assert_eq!(cut_before_image(&ids, 7, P), 6);
        // a run from the first token: nothing is left
        assert_eq!(cut_before_image(&[P, P, P, 1], 2, P), 0);
        // short enough: the whole encoding
        assert_eq!(cut_before_image(&ids, 9, P), 9);
        assert_eq!(cut_before_image(&ids, 20, P), 9);
    }

    #[test]
    fn multimodal_positions_restart_per_conversation_and_lay_images_out_on_their_grid() {
        const P: u32 = 9;
        // conversation 0: a text token, an image of grid (1, 4, 6) merged 2 (2 x 3 tokens), a
        // text token; conversation 1: two text tokens; then padding
        let q = P as i32;
        let mut input: Vec<i32> = vec![5, q, q, q, q, q, q, 6, 7, 8, 0, 0];
        let segment = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, -1, -1];
        let grids = [([1, 4, 6], 2)];
        let mut out = vec![0i64; 3 * input.len()];
        mrope_positions(&input, &segment, &[Some(P), Some(P)], &grids, &mut out).unwrap();
        assert_eq!(out[..12], [0, 1, 1, 1, 1, 1, 1, 4, 0, 1, 0, 1], "temporal");
        assert_eq!(out[12..24], [0, 1, 1, 1, 2, 2, 2, 4, 0, 1, 0, 1], "height");
        assert_eq!(out[24..], [0, 1, 2, 3, 1, 2, 3, 4, 0, 1, 0, 1], "width");
        let check = |input: &[i32], grids: &[([u32; 3], u32)]| {
            let mut out = vec![0i64; 3 * input.len()];
            mrope_positions(input, &segment, &[Some(P), None], grids, &mut out)
        };
        // image tokens with no image left; an image whose tokens stop early or run past its
        // conversation; images left over
        assert!(check(&input, &[]).is_err());
        assert!(check(&input, &[([1, 4, 8], 2)]).is_err());
        input[6] = 1;
        assert!(check(&input, &grids).is_err());
        input[1..6].fill(1);
        let err = check(&input, &grids).unwrap_err().to_string();
        assert!(err.contains("left over"), "{err}");
    }
}
