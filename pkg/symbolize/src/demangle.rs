//! Demangling of Rust (legacy and v0) and C++ (Itanium) symbol names.

use std::borrow::Cow;

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
    use super::demangle;

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
