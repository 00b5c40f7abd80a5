//! Recognizing interpreters by their objects: a CPython interpreter (the `python3.X`
//! executable, or `libpython3.X.so` loaded by another program) exports `_PyRuntime` and, from
//! 3.11, its exact version as `Py_Version`.

use std::fs::File;
use std::path::Path;

use object::read::ReadCache;
use object::{Object, ObjectSection, ObjectSymbol};

use crate::Error;
use crate::elf::elf_error;

/// The CPython version an object holds (`3.11.2`, `3.13.0rc1`; `3.10` where only the file name
/// says it), or `None` when the object is no CPython interpreter (no `_PyRuntime` symbol).
/// Reads the dynamic symbol table and, for `Py_Version`, eight bytes.
pub fn read_python_version(file: &File, path: &Path) -> Result<Option<String>, Error> {
    let cache = ReadCache::new(file);
    let obj = object::File::parse(&cache).map_err(|source| elf_error(path, source))?;
    let mut runtime = false;
    let mut version_at = None;
    for symbol in obj.dynamic_symbols() {
        match symbol.name() {
            Ok("_PyRuntime") => runtime = true,
            Ok("Py_Version") => version_at = Some(symbol.address()),
            _ => {}
        }
    }
    if !runtime {
        return Ok(None);
    }
    let from_symbol = version_at.and_then(|address| {
        let section = obj
            .sections()
            .find(|s| address >= s.address() && address + 4 <= s.address() + s.size())?;
        let (offset, _) = section.file_range()?;
        let at = offset + (address - section.address());
        let mut bytes = [0u8; 4];
        use std::os::unix::fs::FileExt;
        file.read_exact_at(&mut bytes, at).ok()?;
        let hex = if obj.is_little_endian() {
            u32::from_le_bytes(bytes)
        } else {
            u32::from_be_bytes(bytes)
        };
        Some(version_of_hex(hex))
    });
    Ok(Some(from_symbol.unwrap_or_else(|| version_of_name(path))))
}

/// `PY_VERSION_HEX` as text: `0x030b02f0` → `3.11.2`, `0x030d00c1` → `3.13.0rc1`.
fn version_of_hex(hex: u32) -> String {
    let (major, minor, micro) = (hex >> 24, (hex >> 16) & 0xff, (hex >> 8) & 0xff);
    let (level, serial) = ((hex >> 4) & 0xf, hex & 0xf);
    let release = match level {
        0xa => format!("a{serial}"),
        0xb => format!("b{serial}"),
        0xc => format!("rc{serial}"),
        _ => String::new(),
    };
    format!("{major}.{minor}.{micro}{release}")
}

/// `3.10` from `python3.10` or `libpython3.10.so.1.0`; empty when the name says nothing.
fn version_of_name(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let Some(rest) = name.split("python").nth(1) else {
        return String::new();
    };
    let digits: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let parts: Vec<&str> = digits
        .split('.')
        .filter(|p| !p.is_empty())
        .take(2)
        .collect();
    if parts.len() == 2 {
        parts.join(".")
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_the_hex_and_the_name() {
        assert_eq!(version_of_hex(0x030b02f0), "3.11.2");
        assert_eq!(version_of_hex(0x030d00c1), "3.13.0rc1");
        assert_eq!(
            version_of_name(Path::new("/usr/lib/libpython3.10.so.1.0")),
            "3.10"
        );
        assert_eq!(version_of_name(Path::new("/usr/bin/python3.12")), "3.12");
        assert_eq!(version_of_name(Path::new("/usr/bin/python3")), "");
    }

    #[test]
    fn debians_python_is_recognized_and_other_programs_are_not() {
        let python = Path::new("/usr/bin/python3.11");
        if let Ok(file) = File::open(python) {
            let version = read_python_version(&file, python).unwrap();
            assert!(
                version.as_deref().is_some_and(|v| v.starts_with("3.11.")),
                "{version:?}"
            );
        }
        let exe = std::env::current_exe().unwrap();
        let file = File::open(&exe).unwrap();
        assert_eq!(read_python_version(&file, &exe).unwrap(), None);
    }
}
