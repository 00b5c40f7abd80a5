//! The Prometheus vocabulary the server and the agent share, each rule with one owner:
//! durations as Prometheus writes them ([`duration`]), what a label name is
//! ([`is_valid_label_name`], [`sanitize_label_name`]), profile type names ([`ProfileTypeName`]),
//! the four label matchers ([`MatchOp`]),
//! and an error with its causes on one line ([`with_causes`]).
//!
//! # Design constraints
//!
//! - A leaf: no I/O and no dependency on another crate of the workspace, so that the query
//!   language, the store, the configuration, ingest, the web configuration and the agent can
//!   all use it without depending on one another.

mod causes;
pub mod duration;
mod match_op;
mod names;
mod profile_type;

pub use causes::with_causes;
pub use match_op::MatchOp;
pub use names::{is_valid_label_name, sanitize_label_name};
pub use profile_type::{InvalidProfileTypeName, ProfileTypeName};
