//! Encoding a pprof message, gzipped as Go's `net/http/pprof` serves it or raw.

use std::io::Write;

use prost::Message;

use crate::proto;

/// Encodes `profile` to protobuf bytes, gzipped when `gzip` is true (what `go tool pprof` and
/// every pprof endpoint expect).
pub fn encode(profile: &proto::Profile, gzip: bool) -> Vec<u8> {
    let raw = profile.encode_to_vec();
    if !gzip {
        return raw;
    }
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(raw.len() / 3),
        flate2::Compression::fast(),
    );
    encoder
        .write_all(&raw)
        .expect("writing to a Vec cannot fail");
    encoder.finish().expect("writing to a Vec cannot fail")
}
