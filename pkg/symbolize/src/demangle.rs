//! Demangling of Rust (legacy and v0) and C++ (Itanium) symbol names.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;

use crate::Frame;

/// Names an object's lookups gave and their demangled forms, kept so that a function sampled
/// at many addresses is read and demangled once: each new address used to read its symbol's
/// name from the file and demangle it (C++ names cost the most), half the agent's symbolizing.
/// Where DWARF names nothing, a symbol's frames are kept too, shared by all its addresses. At
/// most [`NameMemo::MAX`] entries each; emptied when full.
#[derive(Debug, Default)]
pub(crate) struct NameMemo {
    /// Symbol address → its name as stored (`None`: unreadable or empty).
    symbols: Mutex<FxHashMap<u64, Option<Arc<str>>>>,
    /// Mangled name → demangled.
    demangled: Mutex<FxHashMap<Arc<str>, Arc<str>>>,
    /// Symbol address → the frames every address of it gets where DWARF names nothing.
    frames: Mutex<FxHashMap<u64, Option<Arc<[Frame]>>>>,
}

impl NameMemo {
    const MAX: usize = 4096;

    /// The name of the symbol at `address`, read by `read` the first time.
    pub fn symbol(&self, address: u64, read: impl FnOnce() -> Option<String>) -> Option<Arc<str>> {
        let mut symbols = self.symbols.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(name) = symbols.get(&address) {
            return name.clone();
        }
        let name: Option<Arc<str>> = read().map(Arc::from);
        if symbols.len() >= Self::MAX {
            symbols.clear();
        }
        symbols.insert(address, name.clone());
        name
    }

    /// The frames of the symbol at `address` (where DWARF names nothing), built by `build`
    /// the first time.
    pub fn symbol_frames(
        &self,
        address: u64,
        build: impl FnOnce() -> Option<Arc<[Frame]>>,
    ) -> Option<Arc<[Frame]>> {
        let mut frames = self.frames.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = frames.get(&address) {
            return known.clone();
        }
        let built = build();
        if frames.len() >= Self::MAX {
            frames.clear();
        }
        frames.insert(address, built.clone());
        built
    }

    /// [`demangle`] of `name`, remembered.
    pub fn demangle(&self, name: &str) -> Arc<str> {
        let mut demangled = self.demangled.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(text) = demangled.get(name) {
            return text.clone();
        }
        let text: Arc<str> = Arc::from(demangle(name));
        if demangled.len() >= Self::MAX {
            demangled.clear();
        }
        demangled.insert(Arc::from(name), text.clone());
        text
    }
}

/// The human name of a symbol: Rust names without their hash (`core::fmt::write`), C++ names
/// with their parameters (`ns::f(int)`), anything else as it is. Never fails: a name that does
/// not demangle is returned unchanged.
pub fn demangle(name: &str) -> Cow<'_, str> {
    if (name.starts_with("_R") || is_rust_legacy(name))
        && let Ok(d) = rustc_demangle::try_demangle(name)
    {
        // `{:#}` leaves out the hash suffix (`::h0123…`).
        return Cow::Owned(format!("{d:#}"));
    }
    if name.starts_with("_Z")
        && let Ok(symbol) = cpp_demangle::Symbol::new(name)
        && let Ok(text) = symbol.demangle()
    {
        return Cow::Owned(text);
    }
    Cow::Borrowed(name)
}

/// Rust's legacy mangling is Itanium-shaped (`_ZN…E`) with a last path element `17h<16 hex>`;
/// without that element the name is C++ and goes to the C++ demangler.
fn is_rust_legacy(name: &str) -> bool {
    let Some(body) = name.strip_prefix("_ZN") else {
        return false;
    };
    // The hash element, the final `E`, then perhaps a `.llvm.123`-style suffix. Path elements
    // may hold dots themselves (`..` stands for `::` in `_$LT$a..b$GT$`).
    body.match_indices("17h").any(|(i, _)| {
        let rest = &body[i + 3..];
        rest.len() > 16
            && rest.as_bytes()[..16].iter().all(u8::is_ascii_hexdigit)
            && (rest[16..] == *"E" || rest[16..].starts_with("E."))
    })
}

#[cfg(test)]
mod tests {
    use super::{NameMemo, demangle};

    #[test]
    fn a_name_memo_reads_and_demangles_each_name_once() {
        let memo = NameMemo::default();
        let mut reads = 0;
        for _ in 0..3 {
            let name = memo.symbol(0x1000, || {
                reads += 1;
                Some("_ZN4core3fmt5write17h0123456789abcdefE".to_owned())
            });
            assert_eq!(&*memo.demangle(&name.unwrap()), "core::fmt::write");
        }
        assert_eq!(reads, 1);
        assert_eq!(memo.symbol(0x2000, || None), None);
        assert_eq!(
            memo.symbol(0x2000, || Some("x".to_owned())),
            None,
            "remembered as unreadable"
        );
        for i in 0..NameMemo::MAX as u64 + 1 {
            memo.symbol(0x10_000 + i, || Some(format!("f{i}")));
        }
        assert!(memo.symbols.lock().unwrap().len() <= NameMemo::MAX);
    }

    #[test]
    fn rust_legacy_loses_its_hash() {
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(
            demangle("_ZN3std2rt10lang_start17hdeadbeefdeadbeefE.llvm.42"),
            "std::rt::lang_start"
        );
    }

    #[test]
    fn rust_legacy_with_escaped_elements() {
        assert_eq!(
            demangle(
                "_ZN92_$LT$tokio..runtime..io..scheduled_io..Readiness$u20$as$u20$core..future..future..Future$GT$4poll17h9e9edfec7ed9bc20E"
            ),
            "<tokio::runtime::io::scheduled_io::Readiness as core::future::future::Future>::poll"
        );
    }

    #[test]
    fn rust_v0() {
        assert_eq!(demangle("_RNvCs1234_7mycrate3foo"), "mycrate::foo");
    }

    #[test]
    fn cpp_keeps_parameters() {
        assert_eq!(demangle("_ZN2ns3fooEi"), "ns::foo(int)");
        assert_eq!(demangle("_Z8hot_leafv"), "hot_leaf()");
    }

    #[test]
    fn plain_and_broken_names_are_unchanged() {
        assert_eq!(demangle("hot_leaf"), "hot_leaf");
        assert_eq!(demangle("main.hotLeaf"), "main.hotLeaf");
        assert_eq!(demangle("_Z"), "_Z");
        assert_eq!(demangle("_ZN3foo"), "_ZN3foo");
        assert_eq!(demangle(""), "");
    }
}
