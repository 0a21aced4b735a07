//! [`TransformSpec`]: one stage as data, what the planners of [`super::spec`], image stages and
//! text stages all read (a leaf, so that the planner and the stages it plans do not import each
//! other).

use serde::{Deserialize, Serialize};
use stokehold_format::DType;
use stokehold_ops::OutDType;

/// One stage, by name, with its parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransformSpec {
    /// The stage's name.
    pub name: String,
    /// Its parameters (an object; `null` for none).
    #[serde(default)]
    pub params: serde_json::Value,
}

impl TransformSpec {
    /// This spec as a built-in stage with typed parameters; `None` when its name is no built-in
    /// stage (a Python callable, say); an error message (naming the parameter) when a parameter
    /// is unknown or of the wrong form.
    pub fn stage(&self) -> Option<Result<Stage, BadParams>> {
        fn parse<T: serde::de::DeserializeOwned>(
            params: &serde_json::Value,
        ) -> Result<T, BadParams> {
            let empty = serde_json::Value::Object(serde_json::Map::new());
            let v = if params.is_null() { &empty } else { params };
            serde_path_to_error::deserialize(v).map_err(|e| {
                let path = e.path().to_string();
                let inner = e.inner().to_string();
                BadParams(match (path.as_str(), inner.starts_with("must")) {
                    // (an unknown field's message names it already)
                    ("." | "", _) => inner,
                    _ if inner.starts_with("unknown field") => inner,
                    (_, true) => format!("{path} {inner}"),
                    (_, false) => format!("{path}: {inner}"),
                })
            })
        }
        let p = &self.params;
        Some(match self.name.as_str() {
            "random_resized_crop" => parse(p).map(Stage::RandomResizedCrop),
            "resize" => parse(p).map(Stage::Resize),
            "center_crop" => parse(p).map(Stage::CenterCrop),
            "random_horizontal_flip" => parse(p).map(Stage::RandomHorizontalFlip),
            "color_jitter" => parse(p).map(Stage::ColorJitter),
            "grayscale" => parse::<NoParams>(p).map(|_| Stage::Grayscale),
            "to_tensor" => parse(p).map(Stage::ToTensor),
            "normalize" => parse(p).map(Stage::Normalize),
            "tokenize" => parse(p).map(Stage::Tokenize),
            "qwen2vl" => parse(p).map(Stage::Qwen2Vl),
            "fixed_size" => parse(p).map(Stage::FixedSize),
            "clip" => parse(p).map(Stage::Clip),
            _ => return None,
        })
    }
}

/// Why a built-in stage's parameters cannot be used (naming the parameter): an unknown one, or
/// one of the wrong form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadParams(String);

impl std::ops::Deref for BadParams {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<&str> for BadParams {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl From<BadParams> for String {
    fn from(e: BadParams) -> String {
        e.0
    }
}

/// A built-in stage with its parameters, typed: what [`TransformSpec::stage`] parses a spec of a
/// known name into. Unknown parameters are refused; the defaults are the fields' own.
#[derive(Debug, Clone, PartialEq)]
pub enum Stage {
    /// `random_resized_crop`.
    RandomResizedCrop(RandomResizedCrop),
    /// `resize`: to `[height, width]`, or the shorter side to `n` (then `center_crop`).
    Resize(SizeOnly),
    /// `center_crop` (after `resize(n)`).
    CenterCrop(SizeOnly),
    /// `random_horizontal_flip`.
    RandomHorizontalFlip(Flip),
    /// `color_jitter`.
    ColorJitter(ColorJitter),
    /// `grayscale`.
    Grayscale,
    /// `to_tensor`.
    ToTensor(ToTensor),
    /// `normalize`.
    Normalize(Normalize),
    /// `tokenize`.
    Tokenize(Tokenize),
    /// `qwen2vl`: Qwen2-VL's image processor.
    Qwen2Vl(Qwen2VlParams),
    /// `fixed_size`: the fixed-size processor of SigLIP/CLIP/LLaVA-style encoders.
    FixedSize(FixedSizeParams),
    Clip(ClipParams),
}

/// `stokehold.video.Clip`'s parameters: `frames`, `stride` or `fps` (not both), `start`
/// ("random" or "uniform"), `clips` (1 in a loader), `clock` (the field whose video draws the
/// timestamps of clips aligned across fields: `Clip(..., sync=True)`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClipParams {
    pub frames: u32,
    pub stride: Option<u32>,
    pub fps: Option<f64>,
    pub start: String,
    pub clips: u32,
    pub clock: Option<String>,
}

impl Default for ClipParams {
    fn default() -> Self {
        ClipParams {
            frames: 16,
            stride: None,
            fps: None,
            start: "random".into(),
            clips: 1,
            clock: None,
        }
    }
}

/// No parameters.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct NoParams {}

/// `size`: one side, or `[height, width]`, each 1 to 65535.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// One number: a square of that side (a crop), or the shorter side (`resize`).
    Side(u32),
    /// `[height, width]`.
    HeightWidth(u32, u32),
}

impl Size {
    /// (width, height), a square for one side.
    pub fn width_height(self) -> (u32, u32) {
        match self {
            Size::Side(s) => (s, s),
            Size::HeightWidth(h, w) => (w, h),
        }
    }
}

/// The message of a parameter's value as it was written (`0`, `[224,-1]`).
fn must<E: serde::de::Error>(what: &str, v: &serde_json::Value) -> E {
    E::custom(format!("must be {what}, got {v}"))
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Size, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        let side = |x: &serde_json::Value| {
            x.as_u64()
                .filter(|&n| n > 0 && n <= 65535)
                .map(|n| n as u32)
        };
        let size = match &v {
            serde_json::Value::Number(_) => side(&v).map(Size::Side),
            serde_json::Value::Array(a) if a.len() == 2 => match (side(&a[0]), side(&a[1])) {
                (Some(h), Some(w)) => Some(Size::HeightWidth(h, w)),
                _ => None,
            },
            _ => None,
        };
        size.ok_or_else(|| {
            must(
                "a positive integer (up to 65535) or [height, width] of them",
                &v,
            )
        })
    }
}

/// `[low, high]` with `0 < low <= high`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval(pub f64, pub f64);

impl<'de> Deserialize<'de> for Interval {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Interval, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        match v.as_array().map(|a| a.as_slice()) {
            Some([a, b]) => match (a.as_f64(), b.as_f64()) {
                (Some(x), Some(y)) if x > 0.0 && x <= y => Ok(Interval(x, y)),
                _ => Err(serde::de::Error::custom(
                    "must be [low, high] with 0 < low <= high",
                )),
            },
            _ => Err(must("[low, high]", &v)),
        }
    }
}

/// A number `>= 0`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct NonNegative(pub f64);

impl<'de> Deserialize<'de> for NonNegative {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<NonNegative, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        v.as_f64()
            .filter(|x| *x >= 0.0)
            .map(NonNegative)
            .ok_or_else(|| must("a non-negative number", &v))
    }
}

/// Per channel: one number for all three, or three.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerChannel(pub [f32; 3]);

impl<'de> Deserialize<'de> for PerChannel {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<PerChannel, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        let nums: Option<Vec<f32>> = v
            .as_array()
            .filter(|a| a.len() == 1 || a.len() == 3)
            .and_then(|a| a.iter().map(|x| x.as_f64().map(|f| f as f32)).collect());
        match nums.as_deref() {
            Some([x]) => Ok(PerChannel([*x; 3])),
            Some([r, g, b]) => Ok(PerChannel([*r, *g, *b])),
            _ => Err(must("a list of 1 or 3 numbers", &v)),
        }
    }
}

/// Where the channels go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// Channels first (PyTorch's).
    #[default]
    Chw,
    /// Channels last.
    Hwc,
}

impl<'de> Deserialize<'de> for Layout {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Layout, D::Error> {
        let names = [
            ("CHW", Layout::Chw),
            ("chw", Layout::Chw),
            ("HWC", Layout::Hwc),
            ("hwc", Layout::Hwc),
        ];
        one_of(d, &names, "\"CHW\" or \"HWC\"")
    }
}

/// A parameter that is one of a few names: the value of the name given, or the message saying
/// which names there are (`what`) and what was written.
fn one_of<'de, D: serde::Deserializer<'de>, T: Copy>(
    d: D,
    names: &[(&str, T)],
    what: &str,
) -> Result<T, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    v.as_str()
        .and_then(|s| names.iter().find(|(n, _)| *n == s).map(|&(_, t)| t))
        .ok_or_else(|| must(what, &v))
}

/// `normalize`'s `dtype`: the output types of the image kernels (`stokehold_ops::OutDType`) that
/// the engine has a batch dtype for.
fn float_type<'de, D: serde::Deserializer<'de>>(d: D) -> Result<OutDType, D::Error> {
    let names = [
        ("float32", OutDType::F32),
        ("f32", OutDType::F32),
        ("float16", OutDType::F16),
        ("f16", OutDType::F16),
    ];
    one_of(
        d,
        &names,
        "float32 or float16 (bfloat16 batches need a bf16 dtype in the engine, not there yet)",
    )
}

/// `tokenize`'s `dtype`: the integer [`DType`]s of id arrays.
fn id_type<'de, D: serde::Deserializer<'de>>(d: D) -> Result<DType, D::Error> {
    let names = [
        ("int32", DType::I32),
        ("i32", DType::I32),
        ("int64", DType::I64),
        ("i64", DType::I64),
    ];
    one_of(d, &names, "int32 or int64")
}

/// `random_resized_crop`'s parameters (torchvision's defaults).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RandomResizedCrop {
    /// The output size (required).
    pub size: Option<Size>,
    /// The crop's share of the image's area.
    pub scale: Interval,
    /// The crop's aspect ratio.
    pub ratio: Interval,
}

impl Default for RandomResizedCrop {
    fn default() -> Self {
        RandomResizedCrop {
            size: None,
            scale: Interval(0.08, 1.0),
            ratio: Interval(3.0 / 4.0, 4.0 / 3.0),
        }
    }
}

/// A stage whose one parameter is `size` (required).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SizeOnly {
    /// The size.
    pub size: Option<Size>,
}

/// `random_horizontal_flip`'s parameters.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Flip {
    /// The probability of a flip (above 1: always).
    pub p: NonNegative,
}

impl Default for Flip {
    fn default() -> Self {
        Flip {
            p: NonNegative(0.5),
        }
    }
}

/// `color_jitter`'s parameters: each a maximum relative change (0: none).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ColorJitter {
    /// Brightness.
    pub brightness: NonNegative,
    /// Contrast.
    pub contrast: NonNegative,
    /// Saturation.
    pub saturation: NonNegative,
}

/// `to_tensor`'s parameters.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToTensor {
    /// Where the channels go.
    pub layout: Layout,
}

/// `normalize`'s parameters.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Normalize {
    /// Per-channel mean (required).
    pub mean: Option<PerChannel>,
    /// Per-channel standard deviation (required, positive).
    pub std: Option<PerChannel>,
    /// The float type written (`F32` or `F16`).
    #[serde(deserialize_with = "float_type")]
    pub dtype: OutDType,
    /// Where the channels go.
    pub layout: Layout,
}

/// `qwen2vl`'s parameters (`stokehold.vision.Qwen2VL`'s, with its defaults).
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Qwen2VlParams {
    /// Fewest pixels after the resize.
    pub min_pixels: u64,
    /// Most pixels after the resize.
    pub max_pixels: u64,
    /// A patch's side.
    pub patch_size: u32,
    /// Patches merged into a token, per side.
    pub merge_size: u32,
    /// Frames a patch spans.
    pub temporal_patch_size: u32,
    /// Per-channel mean.
    pub image_mean: [f32; 3],
    /// Per-channel standard deviation.
    pub image_std: [f32; 3],
    /// Decode large JPEGs at a DCT scale first.
    pub dct_scaling: bool,
}

impl Default for Qwen2VlParams {
    fn default() -> Self {
        let d = stokehold_ops::vision::Qwen2Vl::default();
        Qwen2VlParams {
            min_pixels: d.min_pixels,
            max_pixels: d.max_pixels,
            patch_size: d.patch_size,
            merge_size: d.merge_size,
            temporal_patch_size: d.temporal_patch_size,
            image_mean: d.mean,
            image_std: d.std,
            dct_scaling: d.dct_scaling,
        }
    }
}

impl Qwen2VlParams {
    /// The processor, its parameters checked (on a size every valid processor takes).
    pub fn processor(&self) -> stokehold_ops::Result<stokehold_ops::vision::Qwen2Vl> {
        let proc = stokehold_ops::vision::Qwen2Vl {
            min_pixels: self.min_pixels,
            max_pixels: self.max_pixels,
            patch_size: self.patch_size,
            merge_size: self.merge_size,
            temporal_patch_size: self.temporal_patch_size,
            mean: self.image_mean,
            std: self.image_std,
            dct_scaling: self.dct_scaling,
        };
        proc.grid(1024, 1024)?;
        Ok(proc)
    }
}

/// `fixed_size`'s parameters (`stokehold.vision.FixedSize`'s).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixedSizeParams {
    /// The output side (required).
    pub size: u32,
    /// Pad to a square of this RGB colour first.
    #[serde(default)]
    pub pad: Option<[u8; 3]>,
    /// Per-channel mean.
    #[serde(default = "half")]
    pub image_mean: [f32; 3],
    /// Per-channel standard deviation.
    #[serde(default = "half")]
    pub image_std: [f32; 3],
}

fn half() -> [f32; 3] {
    [0.5; 3]
}

impl FixedSizeParams {
    /// The processor, its parameters checked.
    pub fn processor(&self) -> stokehold_ops::Result<stokehold_ops::vision::FixedSize> {
        let invalid = |m: String| Err(stokehold_ops::OpsError::Invalid(m));
        if self.size == 0 || self.size > 8192 {
            return invalid(format!("size {} is not from 1 to 8192", self.size));
        }
        if self.image_std.iter().any(|&s| !(s > 0.0 && s.is_finite())) {
            return invalid(format!("image_std {:?} must be positive", self.image_std));
        }
        Ok(stokehold_ops::vision::FixedSize {
            size: self.size,
            pad: self.pad,
            mean: self.image_mean,
            std: self.image_std,
        })
    }
}

/// `tokenize`'s parameters.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Tokenize {
    /// The `tokenizer.json` path (required).
    pub tokenizer: Option<String>,
    /// Truncate and pad to this many ids (1 to 2^24); `None`: each sample its own length.
    pub max_length: Option<u64>,
    /// The id type (`I32` or `I64`).
    #[serde(deserialize_with = "id_type")]
    pub dtype: DType,
    /// The padding id (default: the vocabulary's `<pad>` / `[PAD]` / `<|pad|>`, else 0).
    pub pad_id: Option<u32>,
    /// A token put first.
    pub bos: Option<String>,
    /// A token put last.
    pub eos: Option<String>,
}

impl Default for Normalize {
    fn default() -> Self {
        Normalize {
            mean: None,
            std: None,
            dtype: OutDType::F32,
            layout: Layout::Chw,
        }
    }
}

impl Default for Tokenize {
    fn default() -> Self {
        Tokenize {
            tokenizer: None,
            max_length: None,
            dtype: DType::I32,
            pad_id: None,
            bos: None,
            eos: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, params: serde_json::Value) -> Result<Stage, BadParams> {
        TransformSpec {
            name: name.into(),
            params,
        }
        .stage()
        .expect("a built-in stage")
    }

    #[test]
    fn parameters_are_typed_with_their_defaults_and_unknown_ones_refused() {
        let s = spec("random_resized_crop", serde_json::json!({"size": [3, 4]})).unwrap();
        assert_eq!(
            s,
            Stage::RandomResizedCrop(RandomResizedCrop {
                size: Some(Size::HeightWidth(3, 4)),
                ..RandomResizedCrop::default()
            })
        );
        assert_eq!(Size::HeightWidth(3, 4).width_height(), (4, 3));
        assert_eq!(
            spec("random_horizontal_flip", serde_json::Value::Null).unwrap(),
            Stage::RandomHorizontalFlip(Flip {
                p: NonNegative(0.5)
            })
        );
        let e = spec(
            "random_resized_crop",
            serde_json::json!({"size": 8, "scal": [0.1, 1]}),
        )
        .unwrap_err();
        assert!(
            e.contains("unknown field `scal`") && e.contains("`scale`"),
            "{e}"
        );
        let e = spec("color_jitter", serde_json::json!({"contrast": -1})).unwrap_err();
        assert_eq!(e, "contrast must be a non-negative number, got -1");
        let e = spec("normalize", serde_json::json!({"mean": [1, 2]})).unwrap_err();
        assert_eq!(e, "mean must be a list of 1 or 3 numbers, got [1,2]");
        let e = spec("to_tensor", serde_json::json!({"layout": "NCHW"})).unwrap_err();
        assert_eq!(e, "layout must be \"CHW\" or \"HWC\", got \"NCHW\"");
        let e = spec("tokenize", serde_json::json!({"pad_id": "x"})).unwrap_err();
        assert!(e.starts_with("pad_id: invalid type"), "{e}");
        assert!(spec("grayscale", serde_json::json!({"x": 1})).is_err());
        let custom = TransformSpec {
            name: "python".into(),
            params: serde_json::json!({"index": 0}),
        };
        assert!(custom.stage().is_none(), "not a built-in stage");
    }
}
