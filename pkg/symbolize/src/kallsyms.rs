//! The kernel's symbols from `/proc/kallsyms`.

use std::path::Path;

use crate::{Error, Frame};

/// Kernel text symbols, sorted by address.
#[derive(Debug, Default)]
pub struct Kallsyms {
    /// (address, name, module) sorted by address; module is `None` for the kernel image.
    symbols: Vec<(u64, Box<str>, Option<Box<str>>)>,
}

impl Kallsyms {
    /// Reads and parses `path` (normally `/proc/kallsyms`).
    pub fn load(path: &Path) -> Result<Kallsyms, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_owned(),
            source,
        })?;
        let symbols = Kallsyms::parse(&text);
        if symbols.is_empty() && !text.is_empty() {
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
        let mut symbols = Vec::new();
        for line in text.lines() {
            let mut fields = line.split_ascii_whitespace();
            let (Some(addr), Some(kind), Some(name)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            if !matches!(kind, "t" | "T" | "w" | "W") || name.starts_with("__pfx_") {
                continue;
            }
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            if addr == 0 {
                continue;
            }
            let module = fields
                .next()
                .and_then(|m| m.strip_prefix('[')?.strip_suffix(']'))
                .map(Box::from);
            symbols.push((addr, Box::from(name), module));
        }
        symbols.sort_by_key(|s| s.0);
        Kallsyms { symbols }
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
            .partition_point(|s| s.0 <= addr)
            .checked_sub(1)?;
        let (_, name, module) = &self.symbols[i];
        Some((name, module.as_deref()))
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
            Ok(k) => assert!(k.lookup(k.symbols[k.len() / 2].0).is_some()),
            Err(e) => assert!(e.to_string().contains("kallsyms"), "{e}"),
        }
    }
}
