//! The pprof wire format: protobuf messages, decoding of untrusted bytes, encoding.
//!
//! Every profile that enters the system — scraped, pushed, or read from a file — passes through
//! [`decode`]: it sniffs gzip by its magic bytes (names and headers lie), inflates with a hard
//! limit, reads the protobuf wire format in one pass into columns, and checks every string index
//! and id reference, so that code downstream can index without checks. The result, [`Pprof`], is
//! still the wire model; `parca-profile` turns it into the normalized model the rest of the system
//! works on. The prost messages of [`proto`] are for building and encoding profiles: decoding
//! into them allocated per sample and per string, which was most of the decoding time. Bytes
//! that are not protobuf are tried as google/pprof's legacy formats (Go's and Java's binary CPU
//! profiles, gperftools', Go's and Java's text heap, growth, contention and thread profiles),
//! converted as google/pprof converts them, and validated alike.
//!
//! # Design constraints
//!
//! - Hostile input is refused with an [`Error`] that names the fault and its place; it never
//!   panics and never allocates more than [`DecodeOptions::max_decompressed_bytes`] for the message.
//! - No `protoc`: the messages in [`proto`] are derived by hand from `profile.proto`.
//! - Decoding allocates per table, never per sample, location or string.
//! - This crate knows nothing of the profile model, storage or HTTP.
//!
//! # Example
//!
//! ```
//! use parca_pprof::{DecodeOptions, decode, encode, proto};
//!
//! let profile = proto::Profile {
//!     sample_type: vec![proto::ValueType { r#type: 1, unit: 2 }],
//!     string_table: vec!["".into(), "samples".into(), "count".into()],
//!     ..Default::default()
//! };
//! let bytes = encode(&profile, true);
//! let decoded = decode(&bytes, &DecodeOptions::default()).unwrap();
//! assert_eq!(decoded.string(decoded.header().sample_type[0].r#type), "samples");
//! ```

mod builder;
mod decode;
mod encode;
mod error;
mod legacy;
pub mod proto;
mod strings;
mod wire;

pub use builder::ProfileBuilder;
pub use decode::{DecodeOptions, Header, Line, Location, Pprof, decode, decompress};
pub use encode::encode;
pub use error::Error;
pub use strings::StringTable;
