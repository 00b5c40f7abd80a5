//! The normalized profile model and everything computed from it: merge, diff, stack filters,
//! flame-graph tree, top table, call graph, sandwich, granularity, folded text and pprof export.
//!
//! A [`Profile`] holds one sample type. Its samples are columns of (stack, labels, value) that
//! point into [`Tables`], where each distinct string, mapping, function, location, stack and label
//! set is stored once. A stack is stored whole once and named by a dense id, so merging profiles
//! that share tables is an array add.
//!
//! # Design constraints
//!
//! - Frame identity (for merge): a symbolized frame is its list of (function, line), a function
//!   being name, system name, file and start line; an unsymbolized frame is its object file (build
//!   id, or path without one) and file-relative address, so ASLR does not split frames.
//! - No operation recurses along a stack: hostile profiles with very deep stacks cannot overflow.
//! - Numbers agree with google/pprof: the top table equals `pprof -top` at function granularity
//!   (`-top -lines` at line granularity), the call graph `pprof -dot`, the sandwich `-peek`,
//!   merge equals `pprof -proto a b …`; the tests check this against the real tool.
//! - No I/O besides writing into a caller's `Write`.
//!
//! # Example
//!
//! ```
//! use parca_profile::{FlameGraph, StackFilter, TopTable, decode, filter_stacks, merge};
//! # use parca_pprof::proto;
//! # let pprof = proto::Profile {
//! #     sample_type: vec![proto::ValueType { r#type: 1, unit: 2 }],
//! #     sample: vec![proto::Sample { location_id: vec![1], value: vec![5], label: vec![] }],
//! #     location: vec![proto::Location { id: 1, line: vec![proto::Line { function_id: 1, line: 3, column: 0 }], ..Default::default() }],
//! #     function: vec![proto::Function { id: 1, name: 3, ..Default::default() }],
//! #     string_table: ["", "cpu", "nanoseconds", "main"].map(String::from).to_vec(),
//! #     ..Default::default()
//! # };
//! # let bytes = parca_pprof::encode(&pprof, true);
//! let profiles = decode(&bytes, &Default::default()).unwrap(); // one per sample type
//! let merged = merge([&profiles[0], &profiles[0]]).unwrap();
//! assert_eq!(merged.total(), 10);
//! let only_main = filter_stacks(&merged, &[StackFilter::contains("main")]);
//! assert_eq!(TopTable::build(&only_main).rows[0].name, "main");
//! let mut folded = Vec::new();
//! FlameGraph::build(&only_main).write_folded(&mut folded).unwrap();
//! assert_eq!(folded, b"main 10\n");
//! ```

mod callgraph;
mod error;
mod export;
mod filter;
mod flamegraph;
mod frame_test;
mod frames;
mod granularity;
mod growth;
mod hide;
mod merge;
mod normalize;
mod profile;
mod prune;
mod sandwich;
mod spans;
mod split;
pub mod tables;
mod top;
pub mod units;

/// Small profiles from folded stacks, for tests (here and, with the `test-support` feature, in
/// crates that render profiles).
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;

pub use callgraph::{CallEdge, CallGraph, CallNode, Pruning};
pub use error::Error;
pub use export::to_pprof;
pub use filter::{StackFilter, StackFilters, filter_stacks, invert_stacks};
pub use flamegraph::{FlameFrame, FlameGraph, FlameGrouping, FlameNode};
pub use frame_test::{FrameTest, NumberField, TextField, TextOp};
pub use granularity::{Granularity, aggregate, clean_path, with_granularity};
pub use growth::{growth, is_cumulative};
pub use hide::FrameHider;
pub use merge::{DiffMode, Extractor, Importer, Merger, apply_diff_mode, diff, merge};
pub use normalize::{
    decode, from_pprof, from_pprof_into, normalize_into, pick_sample_type, select_sample_type,
};
pub use profile::{CaptureDurations, Meta, Profile, Samples, ValueType};
pub use sandwich::{Sandwich, sandwich};
pub use spans::{SampleSpans, SpansBuilder};
pub use split::{LabelGroup, split_by_string_labels};
pub use tables::{Tables, TablesIdentity};
pub use top::{TopRow, TopTable};
