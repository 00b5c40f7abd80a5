//! Reading an object through [`object::ReadCache`] with positional reads.
//!
//! `ReadCache` over a `&File` seeks the file's one offset and reads from it: two threads reading
//! the same open file (the agent compiles an object's unwind table on one thread while it
//! symbolizes frames of the same object on another) move each other's offset, and each reads
//! bytes from the wrong place, so a large object was sometimes "not a readable ELF object" and
//! got no table for the agent's whole life. [`ReadAt`] keeps its own position and reads with
//! `pread`, which shares nothing.

use std::fs::File;
use std::os::unix::fs::FileExt;

use object::read::{ReadCache, ReadCacheOps};

/// A file read at a position of its own (`pread`), safe beside other readers of the same file.
#[derive(Debug)]
pub(crate) struct ReadAt<'a> {
    file: &'a File,
    pos: u64,
}

/// A [`ReadCache`] over `file` that other readers of the same file do not disturb.
pub(crate) fn read_cache(file: &File) -> ReadCache<ReadAt<'_>> {
    ReadCache::new(ReadAt { file, pos: 0 })
}

impl ReadCacheOps for ReadAt<'_> {
    fn len(&mut self) -> Result<u64, ()> {
        self.file.metadata().map(|m| m.len()).map_err(|_| ())
    }

    fn seek(&mut self, pos: u64) -> Result<u64, ()> {
        self.pos = pos;
        Ok(pos)
    }

    fn read(&mut self, buf: &mut [u8]) -> Result<usize, ()> {
        loop {
            match self.file.read_at(buf, self.pos) {
                Ok(n) => {
                    self.pos += n as u64;
                    return Ok(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Err(()),
            }
        }
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), ()> {
        self.file.read_exact_at(buf, self.pos).map_err(|_| ())?;
        self.pos += buf.len() as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::read::ReadRef;
    use std::io::{Seek, SeekFrom, Write};

    #[test]
    fn reads_where_asked_whatever_the_files_offset() {
        let mut file = tempfile::tempfile().unwrap();
        let bytes: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        file.write_all(&bytes).unwrap();
        let cache = read_cache(&file);
        // Another reader moves the file's offset between and during our reads.
        Seek::seek(&mut &file, SeekFrom::Start(7)).unwrap();
        assert_eq!(cache.read_bytes_at(300, 4).unwrap(), &bytes[300..304]);
        Seek::seek(&mut &file, SeekFrom::End(0)).unwrap();
        assert_eq!(cache.read_bytes_at(9_000, 3).unwrap(), &bytes[9_000..9_003]);
        assert_eq!(cache.len().unwrap(), 10_000);
        assert!(cache.read_bytes_at(9_999, 2).is_err());
    }
}
