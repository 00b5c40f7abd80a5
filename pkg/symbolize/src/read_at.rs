//! Reading an object through [`object::ReadCache`] with positional reads.
//!
//! `ReadCache` over a `&File` seeks the file's one offset and reads from it: two threads reading
//! the same open file (the agent compiles an object's unwind table on one thread while it
//! symbolizes frames of the same object on another) move each other's offset, and each reads
//! bytes from the wrong place, so a large object was sometimes "not a readable ELF object" and
//! got no table for the agent's whole life. [`ReadAt`] keeps its own position and reads with
//! `pread`, which shares nothing.
//!
//! `ReadCache` also reads each string (a symbol's name) on its own, a system call or more per
//! name: reading every symbol's name cost 17 ms for pyenv's `libpython3.11.so` (16,700
//! symbols) and 270 ms for `node` (185,000), each time a process mapped one. [`ObjectReader`]
//! reads a string table whole the first time a name in it is asked for, and answers names
//! from it.

use std::cell::OnceCell;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;

use object::read::{ReadCache, ReadCacheOps, ReadRef};

/// A string table larger than this is read a name at a time, as `ReadCache` does: a table is
/// held while its object is looked into, and the agent's memory is meant to stay under 100 MB
/// (Node.js's largest is 7.5 MB).
const MAX_WHOLE_STRING_TABLE: u64 = 16 << 20;

/// An object file read through a [`ReadCache`] at positions of its own ([`ReadAt`]), with
/// names answered from string tables read whole.
#[derive(Debug)]
pub(crate) struct ObjectReader<'f> {
    cache: ReadCache<ReadAt<'f>>,
    /// File ranges of the ELF string tables (`SHT_STRTAB`), found on the first name read.
    string_tables: OnceCell<Vec<Range<u64>>>,
}

/// An [`ObjectReader`] over `file`, which other readers of the same file do not disturb.
pub(crate) fn read_cache(file: &File) -> ObjectReader<'_> {
    ObjectReader {
        cache: ReadCache::new(ReadAt { file, pos: 0 }),
        string_tables: OnceCell::new(),
    }
}

impl ObjectReader<'_> {
    /// The `SHT_STRTAB` sections of a 64-bit ELF image up to [`MAX_WHOLE_STRING_TABLE`]; none
    /// for anything else (whose names are then read one at a time).
    fn find_string_tables(&self) -> Vec<Range<u64>> {
        use object::read::elf::{FileHeader, SectionHeader};
        let Ok(header) = object::elf::FileHeader64::<object::Endianness>::parse(&self.cache) else {
            return Vec::new();
        };
        let Ok(endian) = header.endian() else {
            return Vec::new();
        };
        let Ok(sections) = header.section_headers(endian, &self.cache) else {
            return Vec::new();
        };
        sections
            .iter()
            .filter(|s| s.sh_type(endian) == object::elf::SHT_STRTAB)
            .map(|s| (s.sh_offset(endian), s.sh_size(endian)))
            .filter(|&(_, size)| size > 0 && size <= MAX_WHOLE_STRING_TABLE)
            .filter_map(|(offset, size)| Some(offset..offset.checked_add(size)?))
            .collect()
    }
}

impl<'a> ReadRef<'a> for &'a ObjectReader<'_> {
    fn len(self) -> Result<u64, ()> {
        (&self.cache).len()
    }

    fn read_bytes_at(self, offset: u64, size: u64) -> Result<&'a [u8], ()> {
        (&self.cache).read_bytes_at(offset, size)
    }

    fn read_bytes_at_until(self, range: Range<u64>, delimiter: u8) -> Result<&'a [u8], ()> {
        let tables = self.string_tables.get_or_init(|| self.find_string_tables());
        let Some(table) = tables
            .iter()
            .find(|t| t.start <= range.start && range.end <= t.end)
        else {
            return (&self.cache).read_bytes_at_until(range, delimiter);
        };
        // Read whole once (`ReadCache` keeps what it read by offset and size).
        let bytes = (&self.cache).read_bytes_at(table.start, table.end - table.start)?;
        let from = usize::try_from(range.start - table.start).map_err(|_| ())?;
        let to = usize::try_from(range.end - table.start).map_err(|_| ())?;
        let rest = bytes.get(from..to).ok_or(())?;
        let len = rest.iter().position(|&b| b == delimiter).ok_or(())?;
        Ok(&rest[..len])
    }
}

/// A file read at a position of its own (`pread`), safe beside other readers of the same file.
#[derive(Debug)]
pub(crate) struct ReadAt<'a> {
    file: &'a File,
    pos: u64,
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

    #[test]
    fn names_from_whole_string_tables_are_the_names_read_one_at_a_time() {
        use object::{Object, ObjectSymbol};
        let file = File::open(std::env::current_exe().unwrap()).unwrap();
        let reader = read_cache(&file);
        let plain = ReadCache::new(ReadAt {
            file: &file,
            pos: 0,
        });
        fn names<'d>(obj: &object::File<'d, impl ReadRef<'d>>) -> Vec<String> {
            obj.symbols()
                .chain(obj.dynamic_symbols())
                .map(|s| s.name().unwrap_or("<unreadable>").to_owned())
                .collect()
        }
        let whole = names(&object::File::parse(&reader).unwrap());
        let one_at_a_time = names(&object::File::parse(&plain).unwrap());
        assert!(whole.len() > 1_000, "a test binary has a symbol table");
        assert_eq!(whole, one_at_a_time);
        assert!(!reader.string_tables.get().unwrap().is_empty());
    }

    #[test]
    fn a_name_without_its_end_in_the_table_is_refused() {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"no terminator here").unwrap();
        let reader = ObjectReader {
            cache: ReadCache::new(ReadAt {
                file: &file,
                pos: 0,
            }),
            string_tables: OnceCell::from(std::iter::once(0..18).collect::<Vec<_>>()),
        };
        assert!((&reader).read_bytes_at_until(3..18, 0).is_err());
        assert_eq!(
            (&reader).read_bytes_at_until(3..18, b' ').unwrap(),
            b"terminator"
        );
    }
}
