//! The kernel's symbols from `/proc/kallsyms`.

use std::path::Path;

use crate::{Error, Frame};

/// Kernel text symbols, sorted by address.
#[derive(Debug, Default)]
pub struct Kallsyms {
    /// Sorted by address.
    symbols: Vec<KernelSymbol>,
    /// Every name, one after the other.
    names: String,
    /// Modules' names, each once.
    modules: Vec<Box<str>>,
}

/// One symbol in 16 bytes (a kernel has a hundred thousand text symbols or more).
#[derive(Debug, Clone, Copy)]
struct KernelSymbol {
    address: u64,
    /// Where its name starts in [`Kallsyms::names`].
    name: u32,
    /// Its name's length.
    len: u16,
    /// 1 + its module's index in [`Kallsyms::modules`]; 0 for the kernel image.
    module: u16,
}

impl Kallsyms {
    /// Reads and parses `path` (normally `/proc/kallsyms`), a line at a time: the file is
    /// ten megabytes and more, of which only the text symbols are kept.
    pub fn load(path: &Path) -> Result<Kallsyms, Error> {
        use std::io::BufRead;
        let io_error = |source| Error::Io {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io_error)?;
        let mut reader = std::io::BufReader::with_capacity(64 << 10, file);
        let mut symbols = Kallsyms::default();
        let mut line = String::new();
        let mut any = false;
        loop {
            line.clear();
            if reader.read_line(&mut line).map_err(io_error)? == 0 {
                break;
            }
            any = true;
            symbols.add_line(&line);
        }
        symbols.finish();
        if symbols.is_empty() && any {
            return Err(Error::KallsymsHidden {
                path: path.to_owned(),
            });
        }
        Ok(symbols)
    }

    /// Parses the text of `/proc/kallsyms`: `ffffffff81000000 T _stext\t[module]`. Only text
    /// symbols (`t`, `T`, `w`, `W`) are kept; `__pfx_*` padding symbols (the bytes before a
    /// function that the kernel reserves for call thunks) are skipped, and so are the zero
    /// addresses shown to readers without CAP_SYSLOG. Malformed lines are skipped.
    pub fn parse(text: &str) -> Kallsyms {
        let mut symbols = Kallsyms::default();
        for line in text.lines() {
            symbols.add_line(line);
        }
        symbols.finish();
        symbols
    }

    /// Adds the symbol of one line, if it is a text symbol.
    fn add_line(&mut self, line: &str) {
        let mut fields = line.split_ascii_whitespace();
        let (Some(addr), Some(kind), Some(name)) = (fields.next(), fields.next(), fields.next())
        else {
            return;
        };
        if !matches!(kind, "t" | "T" | "w" | "W") || name.starts_with("__pfx_") {
            return;
        }
        let Ok(address) = u64::from_str_radix(addr, 16) else {
            return;
        };
        let (Ok(start), Ok(len)) = (u32::try_from(self.names.len()), u16::try_from(name.len()))
        else {
            return;
        };
        if address == 0 {
            return;
        }
        let module = match fields
            .next()
            .and_then(|m| m.strip_prefix('[')?.strip_suffix(']'))
        {
            None => 0,
            // Lines of one module come together: the last one is the likely match.
            Some(m) => match self.modules.iter().rposition(|known| &**known == m) {
                Some(i) => i + 1,
                None => {
                    self.modules.push(Box::from(m));
                    self.modules.len()
                }
            },
        };
        let Ok(module) = u16::try_from(module) else {
            return;
        };
        self.names.push_str(name);
        self.symbols.push(KernelSymbol {
            address,
            name: start,
            len,
            module,
        });
    }

    /// Sorts by address (of symbols at one address, the last listed is found) and gives back
    /// what the vectors reserved beyond their contents.
    fn finish(&mut self) {
        // Names are appended in the file's order: by name offset is by line.
        self.symbols.sort_unstable_by_key(|s| (s.address, s.name));
        self.symbols.shrink_to_fit();
        self.names.shrink_to_fit();
    }

    /// Number of symbols.
    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    /// Whether there are no symbols (as when addresses are hidden).
    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }

    /// The function containing `addr` with the module it belongs to (`None`: the kernel image),
    /// or `None` below the first symbol. Pass a return address minus one.
    pub fn lookup(&self, addr: u64) -> Option<(&str, Option<&str>)> {
        let i = self
            .symbols
            .partition_point(|s| s.address <= addr)
            .checked_sub(1)?;
        let s = self.symbols[i];
        let start = s.name as usize;
        let name = self.names.get(start..start + usize::from(s.len))?;
        let module = match s.module {
            0 => None,
            m => Some(&*self.modules[usize::from(m) - 1]),
        };
        Some((name, module))
    }

    /// [`Kallsyms::lookup`] as a [`Frame`] (no file or line: kallsyms has none).
    pub fn frame(&self, addr: u64) -> Option<Frame> {
        let (name, _) = self.lookup(addr)?;
        Some(Frame {
            function: name.into(),
            system_name: name.into(),
            file: None,
            line: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Kallsyms;

    const TEXT: &str = "\
ffffffff81000000 T _stext
ffffffff81000010 t __pfx_vfs_read
ffffffff81000020 T vfs_read
ffffffff81000100 D some_data
ffffffff81000200 t ksys_read
ffffffffc0000000 t ext4_fn\t[ext4]
garbage line
";

    #[test]
    fn finds_the_enclosing_function() {
        let k = Kallsyms::parse(TEXT);
        assert_eq!(k.len(), 4);
        assert_eq!(k.lookup(0xffffffff81000020), Some(("vfs_read", None)));
        // Data symbols and __pfx_ padding are not functions.
        assert_eq!(k.lookup(0xffffffff81000150), Some(("vfs_read", None)));
        assert_eq!(k.lookup(0xffffffff81000015), Some(("_stext", None)));
        assert_eq!(
            k.lookup(0xffffffffc0000123),
            Some(("ext4_fn", Some("ext4")))
        );
        assert_eq!(k.lookup(0x1000), None);
    }

    #[test]
    fn hidden_addresses_are_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kallsyms");
        std::fs::write(
            &path,
            "0000000000000000 T _stext\n0000000000000000 T vfs_read\n",
        )
        .unwrap();
        let err = Kallsyms::load(&path).unwrap_err();
        assert!(err.to_string().contains("CAP_SYSLOG"), "{err}");
    }

    #[test]
    fn this_machine_when_readable() {
        // Root sees real addresses; others get KallsymsHidden, which is the documented refusal.
        match Kallsyms::load(std::path::Path::new("/proc/kallsyms")) {
            Ok(k) => assert!(k.lookup(k.symbols[k.len() / 2].address).is_some()),
            Err(e) => assert!(e.to_string().contains("kallsyms"), "{e}"),
        }
    }
}
