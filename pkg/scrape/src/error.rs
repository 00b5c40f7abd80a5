//! Why one scrape failed; the message is what the targets page shows as `lastError`.

/// Why a scrape failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ScrapeError {
    /// The connection or request failed.
    #[error("request failed: {0}")]
    Request(String),
    /// The target took longer than the scrape timeout.
    #[error("scrape timed out after {0:?}")]
    Timeout(std::time::Duration),
    /// The target answered with an error status.
    #[error("server returned HTTP {status}{}", body_hint(.body))]
    Status {
        /// The HTTP status.
        status: u16,
        /// The start of its body.
        body: String,
    },
    /// The answer was larger than the body limit.
    #[error("body is larger than the limit of {0} bytes")]
    TooLarge(usize),
    /// The answer is not a valid profile.
    #[error("invalid profile: {0}")]
    Profile(String),
    /// The store refused or failed to store it.
    #[error("cannot store the profile: {0}")]
    Store(String),
    /// No OAuth 2.0 token could be had.
    #[error("oauth2 token from `{url}`: {why}")]
    OAuth2 {
        /// The `token_url`.
        url: String,
        /// Why.
        why: String,
    },
    /// A credentials file could not be read.
    #[error("cannot read `{path}`: {why}")]
    Credentials {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
}

fn body_hint(body: &str) -> String {
    if body.trim().is_empty() {
        String::new()
    } else {
        format!(": {}", body.trim())
    }
}
