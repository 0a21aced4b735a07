//! The one error type of the kernels.

/// A kernel failed. Messages say what the input was and what is wrong; the engine adds the
/// sample id, file and stage.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OpsError {
    /// The bytes are not an image this build decodes.
    #[error("not a supported image (JPEG, PNG or WebP): starts with \"{0}\"")]
    UnknownFormat(String),
    /// The header declares more pixels than the limit; nothing was allocated.
    #[error("{width}x{height} image ({} megapixels) is over the limit of {} megapixels", (*width * *height) / 1_000_000, max_pixels / 1_000_000)]
    TooLarge {
        /// Declared width.
        width: u64,
        /// Declared height.
        height: u64,
        /// The limit.
        max_pixels: u64,
    },
    /// The decoder rejected the data.
    #[error("{codec} decode failed: {message}")]
    Decode {
        /// "JPEG", "PNG", "WebP".
        codec: &'static str,
        /// The decoder's message.
        message: String,
    },
    /// An image the pipeline does not handle (12-bit JPEG, 16-bit PNG with alpha, ...).
    #[error("unsupported image: {0}")]
    Unsupported(String),
    /// Parameters that cannot work (an output size of 0, a crop outside the image, ...).
    #[error("invalid parameters: {0}")]
    Invalid(String),
}

/// `Result` with [`OpsError`].
pub type Result<T, E = OpsError> = std::result::Result<T, E>;
