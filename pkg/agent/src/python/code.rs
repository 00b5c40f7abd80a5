//! Code objects read from a live process (`/proc/PID/mem`): the name, file and line table
//! that turn a sampled (code object, instruction) into a Python frame.

use super::layout::Layout;
use crate::interp::Memory;

/// Longest name or file name read, in characters; a longer one is cut.
const MAX_STRING_CHARS: u64 = 1024;
/// Largest line table read (CPython's own tables are far smaller; the OTel profiler's bound).
const MAX_LINE_TABLE_BYTES: u64 = 1 << 16;

impl Memory {
    /// A Python `str` object's text (compact strings: every name and file name the compiler
    /// makes is one).
    fn string(&self, layout: &Layout, addr: u64) -> Option<String> {
        let header = self.bytes(addr, 40)?;
        let length = u64::from_ne_bytes(header[16..24].try_into().ok()?);
        let state = u32::from_ne_bytes(header[32..36].try_into().ok()?);
        let kind = (state >> 2) & 7;
        let compact = state & (1 << 5) != 0;
        let ascii = state & (1 << 6) != 0;
        if !compact {
            return None;
        }
        let chars = length.min(MAX_STRING_CHARS);
        if ascii {
            let data = self.bytes(addr + layout.ascii_data, chars as usize)?;
            return Some(String::from_utf8_lossy(&data).into_owned());
        }
        let width = u64::from(kind);
        if !matches!(width, 1 | 2 | 4) {
            return None;
        }
        let data = self.bytes(addr + layout.compact_data, (chars * width) as usize)?;
        let text = data
            .chunks_exact(width as usize)
            .map(|c| {
                let mut code = [0u8; 4];
                code[..c.len()].copy_from_slice(c);
                char::from_u32(u32::from_le_bytes(code)).unwrap_or('\u{fffd}')
            })
            .collect();
        Some(text)
    }

    /// A Python `bytes` object's contents, at most `max` bytes.
    fn bytes_object(&self, addr: u64, max: u64) -> Option<Vec<u8>> {
        let size = self.u64(addr + 16)?;
        if size > max {
            return None;
        }
        // `PyBytesObject.ob_sval`.
        self.bytes(addr + 32, size as usize)
    }
}

/// What tells one code object from another that later took its address: 8 bytes from
/// `co_argcount` and the 8 ending with `co_firstlineno`, combined as the BPF program does
/// (`py_fingerprint` in `ebpf/profiler.bpf.c`).
pub(crate) fn fingerprint(args: u64, lines: u64) -> u64 {
    args ^ lines.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A code object: a function, class body or module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Code {
    /// `co_qualname` (`Worker.run`), `co_name` in 3.10.
    pub name: String,
    /// `co_filename`.
    pub file: String,
    pub first_line: u32,
    pub fingerprint: u64,
    line_table: Vec<u8>,
    pairs_line_table: bool,
}

impl Code {
    /// Reads the code object at `addr`; `None` when it cannot be read or is no code object.
    pub fn read(memory: &Memory, layout: &Layout, addr: u64) -> Option<Code> {
        let header = memory.bytes(addr, layout.code_header_len())?;
        let u64_at = |at: u64| -> Option<u64> {
            Some(u64::from_ne_bytes(
                header.get(at as usize..at as usize + 8)?.try_into().ok()?,
            ))
        };
        let args = u64_at(u64::from(layout.code_argcount))?;
        let lines = u64_at(u64::from(layout.code_firstlineno) - 4)?;
        let first_line = (lines >> 32) as u32;
        let name = memory.string(layout, u64_at(layout.code_name)?)?;
        let file = memory.string(layout, u64_at(layout.code_filename)?)?;
        let line_table =
            memory.bytes_object(u64_at(layout.code_linetable)?, MAX_LINE_TABLE_BYTES)?;
        Some(Code {
            name,
            file,
            first_line,
            fingerprint: fingerprint(args, lines),
            line_table,
            pairs_line_table: layout.pairs_line_table(),
        })
    }

    /// The line of instruction `index` (code units from the start of the bytecode); the first
    /// line when the table gives none (a frame just pushed, an instruction with no location).
    pub fn line(&self, index: i32) -> u32 {
        let line = if self.pairs_line_table {
            u32::try_from(index)
                .ok()
                .and_then(|i| line_of_pairs(&self.line_table, self.first_line as i32, i * 2))
        } else {
            line_of_locations(&self.line_table, self.first_line as i32, i64::from(index))
        };
        line.and_then(|l| u32::try_from(l).ok())
            .filter(|&l| l > 0)
            .unwrap_or(self.first_line)
    }
}

/// 3.11+'s location table (`Objects/locations.md`): the line of the instruction at `index`
/// (code units), `None` for an instruction with no line. A frame just pushed (`index < 0`)
/// is at its first line.
fn line_of_locations(table: &[u8], first_line: i32, index: i64) -> Option<i32> {
    if index < 0 {
        return Some(first_line);
    }
    let mut i = 0usize;
    // 6-bit chunks, least significant first; 0x40 says another follows.
    let varint = |i: &mut usize| -> Option<u32> {
        let mut byte = *table.get(*i)?;
        *i += 1;
        let mut value = u32::from(byte & 63);
        let mut shift = 0;
        while byte & 64 != 0 {
            byte = *table.get(*i)?;
            *i += 1;
            shift += 6;
            if shift > 30 {
                return None;
            }
            value |= u32::from(byte & 63) << shift;
        }
        Some(value)
    };
    let svarint = |i: &mut usize| {
        varint(i).map(|u| {
            if u & 1 != 0 {
                -((u >> 1) as i32)
            } else {
                (u >> 1) as i32
            }
        })
    };
    let (mut address, mut line) = (0i64, first_line);
    while i < table.len() {
        let first = table[i];
        i += 1;
        if first & 0x80 == 0 {
            return None;
        }
        let code = (first >> 3) & 15;
        let length = i64::from(first & 7) + 1;
        let delta = match code {
            // No location: the running line is left as it is.
            15 => None,
            14 => {
                let d = svarint(&mut i)?;
                varint(&mut i)?;
                varint(&mut i)?;
                varint(&mut i)?;
                Some(d)
            }
            13 => Some(svarint(&mut i)?),
            10..=12 => {
                i += 2;
                Some(i32::from(code) - 10)
            }
            _ => {
                i += 1;
                Some(0)
            }
        };
        if let Some(d) = delta {
            line = line.wrapping_add(d);
        }
        if index < address + length {
            return delta.map(|_| line);
        }
        address += length;
    }
    None
}

/// 3.10's `co_linetable` (`Objects/lnotab_notes.txt`): (bytes, line delta) pairs, a delta of
/// −128 meaning "no line"; `offset` in bytes.
fn line_of_pairs(table: &[u8], first_line: i32, offset: u32) -> Option<i32> {
    let (mut line, mut end) = (first_line, 0u32);
    for pair in table.chunks_exact(2) {
        let start = end;
        end += u32::from(pair[0]);
        let delta = pair[1] as i8;
        let current = if delta == -128 {
            None
        } else {
            line += i32::from(delta);
            Some(line)
        };
        if start <= offset && offset < end {
            return current;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The location table CPython 3.11.2 compiled for
    /// ```python
    /// def f(x):          # line 1
    ///     y = x + 1      # line 2
    ///     return y * 2   # line 3
    /// ```
    /// (`f.__code__.co_linetable`), whose `co_lines()` give bytes [0, 2) line 1, [2, 12) line 2
    /// and [12, 22) line 3: code units 0, 1–5 and 6–10.
    const F_311: &[u8] = b"\x80\x00\xd8\x08\t\x88A\x89\x05\x80A\xd8\x0b\x0c\x88q\x895\x80L";

    #[test]
    fn location_table_lines_match_co_lines() {
        let line = |index| line_of_locations(F_311, 1, index);
        assert_eq!(line(-1), Some(1));
        assert_eq!(line(0), Some(1));
        for index in 1..=5 {
            assert_eq!(line(index), Some(2), "index {index}");
        }
        for index in 6..=10 {
            assert_eq!(line(index), Some(3), "index {index}");
        }
        assert_eq!(line(11), None);
    }

    #[test]
    fn no_location_entries_keep_the_running_line() {
        // One-line form (+1) over 1 unit, "no location" (code 15) over 2, short form over 1.
        let table = [0x80 | (11 << 3), 0, 0, 0x80 | (15 << 3) | 1, 0x80, 0];
        assert_eq!(line_of_locations(&table, 10, 0), Some(11));
        assert_eq!(line_of_locations(&table, 10, 1), None);
        assert_eq!(line_of_locations(&table, 10, 2), None);
        assert_eq!(line_of_locations(&table, 10, 3), Some(11));
    }

    #[test]
    fn pair_tables_of_3_10() {
        // 6 bytes at +1, 4 bytes with no line, 8 bytes at +2 more.
        let table = [6u8, 1, 4, 0x80, 8, 2];
        assert_eq!(line_of_pairs(&table, 5, 0), Some(6));
        assert_eq!(line_of_pairs(&table, 5, 7), None);
        assert_eq!(line_of_pairs(&table, 5, 10), Some(8));
        assert_eq!(line_of_pairs(&table, 5, 18), None);
    }
}
