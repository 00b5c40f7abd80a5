//! The write-ahead log: every append is a checksummed record in a numbered segment file, and a
//! commit returns once the records are on disk (fdatasync).
//!
//! Record framing (little-endian): `len: u32`, `crc32: u32` (IEEE, over the payload),
//! `payload: [u8; len]`. Segments are `wal/00000000`, `wal/00000001`, …; a new one starts on
//! open and when the current one passes `SEGMENT_BYTES`.
//!
//! Group commit: appenders write their records under a short lock into a buffer; a commit flushes
//! the buffer and fsyncs *outside* that lock, so records other appenders wrote meanwhile ride on
//! the same fsync, and a commit that finds its records already synced returns at once.
//! A buffered commit only flushes the buffer to the operating system; the store's sync thread
//! fsyncs such records within its interval.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::Error;

/// A segment is closed once it passes this size (Prometheus uses 128 MiB too).
pub const SEGMENT_BYTES: u64 = 128 << 20;

/// Largest record accepted on replay: a length above it is damage, not data.
const MAX_RECORD_BYTES: u32 = 1 << 30;

const HEADER_BYTES: usize = 8;

fn segment_path(dir: &Path, index: u64) -> PathBuf {
    dir.join(format!("{index:08}"))
}

/// Segment indices present in `dir`, ascending.
fn segments(dir: &Path) -> Result<Vec<u64>, Error> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(Error::io("cannot list WAL directory", dir))? {
        let entry = entry.map_err(Error::io("cannot list WAL directory", dir))?;
        if let Some(index) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u64>().ok())
        {
            out.push(index);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Reads every record of the WAL in `dir` in order and hands it to `each` with its segment and
/// offset. A torn record at the very end of the last segment (a crash mid-write) is cut off with a
/// warning; damage anywhere else is an error naming segment and offset.
pub fn replay(
    dir: &Path,
    mut each: impl FnMut(&[u8], &Path, u64) -> Result<(), Error>,
) -> Result<(), Error> {
    let indices = segments(dir)?;
    for (i, &index) in indices.iter().enumerate() {
        let path = segment_path(dir, index);
        let is_last = i + 1 == indices.len();
        let mut bytes = Vec::new();
        File::open(&path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(Error::io("cannot read WAL segment", &path))?;
        let mut pos = 0usize;
        while pos < bytes.len() {
            let corrupt = |what: String| Error::WalCorrupt {
                segment: path.clone(),
                offset: pos as u64,
                what,
            };
            let rest = &bytes[pos..];
            let torn = match read_record(rest) {
                Ok(payload) => {
                    each(payload, &path, pos as u64)?;
                    pos += HEADER_BYTES + payload.len();
                    continue;
                }
                Err(RecordFault::Truncated) => true,
                // A bad checksum on a record that ends exactly at the end of the file is a write
                // the crash interrupted; so is a tail of zeros (space allocated, never written).
                Err(RecordFault::Checksum { end }) => end == rest.len(),
                Err(RecordFault::ZeroLength) => rest.iter().all(|&b| b == 0),
                Err(RecordFault::TooLong(len)) => {
                    return Err(corrupt(format!(
                        "record length {len} is beyond the limit of {MAX_RECORD_BYTES}"
                    )));
                }
            };
            if !(torn && is_last) {
                return Err(corrupt(match read_record(rest) {
                    Err(RecordFault::Checksum { .. }) => "record checksum mismatch".to_owned(),
                    Err(RecordFault::ZeroLength) => "zero-length record".to_owned(),
                    _ => "record cut short before the end of a segment that is not the last"
                        .to_owned(),
                }));
            }
            tracing::warn!(
                segment = %path.display(),
                offset = pos,
                dropped_bytes = rest.len(),
                "WAL ends with a torn record (interrupted write); cutting it off"
            );
            let file = OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(Error::io("cannot repair WAL segment", &path))?;
            file.set_len(pos as u64)
                .map_err(Error::io("cannot repair WAL segment", &path))?;
            file.sync_all()
                .map_err(Error::io("cannot repair WAL segment", &path))?;
            break;
        }
    }
    Ok(())
}

enum RecordFault {
    Truncated,
    ZeroLength,
    TooLong(u32),
    Checksum { end: usize },
}

fn read_record(bytes: &[u8]) -> Result<&[u8], RecordFault> {
    let header = bytes.get(..HEADER_BYTES).ok_or(RecordFault::Truncated)?;
    let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
    if len == 0 {
        return Err(RecordFault::ZeroLength);
    }
    if len > MAX_RECORD_BYTES {
        return Err(RecordFault::TooLong(len));
    }
    let end = HEADER_BYTES + len as usize;
    let payload = bytes.get(HEADER_BYTES..end).ok_or(RecordFault::Truncated)?;
    if crc32fast::hash(payload) != crc {
        return Err(RecordFault::Checksum { end });
    }
    Ok(payload)
}

struct Segment {
    index: u64,
    path: PathBuf,
    out: BufWriter<File>,
    bytes: u64,
}

struct Writer {
    dir: PathBuf,
    segment: Segment,
    /// Number of records written (into the buffer or further).
    written: u64,
}

/// The log's writing side. Shared by all appenders.
pub struct Wal {
    writer: Mutex<Writer>,
    /// Number of records known to be on disk; held while syncing, which makes syncs one at a time.
    synced: Mutex<u64>,
}

impl Wal {
    /// Opens the WAL in `dir` for writing, in a new segment after the existing ones.
    pub fn open(dir: &Path) -> Result<Wal, Error> {
        fs::create_dir_all(dir).map_err(Error::io("cannot create WAL directory", dir))?;
        let next = segments(dir)?.last().map_or(0, |last| last + 1);
        let segment = Self::create_segment(dir, next)?;
        Ok(Wal {
            writer: Mutex::new(Writer {
                dir: dir.to_owned(),
                segment,
                written: 0,
            }),
            synced: Mutex::new(0),
        })
    }

    /// Makes the current segment's records durable and starts the next segment: a segment is
    /// only left behind once everything in it is on disk.
    fn roll(w: &mut Writer) -> Result<(), Error> {
        let seg = &mut w.segment;
        seg.out
            .flush()
            .map_err(Error::io("cannot write WAL segment", &seg.path))?;
        seg.out
            .get_ref()
            .sync_data()
            .map_err(Error::io("cannot sync WAL segment", &seg.path))?;
        w.segment = Self::create_segment(&w.dir, w.segment.index + 1)?;
        Ok(())
    }

    fn create_segment(dir: &Path, index: u64) -> Result<Segment, Error> {
        let path = segment_path(dir, index);
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)
            .map_err(Error::io("cannot create WAL segment", &path))?;
        // The new name must survive a crash too.
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(Error::io("cannot sync WAL directory", dir))?;
        Ok(Segment {
            index,
            path,
            out: BufWriter::with_capacity(1 << 20, file),
            bytes: 0,
        })
    }

    /// Writes one record (not yet durable) and returns its sequence number for [`Wal::sync_through`].
    pub fn write(&self, payload: &[u8]) -> Result<u64, Error> {
        let mut w = self.writer.lock().expect("WAL writer lock poisoned");
        if w.segment.bytes >= SEGMENT_BYTES {
            Self::roll(&mut w)?;
        }
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|&l| l > 0 && l <= MAX_RECORD_BYTES)
            .ok_or_else(|| Error::WalCorrupt {
                segment: w.segment.path.clone(),
                offset: w.segment.bytes,
                what: format!("refusing to write a record of {} bytes", payload.len()),
            })?;
        let seg = &mut w.segment;
        let mut header = [0u8; HEADER_BYTES];
        header[..4].copy_from_slice(&len.to_le_bytes());
        header[4..].copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
        seg.out
            .write_all(&header)
            .and_then(|()| seg.out.write_all(payload))
            .map_err(Error::io("cannot write WAL segment", &seg.path))?;
        seg.bytes += (HEADER_BYTES + payload.len()) as u64;
        w.written += 1;
        Ok(w.written)
    }

    /// Closes the current segment (durably) and starts the next one; returns the new segment's
    /// index. A checkpoint is written at the start of a fresh segment so that the segments before
    /// it can be deleted once it is on disk.
    pub fn cut_segment(&self) -> Result<u64, Error> {
        let mut w = self.writer.lock().expect("WAL writer lock poisoned");
        Self::roll(&mut w)?;
        Ok(w.segment.index)
    }

    /// Deletes the segments numbered below `index` (they are covered by a checkpoint).
    ///
    /// Newest first: a crash part way leaves a *prefix* of the old segments, which replays as
    /// it always did before the checkpoint replaces it. Oldest first would leave a suffix whose
    /// records name series defined in the deleted segments.
    pub fn remove_segments_before(&self, index: u64) -> Result<(), Error> {
        let dir = self
            .writer
            .lock()
            .expect("WAL writer lock poisoned")
            .dir
            .clone();
        for old in segments(&dir)?.into_iter().filter(|&i| i < index).rev() {
            let path = segment_path(&dir, old);
            fs::remove_file(&path).map_err(Error::io("cannot delete WAL segment", &path))?;
        }
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(Error::io("cannot sync WAL directory", &dir))
    }

    /// Bytes in all segments on disk (what is buffered and not yet written is not counted).
    pub fn size_bytes(&self) -> u64 {
        let dir = self
            .writer
            .lock()
            .expect("WAL writer lock poisoned")
            .dir
            .clone();
        segments(&dir)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|i| fs::metadata(segment_path(&dir, i)).ok())
            .map(|m| m.len())
            .sum()
    }

    /// Hands every record written so far to the operating system (no fsync): they survive the
    /// process being killed, not the machine crashing.
    pub fn flush(&self) -> Result<(), Error> {
        let mut w = self.writer.lock().expect("WAL writer lock poisoned");
        let seg = &mut w.segment;
        seg.out
            .flush()
            .map_err(Error::io("cannot write WAL segment", &seg.path))
    }

    /// Whether some record written is not yet known to be on disk.
    #[cfg(test)]
    pub(crate) fn has_unsynced(&self) -> bool {
        let written = self
            .writer
            .lock()
            .expect("WAL writer lock poisoned")
            .written;
        *self.synced.lock().expect("WAL sync lock poisoned") < written
    }

    /// Returns once every record written so far is on disk.
    pub fn sync_all(&self) -> Result<(), Error> {
        let seq = self
            .writer
            .lock()
            .expect("WAL writer lock poisoned")
            .written;
        self.sync_through(seq)
    }

    /// Returns once every record up to sequence number `seq` is on disk.
    pub fn sync_through(&self, seq: u64) -> Result<(), Error> {
        let mut synced = self.synced.lock().expect("WAL sync lock poisoned");
        if *synced >= seq {
            return Ok(()); // another committer's fsync covered us
        }
        let (file, path, target) = {
            let mut w = self.writer.lock().expect("WAL writer lock poisoned");
            let seg = &mut w.segment;
            seg.out
                .flush()
                .map_err(Error::io("cannot write WAL segment", &seg.path))?;
            let file = seg
                .out
                .get_ref()
                .try_clone()
                .map_err(Error::io("cannot sync WAL segment", &seg.path))?;
            (file, seg.path.clone(), w.written)
        };
        // Outside the writer lock: appenders keep writing while the disk works.
        file.sync_data()
            .map_err(Error::io("cannot sync WAL segment", &path))?;
        *synced = target;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(dir: &Path) -> Result<Vec<Vec<u8>>, Error> {
        let mut out = Vec::new();
        replay(dir, |payload, _, _| {
            out.push(payload.to_vec());
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn records_come_back_in_order_across_reopens() {
        let dir = tempfile::tempdir().expect("tempdir");
        let wal = Wal::open(dir.path()).expect("open");
        let seq = wal
            .write(b"one")
            .and_then(|_| wal.write(b"two"))
            .expect("write");
        wal.sync_through(seq).expect("sync");
        drop(wal);
        let wal = Wal::open(dir.path()).expect("reopen");
        let seq = wal.write(b"three").expect("write");
        wal.sync_through(seq).expect("sync");
        assert_eq!(
            records(dir.path()).expect("replay"),
            vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]
        );
    }

    #[test]
    fn a_torn_last_record_is_cut_off() {
        let dir = tempfile::tempdir().expect("tempdir");
        let wal = Wal::open(dir.path()).expect("open");
        let seq = wal
            .write(b"kept")
            .and_then(|_| wal.write(b"torn record"))
            .expect("write");
        wal.sync_through(seq).expect("sync");
        let path = segment_path(dir.path(), 0);
        let len = fs::metadata(&path).expect("meta").len();
        OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open")
            .set_len(len - 3)
            .expect("truncate");
        assert_eq!(records(dir.path()).expect("replay"), vec![b"kept".to_vec()]);
        assert_eq!(
            fs::metadata(&path).expect("meta").len(),
            (HEADER_BYTES + 4) as u64,
            "torn bytes removed"
        );
    }

    #[test]
    fn damage_before_the_end_names_segment_and_offset() {
        let dir = tempfile::tempdir().expect("tempdir");
        let wal = Wal::open(dir.path()).expect("open");
        let seq = wal
            .write(b"first")
            .and_then(|_| wal.write(b"second"))
            .expect("write");
        wal.sync_through(seq).expect("sync");
        let path = segment_path(dir.path(), 0);
        let mut bytes = fs::read(&path).expect("read");
        bytes[HEADER_BYTES] ^= 0xff; // first payload byte
        fs::write(&path, &bytes).expect("write");
        let err = records(dir.path()).expect_err("corrupt");
        assert_eq!(
            err.to_string(),
            format!(
                "WAL segment `{}` is corrupt at byte 0: record checksum mismatch",
                path.display()
            )
        );
    }

    #[test]
    fn old_segments_are_deleted_newest_first() {
        // Regression: a kill part way through deleting oldest first left segments whose
        // profiles named series defined in already deleted segments, and replay failed.
        let dir = tempfile::tempdir().expect("tempdir");
        let wal = Wal::open(dir.path()).expect("open");
        for i in 0..4u8 {
            wal.write(&[i]).expect("write");
            wal.cut_segment().expect("cut");
        }
        // Make deleting segment 1 fail: whatever is left must be a prefix.
        let one = segment_path(dir.path(), 1);
        fs::remove_file(&one).expect("remove");
        fs::create_dir(&one).expect("a directory where segment 1 was");
        assert!(wal.remove_segments_before(4).is_err());
        assert_eq!(segments(dir.path()).expect("list"), vec![0, 1, 4]);
    }

    #[test]
    fn concurrent_commits_share_fsyncs_and_lose_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let wal = Wal::open(dir.path()).expect("open");
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let wal = &wal;
                s.spawn(move || {
                    for i in 0..50u8 {
                        let seq = wal.write(&[t, i]).expect("write");
                        wal.sync_through(seq).expect("sync");
                    }
                });
            }
        });
        let got = records(dir.path()).expect("replay");
        assert_eq!(got.len(), 200);
        for t in 0..4u8 {
            let mine: Vec<u8> = got.iter().filter(|r| r[0] == t).map(|r| r[1]).collect();
            assert_eq!(mine, (0..50).collect::<Vec<u8>>(), "thread {t} in order");
        }
    }
}
