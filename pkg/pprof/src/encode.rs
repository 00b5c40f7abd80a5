//! Encoding a pprof message, gzipped as Go's `net/http/pprof` serves it or raw.

use std::sync::Mutex;

use flate2::{Compress, Compression, Crc, FlushCompress, Status};
use prost::Message;

use crate::proto;

/// Deflate states kept between encodings: making one allocates and clears a few hundred KiB,
/// a fifth of what gzipping an agent's 10-second profile cost.
static COMPRESSORS: Mutex<Vec<Compress>> = Mutex::new(Vec::new());
/// Deflate states kept at most (one per encoding at the same time; more are made and dropped).
const MAX_POOLED: usize = 4;

/// RFC 1952's member header as `flate2`'s encoder writes it at its fastest level: deflate, no
/// flags, no time, "fastest" (4), operating system unknown (255).
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 255];

/// Encodes `profile` to protobuf bytes, gzipped when `gzip` is true (what `go tool pprof` and
/// every pprof endpoint expect).
pub fn encode(profile: &proto::Profile, gzip: bool) -> Vec<u8> {
    let raw = profile.encode_to_vec();
    if !gzip {
        return raw;
    }
    gzip_member(&raw)
}

/// `raw` as one gzip member, compressed at the fastest level.
fn gzip_member(raw: &[u8]) -> Vec<u8> {
    let pooled = COMPRESSORS.lock().unwrap_or_else(|e| e.into_inner()).pop();
    let mut compress = match pooled {
        Some(mut c) => {
            c.reset();
            c
        }
        None => Compress::new(Compression::fast(), false),
    };
    let mut out = Vec::with_capacity(GZIP_HEADER.len() + raw.len() / 3 + 64);
    out.extend_from_slice(&GZIP_HEADER);
    loop {
        if out.capacity() - out.len() < 1024 {
            out.reserve(out.capacity());
        }
        let consumed = usize::try_from(compress.total_in()).expect("in memory");
        let status = compress
            .compress_vec(&raw[consumed..], &mut out, FlushCompress::Finish)
            .expect("deflating bytes in memory cannot fail");
        if status == Status::StreamEnd {
            break;
        }
    }
    let mut crc = Crc::new();
    crc.update(raw);
    out.extend_from_slice(&crc.sum().to_le_bytes());
    // ISIZE: the length modulo 2^32.
    out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
    let mut pool = COMPRESSORS.lock().unwrap_or_else(|e| e.into_inner());
    if pool.len() < MAX_POOLED {
        pool.push(compress);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn gunzip(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .read_to_end(&mut out)
            .expect("a valid gzip member");
        out
    }

    #[test]
    fn gzipped_bytes_come_back_whole_with_a_pooled_compressor_too() {
        // Bytes that compress poorly, so the output outgrows its first guess.
        let mut state = 1u64;
        let noisy: Vec<u8> = (0..300_000)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                (state >> 56) as u8
            })
            .collect();
        let repetitive = b"parca_pprof::encode ".repeat(10_000);
        for raw in [&noisy[..], &repetitive[..], b"", &noisy[..]] {
            let first = gzip_member(raw);
            let again = gzip_member(raw);
            assert_eq!(first, again, "a reused compressor starts afresh");
            assert_eq!(gunzip(&first), raw);
        }
    }

    #[test]
    fn an_encoded_profile_decodes_to_itself() {
        let profile = proto::Profile {
            string_table: vec![String::new(), "samples".into(), "count".into()],
            sample_type: vec![proto::ValueType { r#type: 1, unit: 2 }],
            ..Default::default()
        };
        let gz = encode(&profile, true);
        assert_eq!(&gz[..2], &[0x1f, 0x8b]);
        assert_eq!(proto::Profile::decode(&gunzip(&gz)[..]).unwrap(), profile);
        assert_eq!(encode(&profile, false), profile.encode_to_vec());
    }
}
