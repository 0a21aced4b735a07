//! FFmpeg's libavcodec, libavutil and libswscale, opened at run time (dlopen) as torchcodec
//! does: nothing links against FFmpeg, so the wheel imports and every non-video feature works on a
//! machine without it, and one build serves FFmpeg 4, 5, 6 and 7 (whichever the system or a
//! conda environment has).
//!
//! Struct layouts differ between FFmpeg majors, so this module touches only the prefixes of
//! structs that have been the same in every major it loads (FFmpeg 4.0 to 7.1, on 64-bit
//! targets), each named with its offset below and checked against the loaded libraries'
//! versions; everything else goes through functions (`avcodec_parameters_to_context`) and the
//! AVOptions API (`av_opt_set_int(ctx, "threads", ...)`, `av_opt_get_int(ctx, "colorspace")`).

use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

/// The FFmpeg releases tried, newest first: (release, libavcodec, libavutil, libswscale) sonames'
/// majors.
const RELEASES: [(u32, u32, u32, u32); 4] = [
    (7, 61, 59, 8),
    (6, 60, 58, 7),
    (5, 59, 57, 6),
    (4, 58, 56, 5),
];

/// `AVMEDIA_TYPE_VIDEO` (libavutil/avutil.h; 0 in every major).
pub const AVMEDIA_TYPE_VIDEO: c_int = 0;
/// `AV_PKT_FLAG_KEY`.
pub const AV_PKT_FLAG_KEY: c_int = 1;
/// `AV_PIX_FMT_RGB24` (libavutil/pixfmt.h: 2 in every major; the enum only ever grew at its end).
pub const AV_PIX_FMT_RGB24: c_int = 2;
/// `AV_INPUT_BUFFER_PADDING_SIZE`: 64 since FFmpeg 4.0 (bytes readable past a buffer's end).
pub const PADDING: usize = 64;
/// `AVERROR(EAGAIN)`.
pub const EAGAIN: c_int = -11;
/// `AVERROR_EOF` (`FFERRTAG('E','O','F',' ')`).
pub const AVERROR_EOF: c_int = -0x2046_4F45;
/// `AVCOL_RANGE_UNSPECIFIED`, `AVCOL_RANGE_JPEG` (full range).
pub const AVCOL_RANGE_UNSPECIFIED: i64 = 0;
/// Full range.
pub const AVCOL_RANGE_JPEG: i64 = 2;
/// `AVDISCARD_DEFAULT` (libavcodec/defs.h, avcodec.h before 5.0; the same in every major):
/// decode every frame.
pub const AVDISCARD_DEFAULT: i64 = 0;
/// `AVDISCARD_NONREF`: skip the frames no other frame refers to (H.264's and H.265's
/// non-reference pictures; a decoder that cannot tell decodes them anyway).
pub const AVDISCARD_NONREF: i64 = 8;

// Byte offsets in layout-stable prefixes (x86_64 and aarch64 Linux: 8-byte pointers, 4-byte int).
//
// AVFrame (libavutil/frame.h), FFmpeg 4.0-7.1 (libavutil 56-59): `uint8_t *data[8]` at 0,
// `int linesize[8]` at 64, `uint8_t **extended_data` at 96, `int width, height, nb_samples,
// format` at 104-116, `int key_frame` at 120 (deprecated in 6.1, present until libavutil 60),
// `enum AVPictureType pict_type` at 124, `AVRational sample_aspect_ratio` at 128, `int64_t pts`
// at 136. The first fields are the ones FFmpeg documents as its stable frame interface; `pts`
// follows fields that no major in range removed (FF_API_FRAME_KEY is `LIBAVUTIL_VERSION_MAJOR <
// 60`), which is why libavutil 60 (FFmpeg 8) is not loaded until this table says so.
/// `AVFrame.data`.
pub const FRAME_DATA: usize = 0;
/// `AVFrame.linesize`.
pub const FRAME_LINESIZE: usize = 64;
/// `AVFrame.width`.
pub const FRAME_WIDTH: usize = 104;
/// `AVFrame.height`.
pub const FRAME_HEIGHT: usize = 108;
/// `AVFrame.format`.
pub const FRAME_FORMAT: usize = 116;
/// `AVFrame.pts`.
pub const FRAME_PTS: usize = 136;
// AVPacket (libavcodec/packet.h, avcodec.h before 4.4), FFmpeg 4.0-7.1: `AVBufferRef *buf` at 0,
// `int64_t pts` at 8, `int64_t dts` at 16, `uint8_t *data` at 24, `int size` at 32,
// `int stream_index` at 36, `int flags` at 40. sizeof(AVPacket) changed (it is allocated by
// av_packet_alloc, never by us); this prefix has not.
/// `AVPacket.pts`.
pub const PACKET_PTS: usize = 8;
/// `AVPacket.dts`.
pub const PACKET_DTS: usize = 16;
/// `AVPacket.data`.
pub const PACKET_DATA: usize = 24;
/// `AVPacket.flags`.
pub const PACKET_FLAGS: usize = 40;
// AVCodecParameters (libavcodec/codec_par.h), FFmpeg 4.0-7.1: `enum AVMediaType codec_type` at 0,
// `enum AVCodecID codec_id` at 4, `uint32_t codec_tag` at 8, `uint8_t *extradata` at 16,
// `int extradata_size` at 24. Allocated by avcodec_parameters_alloc (zeroed, defaults set) and
// copied into the codec context by avcodec_parameters_to_context; the extradata is av_malloc'd
// with padding, so avcodec_parameters_free frees it.
/// `AVCodecParameters.codec_type`.
pub const PAR_CODEC_TYPE: usize = 0;
/// `AVCodecParameters.codec_id`.
pub const PAR_CODEC_ID: usize = 4;
/// `AVCodecParameters.extradata`.
pub const PAR_EXTRADATA: usize = 16;
/// `AVCodecParameters.extradata_size`.
pub const PAR_EXTRADATA_SIZE: usize = 24;
// AVCodecDescriptor (libavcodec/codec_desc.h): `enum AVCodecID id` is its first field in every
// major.

type Ptr = *mut c_void;

/// The FFmpeg functions stokehold calls, from one release's three libraries.
#[derive(Debug)]
#[allow(missing_docs)] // the fields are FFmpeg's functions, named as FFmpeg names them
pub struct Ffmpeg {
    /// Which release (4 to 7) and where: for messages.
    pub describe: String,
    // avutil
    pub av_frame_alloc: unsafe extern "C" fn() -> Ptr,
    pub av_frame_free: unsafe extern "C" fn(*mut Ptr),
    pub av_frame_unref: unsafe extern "C" fn(Ptr),
    pub av_mallocz: unsafe extern "C" fn(usize) -> Ptr,
    pub av_opt_set_int: unsafe extern "C" fn(Ptr, *const c_char, i64, c_int) -> c_int,
    pub av_opt_get_int: unsafe extern "C" fn(Ptr, *const c_char, c_int, *mut i64) -> c_int,
    pub av_strerror: unsafe extern "C" fn(c_int, *mut c_char, usize) -> c_int,
    // avcodec
    pub avcodec_descriptor_get_by_name: unsafe extern "C" fn(*const c_char) -> *const c_void,
    pub avcodec_find_decoder: unsafe extern "C" fn(c_int) -> *const c_void,
    pub avcodec_alloc_context3: unsafe extern "C" fn(*const c_void) -> Ptr,
    pub avcodec_free_context: unsafe extern "C" fn(*mut Ptr),
    pub avcodec_parameters_alloc: unsafe extern "C" fn() -> Ptr,
    pub avcodec_parameters_free: unsafe extern "C" fn(*mut Ptr),
    pub avcodec_parameters_to_context: unsafe extern "C" fn(Ptr, *const c_void) -> c_int,
    pub avcodec_open2: unsafe extern "C" fn(Ptr, *const c_void, *mut Ptr) -> c_int,
    pub avcodec_send_packet: unsafe extern "C" fn(Ptr, *const c_void) -> c_int,
    pub avcodec_receive_frame: unsafe extern "C" fn(Ptr, Ptr) -> c_int,
    pub avcodec_flush_buffers: unsafe extern "C" fn(Ptr),
    pub av_packet_alloc: unsafe extern "C" fn() -> Ptr,
    pub av_packet_free: unsafe extern "C" fn(*mut Ptr),
    pub av_new_packet: unsafe extern "C" fn(Ptr, c_int) -> c_int,
    pub av_packet_unref: unsafe extern "C" fn(Ptr),
    // swscale
    pub sws_get_context: unsafe extern "C" fn(
        c_int,
        c_int,
        c_int,
        c_int,
        c_int,
        c_int,
        c_int,
        Ptr,
        Ptr,
        *const f64,
    ) -> Ptr,
    pub sws_free_context: unsafe extern "C" fn(Ptr),
    pub sws_get_coefficients: unsafe extern "C" fn(c_int) -> *const c_int,
    pub sws_get_colorspace_details: unsafe extern "C" fn(
        Ptr,
        *mut *mut c_int,
        *mut c_int,
        *mut *mut c_int,
        *mut c_int,
        *mut c_int,
        *mut c_int,
        *mut c_int,
    ) -> c_int,
    pub sws_set_colorspace_details: unsafe extern "C" fn(
        Ptr,
        *const c_int,
        c_int,
        *const c_int,
        c_int,
        c_int,
        c_int,
        c_int,
    ) -> c_int,
    pub sws_scale: unsafe extern "C" fn(
        Ptr,
        *const *const u8,
        *const c_int,
        c_int,
        c_int,
        *const *mut u8,
        *const c_int,
    ) -> c_int,
    // the libraries stay open for the process's life (the function pointers above point into them)
    _libs: [libloading::Library; 3],
}

/// Why FFmpeg could not be used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FfmpegError {
    /// No FFmpeg 4 to 7 found: what was tried (each release, its sonames and the loader's
    /// error), and how to install it.
    #[error(
        "FFmpeg's libraries (libavcodec, libavutil, libswscale of FFmpeg 4 to 7) were not found; \
         decoding video needs them: install FFmpeg with `apt install ffmpeg` (Debian, Ubuntu), \
         `dnf install ffmpeg-free` (Fedora), `conda install -c conda-forge ffmpeg` (then activate \
         the environment), or name their folder in STOKEHOLD_FFMPEG_DIR. Tried: {}",
        tried.join("; ")
    )]
    NotFound {
        /// Per release tried, its libraries and why they did not load.
        tried: Vec<String>,
    },
    /// A function of FFmpeg's public API missing from the libraries found.
    #[error("FFmpeg {release}: {symbol}: {detail}")]
    Symbol {
        /// The release the libraries' sonames say.
        release: u32,
        /// The function.
        symbol: &'static str,
        /// The loader's error.
        detail: String,
    },
    /// Libraries of versions whose struct layouts this build does not know.
    #[error(
        "FFmpeg {release}: libavutil {avutil}, libavcodec {avcodec}: not a version this build \
         knows the layouts of (libavutil 56-59, libavcodec 58-61)"
    )]
    Version {
        /// The release the libraries' sonames say.
        release: u32,
        /// libavutil's major version.
        avutil: u32,
        /// libavcodec's major version.
        avcodec: u32,
    },
}

static FFMPEG: OnceLock<Result<Ffmpeg, FfmpegError>> = OnceLock::new();

/// FFmpeg, opened on first use; the error says what was tried and how to install it.
pub fn ffmpeg() -> Result<&'static Ffmpeg, FfmpegError> {
    FFMPEG.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// Where to look for a library: only `$STOKEHOLD_FFMPEG_DIR/` when that is set; otherwise the
/// plain soname (the loader's search path: LD_LIBRARY_PATH, the system's), then an active conda
/// environment's lib/.
fn candidates(name: &str, major: u32) -> Vec<String> {
    let soname = format!("lib{name}.so.{major}");
    if let Some(dir) = std::env::var_os("STOKEHOLD_FFMPEG_DIR") {
        return vec![format!("{}/{soname}", dir.to_string_lossy())];
    }
    let mut v = vec![soname.clone()];
    if let Some(prefix) = std::env::var_os("CONDA_PREFIX") {
        v.push(format!("{}/lib/{soname}", prefix.to_string_lossy()));
    }
    v
}

/// The library `name` of major version `major`, or the loader's last error (as text: the
/// candidates' errors are reported, not matched on).
fn open(name: &str, major: u32) -> Result<libloading::Library, libloading::Error> {
    let mut last = None;
    for c in candidates(name, major) {
        // SAFETY: loading FFmpeg's library runs its initialisers, which only set up static
        // tables (FFmpeg has no global constructors with side effects beyond that).
        match unsafe { libloading::Library::new(&c) } {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or(libloading::Error::DlOpenUnknown))
}

fn load() -> Result<Ffmpeg, FfmpegError> {
    let mut tried = Vec::new();
    for (release, codec, util, scale) in RELEASES {
        let libs = (|| -> Result<_, libloading::Error> {
            let util_l = open("avutil", util)?;
            let codec_l = open("avcodec", codec)?;
            let scale_l = open("swscale", scale)?;
            Ok([util_l, codec_l, scale_l])
        })();
        match libs {
            Ok(libs) => return bind(release, libs),
            Err(e) => tried.push(format!(
                "FFmpeg {release} (libavcodec.so.{codec}, libavutil.so.{util}, libswscale.so.{scale}): {e}"
            )),
        }
    }
    Err(FfmpegError::NotFound { tried })
}

fn bind(release: u32, libs: [libloading::Library; 3]) -> Result<Ffmpeg, FfmpegError> {
    let [util, codec, scale] = &libs;
    macro_rules! sym {
        ($lib:expr, $name:literal) => {{
            // SAFETY: the symbol is the C function of that name in FFmpeg's public API, whose
            // signature (the field's type this is assigned to) has not changed in FFmpeg 4-7.
            // The pointer stays valid as long as the library, which the returned struct owns
            // and the static keeps for the process's life.
            let s: libloading::Symbol<'_, _> = unsafe { $lib.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| FfmpegError::Symbol {
                    release,
                    symbol: $name,
                    detail: e.to_string(),
                })?;
            *s
        }};
    }
    // the versions the offsets above were checked against
    let avutil_version: unsafe extern "C" fn() -> u32 = sym!(util, "avutil_version");
    let avcodec_version: unsafe extern "C" fn() -> u32 = sym!(codec, "avcodec_version");
    // SAFETY: version functions take nothing and return a constant.
    let (uv, cv) = unsafe { (avutil_version(), avcodec_version()) };
    if !(56..=59).contains(&(uv >> 16)) || !(58..=61).contains(&(cv >> 16)) {
        return Err(FfmpegError::Version {
            release,
            avutil: uv >> 16,
            avcodec: cv >> 16,
        });
    }
    Ok(Ffmpeg {
        describe: format!(
            "FFmpeg {release} (libavcodec {}.{}.{})",
            cv >> 16,
            (cv >> 8) & 0xff,
            cv & 0xff
        ),
        av_frame_alloc: sym!(util, "av_frame_alloc"),
        av_frame_free: sym!(util, "av_frame_free"),
        av_frame_unref: sym!(util, "av_frame_unref"),
        av_mallocz: sym!(util, "av_mallocz"),
        av_opt_set_int: sym!(util, "av_opt_set_int"),
        av_opt_get_int: sym!(util, "av_opt_get_int"),
        av_strerror: sym!(util, "av_strerror"),
        avcodec_descriptor_get_by_name: sym!(codec, "avcodec_descriptor_get_by_name"),
        avcodec_find_decoder: sym!(codec, "avcodec_find_decoder"),
        avcodec_alloc_context3: sym!(codec, "avcodec_alloc_context3"),
        avcodec_free_context: sym!(codec, "avcodec_free_context"),
        avcodec_parameters_alloc: sym!(codec, "avcodec_parameters_alloc"),
        avcodec_parameters_free: sym!(codec, "avcodec_parameters_free"),
        avcodec_parameters_to_context: sym!(codec, "avcodec_parameters_to_context"),
        avcodec_open2: sym!(codec, "avcodec_open2"),
        avcodec_send_packet: sym!(codec, "avcodec_send_packet"),
        avcodec_receive_frame: sym!(codec, "avcodec_receive_frame"),
        avcodec_flush_buffers: sym!(codec, "avcodec_flush_buffers"),
        av_packet_alloc: sym!(codec, "av_packet_alloc"),
        av_packet_free: sym!(codec, "av_packet_free"),
        av_new_packet: sym!(codec, "av_new_packet"),
        av_packet_unref: sym!(codec, "av_packet_unref"),
        sws_get_context: sym!(scale, "sws_getContext"),
        sws_free_context: sym!(scale, "sws_freeContext"),
        sws_get_coefficients: sym!(scale, "sws_getCoefficients"),
        sws_get_colorspace_details: sym!(scale, "sws_getColorspaceDetails"),
        sws_set_colorspace_details: sym!(scale, "sws_setColorspaceDetails"),
        sws_scale: sym!(scale, "sws_scale"),
        _libs: libs,
    })
}

impl Ffmpeg {
    /// FFmpeg's message for an error code.
    pub fn error_string(&self, code: c_int) -> String {
        let mut buf = [0 as c_char; 128];
        // SAFETY: av_strerror writes at most `buf.len()` bytes, NUL-terminated, into `buf`.
        unsafe { (self.av_strerror)(code, buf.as_mut_ptr(), buf.len()) };
        // SAFETY: `buf` is NUL-terminated (av_strerror always terminates, and buf was zeroed).
        unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }
}

/// Reads a `T` at `offset` bytes into the struct at `p`.
///
/// # Safety
/// `p` must point to a live struct with a `T` at `offset` (one of the offsets above).
pub unsafe fn read_at<T: Copy>(p: *const c_void, offset: usize) -> T {
    // SAFETY: the caller's promise; unaligned read for safety against odd offsets.
    unsafe { p.cast::<u8>().add(offset).cast::<T>().read_unaligned() }
}

/// Writes a `T` at `offset` bytes into the struct at `p`.
///
/// # Safety
/// As [`read_at`], and the field must be one the caller may set.
pub unsafe fn write_at<T: Copy>(p: *mut c_void, offset: usize, v: T) {
    // SAFETY: the caller's promise.
    unsafe { p.cast::<u8>().add(offset).cast::<T>().write_unaligned(v) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn without_ffmpeg_the_error_says_how_to_install_it() {
        // SAFETY: set before any thread of this test binary reads the environment for FFmpeg
        // (only this test calls `load`; the others use no FFmpeg).
        unsafe { std::env::set_var("STOKEHOLD_FFMPEG_DIR", "/nonexistent/ffmpeg") };
        let e = super::load().unwrap_err();
        assert!(matches!(e, super::FfmpegError::NotFound { .. }), "{e}");
        let e = e.to_string();
        // SAFETY: as above.
        unsafe { std::env::remove_var("STOKEHOLD_FFMPEG_DIR") };
        assert!(
            e.contains("apt install ffmpeg") && e.contains("conda"),
            "{e}"
        );
        assert!(e.contains("/nonexistent/ffmpeg/libavutil.so.59"), "{e}");
    }
}
