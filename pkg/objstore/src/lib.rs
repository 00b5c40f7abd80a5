//! Blocks in object storage, as Thanos keeps Prometheus' blocks: [`Bucket::open`] makes an
//! object store of parca.yaml's `object_storage` (Thanos' `objstore` keys mapped onto the
//! `object_store` crate: `FILESYSTEM`, `S3` and S3-compatible stores, `GCS`, `AZURE`), and
//! [`Shipper`] uploads every block the store cuts, its files first and its `meta.json` (with
//! the server's external labels) last, so a reader of the bucket never sees half a block.
//! What was shipped is recorded beside the store (`shipper.json`), so a restart ships what is
//! missing and nothing twice. [`BucketReader`] serves every block of the bucket beside the
//! local ones: their indexes cached on local disk, their profile data read by byte ranges.
//! The loops a server runs with them ([`ship_blocks`], [`serve_bucket`]) live here too, so the
//! binary only wires them.

mod bucket;
mod compactor;
mod reader;
mod service;
mod shipper;

pub use bucket::Bucket;
pub use compactor::{
    CompactionReport, CompactorOptions, DELETION_MARK, compact_bucket, scratch_dir,
};
pub use reader::{BucketReader, ReaderMetrics};
pub use service::{
    Compacting, READ_BUCKET_EVERY, SHIP_EVERY, cache_dir, serve_bucket, ship_blocks,
    shipping_bucket,
};
pub use shipper::{SHIPPER_STATE_FILE, Shipper, ShipperMetrics};

/// Why a bucket cannot be opened, a block not shipped, or the bucket not read or kept.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration names a provider this server cannot reach.
    #[error(
        "object_storage.bucket.type {0} is not supported by this server: use FILESYSTEM, S3 (or an S3-compatible store), GCS or AZURE"
    )]
    Unsupported(String),
    /// The provider refused the settings.
    #[error("object_storage: cannot set up the {kind} bucket: {source}")]
    Setup {
        /// The provider.
        kind: String,
        /// Its complaint.
        source: object_store::Error,
    },
    /// The local folder of a `FILESYSTEM` bucket cannot be made.
    #[error("object_storage: cannot create the FILESYSTEM bucket's directory `{path}`: {source}")]
    Directory {
        /// The folder.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// An upload or a read of the bucket failed.
    #[error("cannot upload `{object}` to the bucket: {source}")]
    Upload {
        /// The object's path in the bucket.
        object: String,
        /// The provider's error.
        source: object_store::Error,
    },
    /// A listing, read, write or deletion in the bucket failed (other than an upload).
    #[error("cannot {action} `{object}` in the bucket: {source}")]
    Access {
        /// What was being done: `list`, `read`, `write`, `delete`.
        action: &'static str,
        /// The object (or prefix).
        object: String,
        /// The provider's error.
        source: object_store::Error,
    },
    /// A local file could not be read or written.
    #[error("cannot {action} `{path}`: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The block's own files are not readable as a block.
    #[error(transparent)]
    Block(#[from] parca_tsdb::Error),
    /// `shipper.json` is not what this server writes.
    #[error("`{path}` is not a shipper state file ({why}); move it away to ship every block again")]
    State {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
}

/// The error of `action` on `object` in the bucket, for `map_err`.
pub(crate) fn access(
    action: &'static str,
    object: &object_store::path::Path,
) -> impl FnOnce(object_store::Error) -> Error {
    let object = object.to_string();
    move |source| Error::Access {
        action,
        object,
        source,
    }
}
