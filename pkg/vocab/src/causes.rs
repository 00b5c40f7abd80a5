//! [`with_causes`]: an error and its sources as one line, for logs and answers that print an
//! error once, whole (reqwest's "error sending request" says nothing without its causes).

/// The error's message followed by each of its sources' (`a: b: c`); a source whose text the
/// message already ends with (some errors repeat it) is printed once.
///
/// ```
/// let io = std::io::Error::other("disk full");
/// let outer = std::io::Error::new(std::io::ErrorKind::Other, io);
/// assert_eq!(parca_vocab::with_causes(&outer), "disk full");
/// ```
pub fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.ends_with(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot push to {0}")]
    struct Push(&'static str, #[source] std::io::Error);

    #[test]
    fn every_cause_once() {
        let e = Push(
            "http://parca:7070",
            std::io::Error::other("connection refused"),
        );
        assert_eq!(
            with_causes(&e),
            "cannot push to http://parca:7070: connection refused"
        );
    }
}
