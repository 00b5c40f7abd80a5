//! Recognizing HotSpot (the JVM) by its library: `libjvm.so` exports, for debuggers and the
//! serviceability agent, the addresses of its `VMStructs` tables (`gHotSpotVMStructs`: every
//! field a tool needs, with its offset; `gHotSpotVMTypes`: sizes; `gHotSpotVMIntConstants`) and
//! the layout of their entries (`gHotSpotVMStructEntryFieldNameOffset` and friends). The tables
//! themselves are read from the running process. The Java version is the JDK image's `release`
//! file's `JAVA_VERSION` (every JDK and jlink image has one, two folders above `libjvm.so`).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;

use object::{Object, ObjectSymbol};

use crate::Error;
use crate::elf::elf_error;
use crate::read_at::read_cache;
use crate::runtime::Segments;

/// What precedes every symbol HotSpot exports for its `VMStructs` tables.
const EXPORT_PREFIX: &str = "gHotSpotVM";

/// What a profiler needs of a HotSpot library (`libjvm.so`) to read its Java frames: the
/// addresses of its exported `gHotSpotVM*` symbols, and the Java version. Addresses are the
/// object's virtual addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JvmRuntime {
    /// The Java version (`17.0.15`); empty when the JDK image has no `release` file.
    pub version: String,
    /// Each `gHotSpotVM*` symbol's address, by its full name.
    pub exports: BTreeMap<String, u64>,
    segments: Segments,
}

impl JvmRuntime {
    /// The virtual address of file offset `offset`, when a loadable segment holds it.
    pub fn vaddr_of_file_offset(&self, offset: u64) -> Option<u64> {
        self.segments.vaddr_of_file_offset(offset)
    }

    /// The address of exported symbol `name`.
    pub fn export(&self, name: &str) -> Option<u64> {
        self.exports.get(name).copied()
    }
}

/// The HotSpot an object holds, or `None` when it exports no `gHotSpotVMStructs` (not
/// `libjvm.so`). `path` is the object as opened (under `/proc/PID/root`), for the `release`
/// file beside it.
pub fn read_jvm_runtime(file: &File, path: &Path) -> Result<Option<JvmRuntime>, Error> {
    let cache = read_cache(file);
    let obj = object::File::parse(&cache).map_err(|source| elf_error(path, source))?;
    let exports: BTreeMap<String, u64> = obj
        .dynamic_symbols()
        .filter(|s| !s.is_undefined() && s.address() != 0)
        .filter_map(|s| {
            let name = s.name().ok()?;
            name.starts_with(EXPORT_PREFIX)
                .then(|| (name.to_owned(), s.address()))
        })
        .collect();
    if !exports.contains_key("gHotSpotVMStructs") {
        return Ok(None);
    }
    // `…/lib/server/libjvm.so` → `…/release`.
    let version = path
        .ancestors()
        .nth(3)
        .and_then(|home| std::fs::read_to_string(home.join("release")).ok())
        .and_then(|release| java_version_in(&release))
        .unwrap_or_default();
    Ok(Some(JvmRuntime {
        version,
        exports,
        segments: Segments::of(&obj),
    }))
}

/// `JAVA_VERSION="17.0.15"` of a JDK's `release` file.
fn java_version_in(release: &str) -> Option<String> {
    release.lines().find_map(|line| {
        let value = line.strip_prefix("JAVA_VERSION=")?.trim().trim_matches('"');
        (!value.is_empty()).then(|| value.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_the_release_files() {
        let release = "IMPLEMENTOR=\"Debian\"\nJAVA_RUNTIME_VERSION=\"17.0.15+6-Debian-1deb12u1\"\nJAVA_VERSION=\"17.0.15\"\n";
        assert_eq!(java_version_in(release).as_deref(), Some("17.0.15"));
        assert_eq!(java_version_in("JAVA_VERSION=\"\"\n"), None);
    }

    #[test]
    fn libjvm_is_recognized_and_other_objects_are_not() {
        let libjvm = Path::new("/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so");
        if let Ok(file) = File::open(libjvm) {
            let jvm = read_jvm_runtime(&file, libjvm)
                .unwrap()
                .expect("libjvm is HotSpot");
            assert!(jvm.export("gHotSpotVMStructEntryOffsetOffset").is_some());
            assert!(jvm.version.starts_with("17."), "{}", jvm.version);
        }
        let exe = std::env::current_exe().unwrap();
        let file = File::open(&exe).unwrap();
        assert_eq!(read_jvm_runtime(&file, &exe).unwrap(), None);
    }
}
