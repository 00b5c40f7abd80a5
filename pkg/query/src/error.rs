//! The one error type of evaluation.

/// Why a query could not be evaluated. Each message says how to change the query.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The query ran past its deadline ([`crate::Engine::with_deadline`]).
    #[error("the query ran past its time limit: shorten the time range or narrow the selector")]
    Timeout,
    /// The query touches more series than allowed.
    #[error(
        "the query selects {n_series} series, more than the limit of {limit}: narrow the selector with more matchers, such as job=\"…\" or instance=\"…\""
    )]
    TooManySeries {
        /// Series the query would read.
        n_series: usize,
        /// The limit.
        limit: usize,
    },
    /// The query would merge more samples than allowed.
    #[error(
        "the query would merge {n_samples} samples, more than the limit of {limit}: shorten the time range or narrow the selector"
    )]
    TooManySamples {
        /// Samples the query would read.
        n_samples: usize,
        /// The limit.
        limit: usize,
    },
    /// A selector of a range query would produce too many values (series × steps).
    #[error(
        "the range query would hold {n_points} values ({n_series} series × {n_steps} steps), more than the limit of {limit}: aggregate (`sum by (job) (…)`), use a larger step or a shorter range, or narrow the selector"
    )]
    TooManyPoints {
        /// Values the selector would produce.
        n_points: usize,
        /// Series it selects.
        n_series: usize,
        /// Steps of the range.
        n_steps: usize,
        /// The limit.
        limit: usize,
    },
    /// The range query would produce too many points.
    #[error(
        "the range has {n_steps} steps, more than the limit of {limit}: use a larger step or a shorter range"
    )]
    TooManySteps {
        /// Steps asked for.
        n_steps: i64,
        /// The limit.
        limit: i64,
    },
    /// The selector names a profile type that the store does not have.
    #[error("unknown profile type `{name}`{}", suggest(.nearest))]
    UnknownProfileType {
        /// The type asked for.
        name: String,
        /// Known types that look like it, nearest first.
        nearest: Vec<String>,
    },
    /// A part of the query has no profiles in its time range (one side of a `diff`).
    #[error("{0}")]
    NoProfiles(String),
    /// The query's result has the wrong kind for the endpoint.
    #[error("{0}")]
    WrongKind(String),
    /// The series of a binary operation do not match as its modifiers say (several series
    /// where one was to match, or two results with the same labels); PromQL's errors.
    #[error("{0}")]
    Matching(String),
    /// Profiles of different types met in a merge or diff.
    #[error("{what}: {source}")]
    Profile {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: parca_profile::Error,
    },
    /// A label matcher or filter was refused by the store or the profile model.
    #[error("invalid matcher: {0}")]
    Matcher(#[source] parca_tsdb::Error),
    /// The store could not read what the query needs (a damaged block, named in the message).
    #[error("cannot read the store: {}", parca_tsdb::with_causes(.0))]
    Store(parca_tsdb::Error),
}

impl From<parca_tsdb::Error> for Error {
    fn from(e: parca_tsdb::Error) -> Self {
        Error::Store(e)
    }
}

fn suggest(nearest: &[String]) -> String {
    match nearest {
        [] => "; the store has no profiles of that name yet (see /api/v1/profile_types)".into(),
        names => format!(
            "; did you mean {}?",
            names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(" or ")
        ),
    }
}
