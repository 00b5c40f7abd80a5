//! Any bytes into the query parser: no panic, no hang; whatever parses prints to text that
//! parses to the same tree (spans aside: `parse(print(parse(q))) == parse(q)`) and prints
//! identically; the strict parse (with its fast path for plain selectors) agrees with the
//! lenient parse (without it).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(query) = std::str::from_utf8(data) else {
        return;
    };
    let strict = parca_querylang::parse(query);
    let lenient = parca_querylang::parse_lenient(query);
    for e in &lenient.errors {
        assert!(
            e.span.start <= e.span.end && e.span.end <= query.len(),
            "{e:?}"
        );
        let _ = e.render(query);
    }
    match strict {
        Ok(expr) => {
            assert!(lenient.errors.is_empty(), "{:?}", lenient.errors);
            assert_eq!(lenient.expr.as_ref(), Some(&expr));
            let _ = expr.value_type();
            let printed = expr.to_string();
            let again = parca_querylang::parse(&printed).unwrap_or_else(|e| {
                panic!("printed {printed:?} does not parse: {}", e.render(&printed))
            });
            assert_eq!(again.to_string(), printed);
            assert_eq!(
                without_spans(&format!("{again:?}")),
                without_spans(&format!("{expr:?}")),
                "{query:?} printed as {printed:?}"
            );
        }
        Err(e) => {
            assert_eq!(lenient.errors.first(), Some(&e));
            let _ = e.render(query);
        }
    }
});

/// A tree's `Debug` text with every `Span { start: …, end: … }` left out, to compare trees
/// parsed from different text.
fn without_spans(debug: &str) -> String {
    const SPAN: &str = "Span { start: ";
    let mut out = String::with_capacity(debug.len());
    let mut rest = debug;
    while let Some(i) = rest.find(SPAN) {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let end = rest.find('}').map_or(rest.len(), |j| j + 1);
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}
