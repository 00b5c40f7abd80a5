//! What the store needs of a file kept elsewhere (an object in a bucket): its length and byte
//! ranges. The object store's client implements it; blocks read their profile data through it.

/// Byte ranges of one immutable file kept elsewhere (an object in a bucket).
pub trait RangeRead: Send + Sync + std::fmt::Debug {
    /// The file's length in bytes.
    fn len(&self) -> u64;

    /// Whether the file is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes `offset..offset + len` of the file. Called from threads that may block (queries
    /// run off the async workers).
    fn read(&self, offset: u64, len: u64) -> std::io::Result<Vec<u8>>;

    /// Where the file is, for errors (`s3://bucket/prefix/01…/profiles`).
    fn describe(&self) -> String;
}
