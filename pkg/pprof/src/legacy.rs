//! Go's legacy binary CPU profile format (before Go 1.9), converted to the protobuf model.
//!
//! google/pprof still reads these files, so we do too. The format is a sequence of machine words
//! (32 or 64 bits, either byte order): a header `0, 3, 0, period_µs, 0`, then records
//! `count, n, pc_1 … pc_n`, ended by the record `0, 1, 0`; after it, the process's memory map as
//! `/proc/self/maps` text. Conversion follows google/pprof's `legacy_profile.go`: return addresses
//! of callers are moved back by one into the call instruction, the signal-handler frame that sits
//! second in most stacks is stripped, and a leaf duplicated by the unwinder is dropped.

use rustc_hash::FxHashMap;

use crate::{Error, proto};

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

/// Returns `Ok(None)` when `bytes` do not start with a legacy CPU header.
pub(crate) fn parse_cpu(bytes: &[u8]) -> Result<Option<proto::Profile>, Error> {
    for word in WORDS {
        let mut rest = bytes;
        let mut header = [0u64; 5];
        let mut ok = true;
        for slot in &mut header {
            match word(rest) {
                Some((value, tail)) => {
                    *slot = value;
                    rest = tail;
                }
                None => ok = false,
            }
        }
        if !ok || header[0] != 0 || header[1] != 3 || header[3] == 0 || header[4] != 0 {
            continue;
        }
        return match header[2] {
            0 => convert(rest, header[3] as i64, word).map(Some),
            1 => Err(Error::Legacy {
                fault: "Java legacy CPU profiles are not supported".into(),
            }),
            _ => continue,
        };
    }
    Ok(None)
}

fn convert(mut bytes: &[u8], period_us: i64, word: Word) -> Result<proto::Profile, Error> {
    let total = bytes.len();
    let period = period_us.saturating_mul(1000);
    let mut address_of_location: Vec<u64> = Vec::new();
    let mut location_of_address: FxHashMap<u64, u64> = FxHashMap::default();
    let mut stacks: Vec<(i64, Vec<u64>)> = Vec::new();
    loop {
        let at = total - bytes.len();
        let truncated = || Error::Legacy {
            fault: format!("record at byte {at} is truncated"),
        };
        if bytes.is_empty() {
            break;
        }
        let (count, rest) = word(bytes).ok_or_else(truncated)?;
        let (n, rest) = word(rest).ok_or_else(truncated)?;
        if n > rest.len() as u64 / 4 {
            return Err(Error::Legacy {
                fault: format!("record at byte {at} claims {n} frames"),
            });
        }
        bytes = rest;
        let mut addresses = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let (address, rest) = word(bytes).ok_or_else(truncated)?;
            addresses.push(address);
            bytes = rest;
        }
        if count == 0 && n == 1 && addresses[0] == 0 {
            break; // end-of-data record
        }
        let ids = addresses
            .iter()
            .enumerate()
            .map(|(i, &address)| {
                // Callers' addresses are return addresses: step back into the call.
                let address = if i > 0 {
                    address.wrapping_sub(1)
                } else {
                    address
                };
                *location_of_address.entry(address).or_insert_with(|| {
                    address_of_location.push(address);
                    address_of_location.len() as u64
                })
            })
            .collect();
        stacks.push((count as i64, ids));
    }
    strip_signal_frames(&mut stacks, &address_of_location);
    for (_, ids) in &mut stacks {
        // The unwinder may repeat the leaf as the (adjusted) second frame.
        if ids.len() > 1
            && address_of_location[ids[0] as usize - 1]
                == address_of_location[ids[1] as usize - 1].wrapping_add(1)
        {
            ids.remove(1);
        }
    }

    let mut strings: Vec<String> = ["", "samples", "count", "cpu", "nanoseconds"]
        .map(String::from)
        .to_vec();
    let mapping = parse_memory_map(bytes, &mut strings);
    let location = address_of_location
        .iter()
        .enumerate()
        .map(|(i, &address)| proto::Location {
            id: i as u64 + 1,
            mapping_id: mapping
                .iter()
                .find(|m| (m.memory_start..m.memory_limit).contains(&address))
                .map_or(0, |m| m.id),
            address,
            ..Default::default()
        })
        .collect();
    Ok(proto::Profile {
        sample_type: vec![
            proto::ValueType { r#type: 1, unit: 2 },
            proto::ValueType { r#type: 3, unit: 4 },
        ],
        sample: stacks
            .into_iter()
            .map(|(count, location_id)| proto::Sample {
                location_id,
                value: vec![count, count.saturating_mul(period)],
                label: Vec::new(),
            })
            .collect(),
        mapping,
        location,
        string_table: strings,
        period_type: Some(proto::ValueType { r#type: 3, unit: 4 }),
        period,
        ..Default::default()
    })
}

/// When (almost) every stack has the same second frame, that frame was pushed by the signal
/// handler: remove it, at most twice (google/pprof's heuristic, one exception per 32 samples).
fn strip_signal_frames(stacks: &mut [(i64, Vec<u64>)], address_of_location: &[u64]) {
    let margin = stacks.len() / 32;
    for _ in 0..2 {
        let mut counts: FxHashMap<u64, usize> = FxHashMap::default();
        for (_, ids) in stacks.iter() {
            if ids.len() > 1 {
                *counts
                    .entry(address_of_location[ids[1] as usize - 1])
                    .or_default() += 1;
            }
        }
        let Some((&address, _)) = counts
            .iter()
            .find(|&(_, &count)| count >= stacks.len() - margin)
        else {
            continue;
        };
        for (_, ids) in stacks.iter_mut() {
            if ids.len() > 1 && address_of_location[ids[1] as usize - 1] == address {
                ids.remove(1);
            }
        }
    }
}

/// Parses `/proc/self/maps` lines (`start-end perms offset dev inode path`), keeping executable ones.
fn parse_memory_map(text: &[u8], strings: &mut Vec<String>) -> Vec<proto::Mapping> {
    let text = String::from_utf8_lossy(text);
    let mut mappings: Vec<proto::Mapping> = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms), Some(offset)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let Some((start, limit)) = range.split_once('-') else {
            continue;
        };
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
        let (Some(start), Some(limit), Some(offset)) = (hex(start), hex(limit), hex(offset)) else {
            continue;
        };
        if !perms.contains('x') {
            continue;
        }
        let file = fields.nth(2).unwrap_or("");
        if let Some(last) = mappings.last_mut() {
            let same_file = strings[last.filename as usize] == file;
            if same_file && last.memory_limit == start {
                last.memory_limit = limit;
                continue;
            }
        }
        strings.push(file.to_owned());
        mappings.push(proto::Mapping {
            id: mappings.len() as u64 + 1,
            memory_start: start,
            memory_limit: limit,
            file_offset: offset,
            filename: strings.len() as i64 - 1,
            ..Default::default()
        });
    }
    mappings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(ws: &[u64]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn converts_samples_and_stops_at_the_end_record() {
        let mut bytes = words(&[
            0, 3, 0, 10_000, 0, 2, 2, 0x1000, 0x2001, 3, 1, 0x1000, 0, 1, 0,
        ]);
        bytes.extend_from_slice(b"00001000-00003000 r-xp 00000000 00:00 0 /bin/app\n");
        let profile = parse_cpu(&bytes).expect("valid").expect("legacy");
        assert_eq!(profile.period, 10_000_000);
        let values: Vec<_> = profile.sample.iter().map(|s| s.value.clone()).collect();
        assert_eq!(values, vec![vec![2, 20_000_000], vec![3, 30_000_000]]);
        assert_eq!(profile.location[1].address, 0x2000);
        assert_eq!(profile.mapping.len(), 1);
        assert!(profile.location.iter().all(|l| l.mapping_id == 1));
    }

    #[test]
    fn caller_address_zero_does_not_overflow() {
        // Found by the fuzzer: a caller at address 0 steps back to u64::MAX.
        let bytes = words(&[0, 3, 0, 10_000, 0, 1, 2, 0, 0, 0, 1, 0]);
        let profile = parse_cpu(&bytes).expect("valid").expect("legacy");
        assert_eq!(profile.sample.len(), 1);
    }

    #[test]
    fn protobuf_is_not_mistaken_for_legacy() {
        assert!(
            parse_cpu(&[0x0a, 0x04, 0x08, 0x01, 0x10, 0x02])
                .expect("no error")
                .is_none()
        );
    }
}
