//! The binary CPU format of gperftools, Go before 1.9 and Google's Java profiler.
//!
//! A sequence of machine words (32 or 64 bits, either byte order): a header
//! `0, 3, kind, period_µs, 0` (`kind` 0 for C++ and Go, 1 for Java), then records
//! `count, n, pc_1 … pc_n`, ended by the record `0, 1, 0`. After it, C++ and Go profiles have the
//! process's memory map (`mappings.rs`), Java ones the names of their "addresses" (`java.rs`).
//! Conversion follows google/pprof's `parseCPU`: for C++ and Go, callers' return addresses move
//! back by one into the call instruction, the signal-handler frame that sits second in (almost)
//! every stack goes, and a leaf the unwinder recorded twice is dropped.

use rustc_hash::FxHashMap;

use super::java;
use super::mappings;
use super::model::{Format, LegacyProfile, ValueType, malformed};
use super::text::Lines;
use crate::Error;

/// Reads one word; the four variants are tried in this order to detect the word format.
type Word = fn(&[u8]) -> Option<(u64, &[u8])>;

const WORDS: [Word; 4] = [
    |b| {
        Some((
            u64::from(u32::from_le_bytes(b.get(..4)?.try_into().ok()?)),
            &b[4..],
        ))
    },
    |b| {
        Some((
            u64::from(u32::from_be_bytes(b.get(..4)?.try_into().ok()?)),
            &b[4..],
        ))
    },
    |b| Some((u64::from_le_bytes(b.get(..8)?.try_into().ok()?), &b[8..])),
    |b| Some((u64::from_be_bytes(b.get(..8)?.try_into().ok()?), &b[8..])),
];

/// `Ok(None)` when `bytes` do not start with a CPU profile header in any word format.
pub(super) fn parse(bytes: &[u8], limit_bytes: usize) -> Result<Option<LegacyProfile>, Error> {
    for word in WORDS {
        let mut rest = bytes;
        let mut header = [0u64; 5];
        let mut complete = true;
        for slot in &mut header {
            match word(rest) {
                Some((value, tail)) => {
                    *slot = value;
                    rest = tail;
                }
                None => complete = false,
            }
        }
        if !complete || header[0] != 0 || header[1] != 3 || header[3] == 0 || header[4] != 0 {
            continue;
        }
        let period_us = header[3] as i64;
        let header_len = bytes.len() - rest.len();
        return match header[2] {
            0 => native(rest, header_len, period_us, word, limit_bytes).map(Some),
            1 => java(rest, header_len, period_us, word, limit_bytes).map(Some),
            _ => continue,
        };
    }
    Ok(None)
}

fn cpu_profile(period_us: i64, limit_bytes: usize) -> LegacyProfile {
    LegacyProfile::new(
        vec![
            ValueType::new("samples", "count"),
            ValueType::new("cpu", "nanoseconds"),
        ],
        ValueType::new("cpu", "nanoseconds"),
        period_us.wrapping_mul(1000),
        limit_bytes,
    )
}

/// C++ and Go (google/pprof's `cpuProfile`).
fn native(
    bytes: &[u8],
    offset: usize,
    period_us: i64,
    word: Word,
    limit_bytes: usize,
) -> Result<LegacyProfile, Error> {
    const FORMAT: Format = "Go CPU";
    let mut profile = cpu_profile(period_us, limit_bytes);
    let rest = read_samples(&mut profile, bytes, offset, word, true, FORMAT)?;
    strip_signal_frames(&mut profile);
    mappings::apply(&mut profile, &mut Lines::new(rest), FORMAT)?;
    profile.remove_duplicate_leaves();
    Ok(profile)
}

/// Java (google/pprof's `javaCPUProfile`): addresses are names' keys, not code, so they are not
/// moved, and they are cleared once named.
fn java(
    bytes: &[u8],
    offset: usize,
    period_us: i64,
    word: Word,
    limit_bytes: usize,
) -> Result<LegacyProfile, Error> {
    const FORMAT: Format = "Java CPU";
    let mut profile = cpu_profile(period_us, limit_bytes);
    let rest = read_samples(&mut profile, bytes, offset, word, false, FORMAT)?;
    java::apply_locations(&mut profile, &mut Lines::new(rest), FORMAT)?;
    Ok(profile)
}

/// Reads records up to the end record (or the end of `bytes`), returning what follows it.
/// `offset` is where `bytes` start in the input, for errors.
fn read_samples<'a>(
    profile: &mut LegacyProfile,
    mut bytes: &'a [u8],
    offset: usize,
    word: Word,
    adjust: bool,
    format: Format,
) -> Result<&'a [u8], Error> {
    let total = bytes.len();
    while !bytes.is_empty() {
        let at = offset + total - bytes.len();
        let truncated = || malformed(format, format!("record at byte {at} is truncated"));
        let (count, rest) = word(bytes).ok_or_else(truncated)?;
        let (n, rest) = word(rest).ok_or_else(truncated)?;
        // As google/pprof checks: no record can claim more frames than 4-byte words remain.
        if n > rest.len() as u64 / 4 {
            return Err(malformed(
                format,
                format!("record at byte {at} claims {n} frames"),
            ));
        }
        let mut frames = rest;
        let mut end_record = false;
        let start = profile.frames_len();
        for i in 0..n {
            let (address, tail) = word(frames).ok_or_else(truncated)?;
            frames = tail;
            if count == 0 && n == 1 && address == 0 {
                end_record = true;
                break;
            }
            // Callers' addresses are return addresses: step back into the call.
            let address = if adjust && i > 0 {
                address.wrapping_sub(1)
            } else {
                address
            };
            profile.push_frame(address)?;
        }
        bytes = frames;
        if end_record {
            break;
        }
        let count = count as i64;
        profile.push_sample(start, &[count, count.wrapping_mul(profile.period)], None)?;
    }
    Ok(bytes)
}

/// When (almost) every stack has the same second frame, that frame was pushed by the signal
/// handler: remove it, at most twice (google/pprof's heuristic: one exception allowed per 32
/// samples).
fn strip_signal_frames(profile: &mut LegacyProfile) {
    let margin = profile.samples.len() / 32;
    for _ in 0..2 {
        let mut counts: FxHashMap<u64, usize> = FxHashMap::default();
        for sample in &profile.samples {
            let stack = profile.stack(sample);
            if stack.len() > 1 {
                *counts.entry(profile.address(stack[1])).or_default() += 1;
            }
        }
        let Some((&address, _)) = counts
            .iter()
            .find(|&(_, &count)| count >= profile.samples.len() - margin)
        else {
            continue;
        };
        for i in 0..profile.samples.len() {
            let stack = profile.stack(&profile.samples[i]);
            if stack.len() > 1 && profile.address(stack[1]) == address {
                profile.remove_second_frame(i);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(ws: &[u64]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    fn convert(bytes: &[u8]) -> crate::proto::Profile {
        parse(bytes, 1 << 20)
            .expect("valid")
            .expect("legacy")
            .into_proto()
    }

    #[test]
    fn converts_samples_and_stops_at_the_end_record() {
        let mut bytes = words(&[
            0, 3, 0, 10_000, 0, 2, 2, 0x1000, 0x2001, 3, 1, 0x1000, 0, 1, 0,
        ]);
        bytes.extend_from_slice(b"00001000-00003000 r-xp 00000000 00:00 0 /bin/app\n");
        let profile = convert(&bytes);
        assert_eq!(profile.period, 10_000_000);
        let values: Vec<_> = profile.sample.iter().map(|s| s.value.clone()).collect();
        assert_eq!(values, vec![vec![2, 20_000_000], vec![3, 30_000_000]]);
        assert_eq!(profile.location[1].address, 0x2000);
        assert_eq!(profile.mapping.len(), 1);
        assert!(profile.location.iter().all(|l| l.mapping_id == 1));
    }

    /// google/pprof's `TestCpuParse`: the bogus second frame (the signal handler's) goes, and so
    /// does the leaf the unwinder repeated.
    #[test]
    fn signal_frame_and_duplicate_leaf_are_removed() {
        let mut ws = vec![0, 3, 0, 1, 0];
        ws.extend([1, 3, 100, 999, 100]);
        ws.extend([1, 5, 200, 999, 200, 501, 502]);
        ws.extend([
            1, 12, 300, 999, 300, 601, 602, 603, 604, 605, 606, 607, 608, 609,
        ]);
        ws.extend([0, 1, 0]);
        let profile = convert(&words(&ws));
        let stacks: Vec<Vec<u64>> = profile
            .sample
            .iter()
            .map(|s| {
                s.location_id
                    .iter()
                    .map(|&id| profile.location[id as usize - 1].address)
                    .collect()
            })
            .collect();
        assert_eq!(
            stacks,
            [
                vec![100],
                vec![200, 500, 501],
                vec![300, 600, 601, 602, 603, 604, 605, 606, 607, 608]
            ]
        );
    }

    #[test]
    fn caller_address_zero_does_not_overflow() {
        // Found by the fuzzer: a caller at address 0 steps back to u64::MAX.
        let profile = convert(&words(&[0, 3, 0, 10_000, 0, 1, 2, 0, 0, 0, 1, 0]));
        assert_eq!(profile.sample.len(), 1);
    }

    #[test]
    fn truncated_record_says_where() {
        let bytes = words(&[0, 3, 0, 10_000, 0, 1, 1, 0x1000]);
        let err = parse(&bytes[..bytes.len() - 4], 1 << 20).expect_err("truncated");
        assert_eq!(
            err.to_string(),
            "legacy Go CPU profile is malformed: record at byte 40 is truncated"
        );
    }

    #[test]
    fn protobuf_is_not_mistaken_for_legacy() {
        assert!(
            parse(&[0x0a, 0x04, 0x08, 0x01, 0x10, 0x02], 1 << 20)
                .expect("no error")
                .is_none()
        );
    }
}
