//! [`DecodedImage`]: one image as the decoded cache keeps it, in RAM ([`super::DecodedCache`])
//! and on disk ([`super::decoded_disk`]); a leaf, so that neither imports the other for it.

/// One decoded image kept by a [`DecodedCache`](super::DecodedCache).
#[derive(Debug)]
pub struct DecodedImage {
    /// Width.
    pub width: u32,
    /// Height.
    pub height: u32,
    /// Channels (1 or 3).
    pub channels: u8,
    /// Packed pixels, row-major.
    pub data: Box<[u8]>,
}
