//! A minimal protobuf wire-format walker, used only to say *where* a message is broken.
//!
//! prost reports the field path of a decode failure but not the byte offset; when prost fails we
//! walk the bytes again here, which is cheap and only happens on bad input.

/// Field names of `Profile` by field number, for messages.
fn profile_field_name(number: u64) -> &'static str {
    match number {
        1 => "sample_type",
        2 => "sample",
        3 => "mapping",
        4 => "location",
        5 => "function",
        6 => "string_table",
        7 => "drop_frames",
        8 => "keep_frames",
        9 => "time_nanos",
        10 => "duration_nanos",
        11 => "period_type",
        12 => "period",
        13 => "comment",
        14 => "default_sample_type",
        _ => "unknown field",
    }
}

/// Reads a varint at `pos`; returns the value and the position after it.
fn varint(bytes: &[u8], mut pos: usize) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(pos)?;
        pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some((value, pos));
        }
    }
    None
}

/// Describes the first fault in the top-level fields of a `Profile` message, or `None` when the
/// top level is well formed (the fault is then inside a field, and prost's own message says which).
pub(crate) fn locate_fault(bytes: &[u8]) -> Option<String> {
    let len = bytes.len();
    let mut pos = 0;
    let mut n_fields = 0usize;
    while pos < len {
        let start = pos;
        let Some((key, after_key)) = varint(bytes, pos) else {
            return Some(format!("truncated field key at byte {start} of {len}"));
        };
        let number = key >> 3;
        let name = profile_field_name(number);
        let field = format!("field `{name}` ({number}) at byte {start}");
        if number == 0 {
            return Some(format!("invalid field number 0 at byte {start} of {len}"));
        }
        pos = match key & 7 {
            0 => match varint(bytes, after_key) {
                Some((_, next)) => next,
                None => return Some(format!("{field}: varint runs past the end at byte {len}")),
            },
            1 => after_key + 8,
            5 => after_key + 4,
            2 => {
                let Some((n, body)) = varint(bytes, after_key) else {
                    return Some(format!("{field}: length runs past the end at byte {len}"));
                };
                let end = (body as u64).saturating_add(n);
                if end > len as u64 {
                    return Some(format!(
                        "{field}: length {n} runs past the end ({} bytes missing; input is {len} bytes, truncated?)",
                        end - len as u64
                    ));
                }
                end as usize
            }
            wire => {
                return Some(format!(
                    "{field}: unsupported wire type {wire} (after {n_fields} good fields)"
                ));
            }
        };
        if pos > len {
            return Some(format!(
                "{field}: fixed-size value runs past the end at byte {len}"
            ));
        }
        n_fields += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_truncated_length_delimited_field() {
        // field 2 (sample), wire type 2, length 10, but only 3 bytes follow.
        let bytes = [0x12, 10, 1, 2, 3];
        let fault = locate_fault(&bytes).expect("fault");
        assert_eq!(
            fault,
            "field `sample` (2) at byte 0: length 10 runs past the end (7 bytes missing; input is 5 bytes, truncated?)"
        );
    }

    #[test]
    fn well_formed_top_level_has_no_fault() {
        // field 9 (time_nanos) varint 5, field 12 (period) varint 1.
        assert_eq!(locate_fault(&[0x48, 5, 0x60, 1]), None);
    }
}
