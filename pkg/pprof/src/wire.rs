//! A protobuf wire-format reader over borrowed bytes: varints, keys, length-delimited slices.
//!
//! prost decodes into owned messages with a `Vec` per sample and a `String` per string; for
//! pprof that allocation was most of the decoding time, so the hot path reads the wire format
//! here directly. Every fault carries the byte offset where it happened.

/// Where and how the wire format broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fault {
    /// Offset in the whole (decompressed) message.
    pub offset: usize,
    /// What was wrong.
    pub what: String,
}

/// Wire types of the protobuf encoding.
pub(crate) const VARINT: u8 = 0;
pub(crate) const FIXED64: u8 = 1;
pub(crate) const LEN: u8 = 2;
pub(crate) const FIXED32: u8 = 5;

/// A cursor over one message's bytes.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Offset of `buf` in the whole message, so faults name absolute positions.
    base: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], base: usize) -> Self {
        Reader { buf, pos: 0, base }
    }

    #[inline]
    pub fn at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// Absolute offset of the cursor.
    #[inline]
    pub fn offset(&self) -> usize {
        self.base + self.pos
    }

    fn fault(&self, what: impl Into<String>) -> Fault {
        Fault {
            offset: self.offset(),
            what: what.into(),
        }
    }

    /// Reads a varint. Most varints in a profile (ids, small values, string indices) take one
    /// or two bytes: those cases are inlined, the general one is not.
    #[inline(always)]
    pub fn varint(&mut self) -> Result<u64, Fault> {
        if let Some(&byte) = self.buf.get(self.pos)
            && byte < 0x80
        {
            self.pos += 1;
            return Ok(u64::from(byte));
        }
        if let Some(&[low, high]) = self.buf.get(self.pos..).and_then(|b| b.first_chunk::<2>())
            && high < 0x80
        {
            self.pos += 2;
            return Ok(u64::from(low & 0x7f) | (u64::from(high) << 7));
        }
        self.varint_slow()
    }

    #[inline(never)]
    fn varint_slow(&mut self) -> Result<u64, Fault> {
        // With ten bytes ahead no byte needs a bounds check: the common case for addresses
        // and values, which take three to ten bytes.
        if let Some(bytes) = self.buf.get(self.pos..).and_then(|b| b.first_chunk::<10>()) {
            let mut value = 0u64;
            for (i, &byte) in bytes.iter().enumerate() {
                value |= u64::from(byte & 0x7f) << (7 * i);
                if byte & 0x80 == 0 {
                    self.pos += i + 1;
                    return Ok(value);
                }
            }
            return Err(self.fault("varint longer than 10 bytes"));
        }
        let mut value = 0u64;
        let start = self.pos;
        for shift in (0..64).step_by(7) {
            let Some(&byte) = self.buf.get(self.pos) else {
                self.pos = start;
                return Err(self.fault("varint runs past the end (truncated?)"));
            };
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        self.pos = start;
        Err(self.fault("varint longer than 10 bytes"))
    }

    /// Reads a field key: field number and wire type.
    #[inline]
    pub fn key(&mut self) -> Result<(u64, u8), Fault> {
        let at = self.pos;
        let key = self.varint()?;
        let number = key >> 3;
        if number == 0 {
            self.pos = at;
            return Err(self.fault("field number 0"));
        }
        Ok((number, (key & 7) as u8))
    }

    /// Reads a length-delimited payload; returns it and its absolute offset. Always inlined:
    /// returned through memory, the slice was read back as one wide load that could not take
    /// its parts from the narrow stores just made (a store-forwarding stall per message).
    #[inline(always)]
    pub fn bytes(&mut self) -> Result<(&'a [u8], usize), Fault> {
        let len = self.varint()?;
        let start = self.pos;
        let remaining = (self.buf.len() - start) as u64;
        if len > remaining {
            return Err(self.fault(format!(
                "length {len} runs past the end ({} bytes missing, truncated?)",
                len - remaining
            )));
        }
        self.pos += len as usize;
        Ok((&self.buf[start..self.pos], self.base + start))
    }

    /// Skips a field of an unknown number (newer producers may add fields).
    pub fn skip(&mut self, wire: u8) -> Result<(), Fault> {
        let n = match wire {
            VARINT => return self.varint().map(drop),
            LEN => return self.bytes().map(drop),
            FIXED64 => 8,
            FIXED32 => 4,
            other => return Err(self.fault(format!("unsupported wire type {other}"))),
        };
        if self.buf.len() - self.pos < n {
            return Err(self.fault("fixed-size value runs past the end (truncated?)"));
        }
        self.pos += n;
        Ok(())
    }

    /// Reads a scalar varint field, checking its wire type.
    #[inline]
    pub fn scalar(&mut self, wire: u8, field: &str) -> Result<u64, Fault> {
        if wire != VARINT {
            return Err(self.fault(format!(
                "field `{field}` has wire type {wire}, expected a varint"
            )));
        }
        self.varint()
    }

    /// Reads one occurrence of a repeated varint field, packed (wire type 2) or not.
    #[inline]
    pub fn repeated(
        &mut self,
        wire: u8,
        field: &str,
        mut each: impl FnMut(u64),
    ) -> Result<(), Fault> {
        match wire {
            VARINT => each(self.varint()?),
            LEN => {
                let (bytes, base) = self.bytes()?;
                let mut packed = Reader::new(bytes, base);
                while !packed.at_end() {
                    each(packed.varint()?);
                }
            }
            other => {
                return Err(self.fault(format!(
                    "field `{field}` has wire type {other}, expected varints"
                )));
            }
        }
        Ok(())
    }

    /// Reads an embedded message field, checking its wire type.
    #[inline(always)]
    pub fn message(&mut self, wire: u8, field: &str) -> Result<Reader<'a>, Fault> {
        if wire != LEN {
            return Err(self.fault(format!(
                "field `{field}` has wire type {wire}, expected a message"
            )));
        }
        let (bytes, base) = self.bytes()?;
        Ok(Reader::new(bytes, base))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncated_length_names_the_offset() {
        // field 2, wire type 2, length 10, but only 3 bytes follow.
        let mut r = Reader::new(&[0x12, 10, 1, 2, 3], 100);
        assert_eq!(r.key(), Ok((2, LEN)));
        let fault = r.bytes().expect_err("truncated");
        assert_eq!(
            fault,
            Fault {
                offset: 102,
                what: "length 10 runs past the end (7 bytes missing, truncated?)".into()
            }
        );
    }

    #[test]
    fn packed_and_unpacked_repeated_read_alike() {
        let mut got = Vec::new();
        let mut packed = Reader::new(&[3, 1, 0x96, 0x01], 0);
        packed.repeated(LEN, "x", |v| got.push(v)).expect("packed");
        let mut single = Reader::new(&[5], 0);
        single
            .repeated(VARINT, "x", |v| got.push(v))
            .expect("single");
        assert_eq!(got, vec![1, 150, 5]);
    }

    #[test]
    fn varints_read_alike_at_the_end_and_before_more_bytes() {
        for value in [0u64, 1, 127, 128, 300, 16_383, 16_384, 1 << 35, u64::MAX] {
            let mut bytes = Vec::new();
            let mut v = value;
            while v >= 0x80 {
                bytes.push((v as u8) | 0x80);
                v >>= 7;
            }
            bytes.push(v as u8);
            let n = bytes.len();
            let mut at_end = Reader::new(&bytes, 0);
            assert_eq!(at_end.varint(), Ok(value), "{value} at the end");
            assert!(at_end.at_end());
            bytes.extend_from_slice(&[0xff; 12]);
            let mut followed = Reader::new(&bytes, 0);
            assert_eq!(followed.varint(), Ok(value), "{value} before more bytes");
            assert_eq!(followed.offset(), n);
            // Cut short by one byte: an error at the varint's start, at the end or not.
            let mut cut = Reader::new(&bytes[..n - 1], 0);
            if n > 1 {
                assert_eq!(cut.varint().map_err(|f| f.offset), Err(0), "{value} cut");
            }
        }
        let mut eleven = Reader::new(&[0x80; 11], 5);
        assert_eq!(
            eleven.varint().map_err(|f| (f.offset, f.what)),
            Err((5, "varint longer than 10 bytes".to_owned()))
        );
    }

    #[test]
    fn negative_int64_is_a_ten_byte_varint() {
        let mut r = Reader::new(
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            0,
        );
        assert_eq!(r.varint().map(|v| v as i64), Ok(-1));
    }
}
