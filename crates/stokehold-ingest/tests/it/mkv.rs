//! The Matroska/WebM frame index against FFmpeg's own demuxer: videos made by the `ffmpeg`
//! command (H.264 in .mkv, VP9 in .webm), every packet's time, keyframe flag, size and bytes (a
//! CRC-32 of them) as `ffprobe -show_packets` reports them, and the extradata FFmpeg gives its
//! decoder.

use std::path::Path;
use std::process::Command;

use stokehold_ingest::frames::ContainerLimits;
use stokehold_ingest::mkv::{MkvError, index_file, video_value};
use stokehold_ingest::mp4::index_video_file;

use super::mp4::{ffprobe_extradata, lavfi};

/// `(pts, size, key, CRC-32 of the packet's bytes)` of every video packet, in file order, and
/// the stream's time base, as ffprobe gives them.
fn ffprobe_packets(path: &Path) -> (Vec<(i64, u64, bool, String)>, String) {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0", "-show_packets"])
        .args(["-show_data_hash", "CRC32", "-show_entries"])
        .args([
            "packet=pts,size,flags,data_hash:stream=time_base",
            "-of",
            "json",
        ])
        .arg(path)
        .output()
        .expect("the ffprobe command");
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let num = |p: &serde_json::Value, k: &str| -> i64 {
        match &p[k] {
            serde_json::Value::String(s) => s.parse().unwrap(),
            serde_json::Value::Number(n) => n.as_i64().unwrap(),
            other => panic!("{k}: {other}"),
        }
    };
    let packets = v["packets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                num(p, "pts"),
                num(p, "size") as u64,
                p["flags"].as_str().unwrap().starts_with('K'),
                p["data_hash"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let tb = v["streams"][0]["time_base"].as_str().unwrap().to_owned();
    (packets, tb)
}

#[test]
fn the_matroska_frame_index_is_ffmpegs_packet_table() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: &[(&str, &[&str])] = &[
        // H.264 with B-frames (presentation order differs from decode order)
        ("h264-b.mkv", &["-c:v", "libx264", "-pix_fmt", "yuv420p"]),
        // a short keyframe interval, no B-frames, an NTSC rate
        (
            "h264-g8.mkv",
            &[
                "-c:v",
                "libx264",
                "-g",
                "8",
                "-bf",
                "0",
                "-r",
                "30000/1001",
                "-pix_fmt",
                "yuv420p",
            ],
        ),
        // VP9 in WebM (alt-ref frames: invisible packets FFmpeg still gives)
        (
            "vp9.webm",
            &[
                "-c:v",
                "libvpx-vp9",
                "-g",
                "10",
                "-deadline",
                "realtime",
                "-cpu-used",
                "8",
                "-b:v",
                "200k",
            ],
        ),
    ];
    for (name, codec) in cases {
        let path = tmp.path().join(name);
        lavfi("testsrc=duration=3:size=160x120:rate=25", codec, &path);
        let index = index_file(&path, &ContainerLimits::default()).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let (want, time_base) = ffprobe_packets(&path);
        assert_eq!(time_base, format!("1/{}", index.timescale), "{name}");
        assert_eq!((index.width, index.height), (160, 120), "{name}");
        assert_eq!(index.frames.len(), want.len(), "{name}");
        for (i, (f, w)) in index.frames.iter().zip(&want).enumerate() {
            let packet = &bytes[f.offset as usize..(f.offset + u64::from(f.size)) as usize];
            let crc = format!("CRC32:{:08x}", crc32fast::hash(packet));
            assert_eq!(
                (f.pts, u64::from(f.size), f.key, crc),
                w.clone(),
                "{name}: frame {i}"
            );
            assert!(f.dts <= f.pts, "{name}: frame {i}");
        }
        // decode times ascend; every frame lasts until the next one shown
        assert!(
            index.frames.windows(2).all(|w| w[0].dts < w[1].dts),
            "{name}"
        );
        assert!(index.frames.iter().all(|f| f.duration > 0), "{name}");
        // the extradata is what FFmpeg's demuxer gives its decoder (none for VP9)
        let (size, hash) = ffprobe_extradata(&path);
        assert_eq!(index.extradata.len(), size, "{name}");
        if size > 0 {
            let crc = format!("CRC32:{:08x}", crc32fast::hash(&index.extradata));
            assert_eq!(Some(crc), hash, "{name}");
        }
        let codec = if name.ends_with(".webm") {
            "vp09"
        } else {
            "avc1"
        };
        assert_eq!(index.codec.to_string(), codec, "{name}");
        assert!(index.frames[0].key, "{name}");
        // the same index through the reader that tells containers apart by content, and in a
        // packed value (container code 2)
        assert_eq!(
            index_video_file(&path, &ContainerLimits::default()).unwrap(),
            index
        );
        let value = video_value(&bytes, &ContainerLimits::default()).unwrap();
        let parsed = stokehold_format::video::parse_video(&value).unwrap();
        assert_eq!(parsed.index.container, 2);
        assert_eq!(parsed.index, {
            let mut v = index.to_video_index();
            v.container = 2;
            v
        });
        assert!(
            parsed.intervals.is_some(),
            "{name}: blocks lie in keyframe order"
        );
    }
}

#[test]
fn a_cut_or_audio_only_matroska_file_is_named_not_indexed() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("v.mkv");
    lavfi(
        "testsrc=duration=1:size=64x48:rate=10",
        &["-c:v", "libx264"],
        &path,
    );
    let bytes = std::fs::read(&path).unwrap();
    // cut inside its clusters: the element that passes the end is named with its offset
    let cut = tmp.path().join("cut.mkv");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let e = index_file(&cut, &ContainerLimits::default()).unwrap_err();
    assert!(
        matches!(e, MkvError::Invalid { .. }) && e.to_string().contains("at byte"),
        "{e}"
    );
    // audio only: no video track
    let audio = tmp.path().join("a.mka");
    lavfi(
        "sine=duration=1",
        &["-c:a", "flac", "-f", "matroska"],
        &audio,
    );
    let e = index_file(&audio, &ContainerLimits::default()).unwrap_err();
    assert!(
        matches!(e, MkvError::Unsupported(ref m) if m.contains("no video track")),
        "{e}"
    );
    // more frames than the limit: refused
    let few = ContainerLimits {
        max_frames: 3,
        ..ContainerLimits::default()
    };
    assert!(matches!(
        index_file(&path, &few),
        Err(MkvError::TooLarge { .. })
    ));
}
