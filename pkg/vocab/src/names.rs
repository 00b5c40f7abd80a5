//! Label names: the one rule for what a stored label name is, and the one way a name from
//! elsewhere (an SDK's `service.version`, a quoted name in a query) becomes one. Ingest, the
//! store, the configuration, the query language and the agent all ask here.

/// Prometheus' rule for label names: `[a-zA-Z_][a-zA-Z0-9_]*`.
///
/// ```
/// assert!(parca_vocab::is_valid_label_name("__address__"));
/// assert!(!parca_vocab::is_valid_label_name("0abc"));
/// assert!(!parca_vocab::is_valid_label_name("service.version"));
/// ```
pub fn is_valid_label_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The stored label name for `name`: characters other than ASCII letters, digits and `_`
/// become `_`, and a leading digit gets a `_` before it, as Pyroscope and Prometheus' OTLP
/// translation do (`service.version` → `service_version`). Valid names are unchanged.
///
/// ```
/// assert_eq!(parca_vocab::sanitize_label_name("service.version"), "service_version");
/// assert_eq!(parca_vocab::sanitize_label_name("job"), "job");
/// ```
pub fn sanitize_label_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitizing_makes_valid_names_and_keeps_valid_ones() {
        for (from, to) in [
            ("thread name", "thread_name"),
            ("1st", "_1st"),
            ("", "_"),
            ("service.name", "service_name"),
            ("ünïcode", "_n_code"),
            ("already_fine", "already_fine"),
        ] {
            assert_eq!(sanitize_label_name(from), to);
            assert!(is_valid_label_name(&sanitize_label_name(from)));
        }
    }
}
