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
//!
//! Space ahead of the records is written with zeros a chunk at a time (`PREALLOCATE_BYTES`),
//! so that a commit's fdatasync writes the records and nothing else: a file that grew would
//! have its new size written too (on ext4 a second write and wait; with a journal, a journal
//! commit). A closed segment is cut back to its last record. Replay reads zeros where a record
//! should start as the end of the segment's records.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::Error;

/// A segment is closed once it passes this size (Prometheus uses 128 MiB too).
pub const SEGMENT_BYTES: u64 = 128 << 20;

/// Largest record accepted on replay: a length above it is damage, not data.
const MAX_RECORD_BYTES: u32 = 1 << 30;

/// Zeros written ahead of the records at a time: a commit finds its records' space in the file
/// (see the module's doc), and a new chunk is needed about once per thousand pushes.
const PREALLOCATE_BYTES: u64 = 1 << 20;

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

/// A damaged stretch of the WAL that replay stepped over (see [`replay`]'s `repair`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The segment file.
    pub segment: PathBuf,
    /// Where the damage starts.
    pub offset: u64,
    /// Bytes skipped from there.
    pub skipped_bytes: u64,
    /// What is wrong.
    pub what: String,
}

/// Reads every record of the WAL in `dir` in order and hands it to `each` with its segment and
/// offset. A torn record at the very end of the last segment (a crash mid-write) is cut off with a
/// warning. Damage anywhere else is an error naming segment and offset, unless `repair` is
/// set: then replay steps over it, the bad record or stretch of bytes up to the next intact
/// record (or a record that `each` refuses), keeps everything else, and returns what it skipped.
pub fn replay(
    dir: &Path,
    repair: bool,
    mut each: impl FnMut(&[u8], &Path, u64) -> Result<(), Error>,
) -> Result<Vec<Damage>, Error> {
    let mut damage = Vec::new();
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
            let rest = &bytes[pos..];
            let fault = match read_record(rest) {
                Ok(payload) => {
                    match each(payload, &path, pos as u64) {
                        Ok(()) => {}
                        Err(e) if repair && is_record_damage(&e) => damage.push(Damage {
                            segment: path.clone(),
                            offset: pos as u64,
                            skipped_bytes: (HEADER_BYTES + payload.len()) as u64,
                            what: e.to_string(),
                        }),
                        Err(e) => return Err(e),
                    }
                    pos += HEADER_BYTES + payload.len();
                    continue;
                }
                Err(fault) => fault,
            };
            let zeros_from =
                |from: usize| rest.get(from..).is_none_or(|r| r.iter().all(|&b| b == 0));
            if matches!(fault, RecordFault::ZeroLength) && zeros_from(0) {
                // Space written ahead of the records (or allocated by the file system) and
                // never used: the segment's records end here.
                break;
            }
            let torn = match fault {
                RecordFault::Truncated => true,
                // A bad checksum on a record followed by nothing but zeros (or by the end of
                // the file) is a write the crash interrupted.
                RecordFault::Checksum { end } => zeros_from(end),
                RecordFault::ZeroLength | RecordFault::TooLong(_) => false,
            };
            if torn && is_last {
                cut_torn_tail(&path, pos, rest.len())?;
                break;
            }
            let what = match fault {
                RecordFault::Checksum { .. } => "record checksum mismatch".to_owned(),
                RecordFault::ZeroLength => "zero-length record".to_owned(),
                RecordFault::TooLong(len) => {
                    format!("record length {len} is beyond the limit of {MAX_RECORD_BYTES}")
                }
                RecordFault::Truncated => {
                    "record cut short before the end of a segment that is not the last".to_owned()
                }
            };
            if !repair {
                return Err(Error::WalCorrupt {
                    segment: path.clone(),
                    offset: pos as u64,
                    what,
                });
            }
            let next = next_intact_record(&bytes, pos + 1).unwrap_or(bytes.len());
            tracing::warn!(
                segment = %path.display(),
                offset = pos,
                skipped_bytes = next - pos,
                what,
                "WAL damaged; skipping to the next intact record"
            );
            damage.push(Damage {
                segment: path.clone(),
                offset: pos as u64,
                skipped_bytes: (next - pos) as u64,
                what,
            });
            pos = next;
        }
    }
    Ok(damage)
}

/// Whether `each` refused a record for what it holds (as opposed to failing to read a file).
fn is_record_damage(e: &Error) -> bool {
    matches!(e, Error::WalCorrupt { .. })
}

/// Removes a torn last record, at `pos` in the last segment.
fn cut_torn_tail(path: &Path, pos: usize, dropped_bytes: usize) -> Result<(), Error> {
    tracing::warn!(
        segment = %path.display(),
        offset = pos,
        dropped_bytes,
        "WAL ends with a torn record (interrupted write); cutting it off"
    );
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(Error::io("cannot repair WAL segment", path))?;
    file.set_len(pos as u64)
        .map_err(Error::io("cannot repair WAL segment", path))?;
    file.sync_all()
        .map_err(Error::io("cannot repair WAL segment", path))
}

/// The first offset at or after `from` where a whole record with a valid checksum and a known
/// kind begins: where replay picks up again after damage. A checksum over a plausible length
/// matching by chance is about one in four billion.
fn next_intact_record(bytes: &[u8], from: usize) -> Option<usize> {
    (from..bytes.len().saturating_sub(HEADER_BYTES)).find(|&p| {
        read_record(&bytes[p..]).is_ok_and(|payload| crate::record::is_known_kind(payload[0]))
    })
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

/// A record that names a profile appended to the head, so that a failed write can take that
/// profile out of the head again (see [`Wal::heal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProfileRef {
    /// The head's series number.
    pub series: u32,
    /// The profile's time.
    pub timestamp_ms: i64,
}

/// A place in the current segment: the last record written up to it, and the byte after it.
#[derive(Debug, Clone, Copy, Default)]
struct Position {
    seq: u64,
    len: u64,
}

struct Segment {
    index: u64,
    path: PathBuf,
    file: File,
    /// Bytes the file holds as far as this writer knows: its records, then zeros written ahead.
    /// Only where zeros are written next depends on it, never where records go.
    allocated: u64,
}

impl Segment {
    /// Writes zeros ahead of the records up to a whole chunk past `end`, unless the file holds
    /// that much already. Zeros go only past `records_end`, where no record is.
    fn preallocate(&mut self, records_end: u64, end: u64) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
        if end <= self.allocated {
            return Ok(());
        }
        let target = end.div_ceil(PREALLOCATE_BYTES) * PREALLOCATE_BYTES;
        let mut at = self.allocated.max(records_end);
        while at < target {
            let n = (target - at).min(ZEROS.len() as u64);
            self.file.write_all_at(&ZEROS[..n as usize], at)?;
            at += n;
            self.allocated = at;
        }
        Ok(())
    }
}

/// Why the log stopped taking records: which records are lost, where the segment's good part
/// ends, and the operating system's reason.
#[derive(Debug, Clone)]
struct Failure {
    /// Records from this sequence number on were not stored.
    lost_from: u64,
    /// Bytes of the current segment that hold whole records that were not lost.
    good_len: u64,
    /// The failed operation and its reason, e.g. ``cannot write WAL segment `…`: No space left
    /// on device (os error 28)``.
    cause: String,
    kind: std::io::ErrorKind,
}

struct Writer {
    dir: PathBuf,
    segment: Segment,
    /// Records taken but not yet handed to the operating system.
    buf: Vec<u8>,
    /// Sequence number of the last record taken.
    written: u64,
    /// The records whole in the segment file (handed to the operating system).
    flushed: Position,
    /// The records known to be on disk.
    durable: Position,
    /// Profile records not yet on disk, oldest first: what a failure takes out of the head.
    unsynced: VecDeque<(u64, ProfileRef)>,
    failure: Option<Failure>,
    /// The test seam for I/O errors (see [`Wal::inject_fault`]).
    #[cfg(test)]
    fault: Option<(Fault, std::io::ErrorKind)>,
}

/// Which operation an injected fault hits.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The next write to a segment writes half its bytes, then fails.
    Write,
    /// The next fsync of a segment fails.
    Sync,
}

/// The log's writing side. Shared by all appenders.
///
/// Fails closed: the first write or sync that fails stops the log taking records (every write
/// is refused with [`Error::ReadOnly`] naming the cause), and nothing more is written after the
/// failed bytes. [`Wal::heal`] later cuts the segment back to its last good record and starts a
/// new segment with a checkpoint of the head, so the log never holds a torn record in front of
/// later ones, and a record whose write was answered with an error is never replayed.
pub struct Wal {
    writer: Mutex<Writer>,
    /// Held while syncing (and healing): syncs go one at a time.
    syncing: Mutex<()>,
    /// Failed writes and syncs since the log was opened.
    n_write_errors: AtomicU64,
}

/// Records are handed to the operating system once this many bytes wait.
const BUFFER_BYTES: usize = 1 << 20;

impl Writer {
    /// Refuses with the failure's cause while the log is failed.
    fn check_open(&self) -> Result<(), Error> {
        match &self.failure {
            Some(f) => Err(f.refusal()),
            None => Ok(()),
        }
    }

    /// Takes one record into the buffer; returns its sequence number. A full segment is closed
    /// first if `may_roll` (a checkpoint stays in one segment: replay adopts it only whole).
    fn put(&mut self, payload: &[u8], n_errors: &AtomicU64, may_roll: bool) -> Result<u64, Error> {
        if may_roll && self.flushed.len + self.buf.len() as u64 >= SEGMENT_BYTES {
            self.roll(n_errors)?;
        }
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|&l| l > 0 && l <= MAX_RECORD_BYTES)
            .ok_or_else(|| Error::WalCorrupt {
                segment: self.segment.path.clone(),
                offset: self.flushed.len + self.buf.len() as u64,
                what: format!("refusing to write a record of {} bytes", payload.len()),
            })?;
        self.buf.extend_from_slice(&len.to_le_bytes());
        self.buf
            .extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        self.buf.extend_from_slice(payload);
        self.written += 1;
        if self.buf.len() >= BUFFER_BYTES {
            self.write_buffer(n_errors)?;
        }
        Ok(self.written)
    }

    /// Hands the buffered records to the operating system.
    fn write_buffer(&mut self, n_errors: &AtomicU64) -> Result<(), Error> {
        if self.buf.is_empty() {
            return Ok(());
        }
        use std::os::unix::fs::FileExt;
        let at = self.flushed.len;
        let end = at + self.buf.len() as u64;
        #[cfg(test)]
        if let Some((Fault::Write, kind)) = self.fault {
            self.fault = None;
            let half = self.buf.len() / 2;
            let _ = self.segment.file.write_all_at(&self.buf[..half], at);
            let (seq, len) = (self.flushed.seq + 1, self.flushed.len);
            return Err(self.fail(n_errors, "cannot write WAL segment", kind.into(), seq, len));
        }
        let written = self
            .segment
            .preallocate(at, end)
            .and_then(|()| self.segment.file.write_all_at(&self.buf, at));
        match written {
            Ok(()) => {
                self.flushed = Position {
                    seq: self.written,
                    len: end,
                };
                self.buf.clear();
                Ok(())
            }
            // Part of the buffer may be in the file: the good part ends where it began.
            Err(e) => Err(self.fail(
                n_errors,
                "cannot write WAL segment",
                e,
                self.flushed.seq + 1,
                self.flushed.len,
            )),
        }
    }

    /// Makes the segment's records durable and starts the next segment: a segment is only left
    /// behind once everything in it is on disk.
    fn roll(&mut self, n_errors: &AtomicU64) -> Result<(), Error> {
        self.write_buffer(n_errors)?;
        // The zeros written ahead go: a closed segment ends with its last record. (Replay
        // would stop at them anyway, should the cut not reach the disk.)
        let file = &self.segment.file;
        let closed = file
            .set_len(self.flushed.len)
            .and_then(|()| file.sync_all());
        if let Err(e) = closed {
            let (seq, len) = (self.durable.seq + 1, self.durable.len);
            return Err(self.fail(n_errors, "cannot sync WAL segment", e, seq, len));
        }
        self.durable = self.flushed;
        self.forget_durable();
        match create_segment(&self.dir, self.segment.index + 1) {
            Ok(segment) => {
                self.segment = segment;
                self.flushed.len = 0;
                self.durable.len = 0;
                Ok(())
            }
            Err((e, action, path)) => {
                // Nothing is lost; the segment is whole and synced.
                let (seq, len) = (self.written + 1, self.flushed.len);
                let cause = Error::Io {
                    action,
                    path,
                    source: e,
                };
                Err(self.fail_with(n_errors, cause, seq, len))
            }
        }
    }

    /// Drops the undo entries of profiles now on disk.
    fn forget_durable(&mut self) {
        while self
            .unsynced
            .front()
            .is_some_and(|&(seq, _)| seq <= self.durable.seq)
        {
            self.unsynced.pop_front();
        }
    }

    fn fail(
        &mut self,
        n_errors: &AtomicU64,
        action: &'static str,
        source: std::io::Error,
        lost_from: u64,
        good_len: u64,
    ) -> Error {
        let path = self.segment.path.clone();
        let cause = Error::Io {
            action,
            path,
            source,
        };
        self.fail_with(n_errors, cause, lost_from, good_len)
    }

    /// Stops the log: records from `lost_from` on are dropped, the segment's good part ends at
    /// `good_len`. The first failure of an episode is logged; later ones only counted.
    fn fail_with(
        &mut self,
        n_errors: &AtomicU64,
        cause: Error,
        lost_from: u64,
        good_len: u64,
    ) -> Error {
        self.buf.clear();
        match &mut self.failure {
            Some(f) => {
                f.lost_from = f.lost_from.min(lost_from);
                f.good_len = f.good_len.min(good_len);
            }
            None => {
                tracing::error!(
                    cause = %crate::error::with_causes(&cause),
                    "the store stopped taking writes; it retries, and resumes by itself once the disk takes writes again"
                );
                self.failure = Some(Failure {
                    lost_from,
                    good_len,
                    cause: String::new(),
                    kind: std::io::ErrorKind::Other,
                });
            }
        }
        self.note_failure(n_errors, cause)
    }

    /// Counts a failed operation of a failed log and makes it the failure's cause; returns the
    /// refusal that writers get from now on.
    fn note_failure(&mut self, n_errors: &AtomicU64, cause: Error) -> Error {
        n_errors.fetch_add(1, Ordering::Relaxed);
        let f = self
            .failure
            .as_mut()
            .expect("only a failed log notes failures");
        f.cause = crate::error::with_causes(&cause);
        if let Error::Io { source, .. } = &cause {
            f.kind = source.kind();
        }
        f.refusal()
    }
}

impl Failure {
    fn refusal(&self) -> Error {
        Error::ReadOnly {
            cause: self.cause.clone(),
            kind: self.kind,
        }
    }
}

/// Creates segment `index` in `dir` and makes its name durable.
fn create_segment(
    dir: &Path,
    index: u64,
) -> Result<Segment, (std::io::Error, &'static str, PathBuf)> {
    let path = segment_path(dir, index);
    // Written at offsets, not appended: zeros are written ahead of the records.
    let file = OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(&path)
        .map_err(|e| (e, "cannot create WAL segment", path.clone()))?;
    // The new name must survive a crash too.
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| (e, "cannot sync WAL directory", dir.to_owned()))?;
    Ok(Segment {
        index,
        path,
        file,
        allocated: 0,
    })
}

impl Wal {
    /// Opens the WAL in `dir` for writing, in a new segment after the existing ones.
    pub fn open(dir: &Path) -> Result<Wal, Error> {
        fs::create_dir_all(dir).map_err(Error::io("cannot create WAL directory", dir))?;
        let next = segments(dir)?.last().map_or(0, |last| last + 1);
        let segment = create_segment(dir, next).map_err(|(source, action, path)| Error::Io {
            action,
            path,
            source,
        })?;
        Ok(Wal {
            writer: Mutex::new(Writer {
                dir: dir.to_owned(),
                segment,
                buf: Vec::with_capacity(BUFFER_BYTES),
                written: 0,
                flushed: Position::default(),
                durable: Position::default(),
                unsynced: VecDeque::new(),
                failure: None,
                #[cfg(test)]
                fault: None,
            }),
            syncing: Mutex::new(()),
            n_write_errors: AtomicU64::new(0),
        })
    }

    fn writer(&self) -> MutexGuard<'_, Writer> {
        self.writer.lock().expect("WAL writer lock poisoned")
    }

    /// Writes one record (not yet durable) and returns its sequence number for
    /// [`Wal::sync_through`]. Refused with [`Error::ReadOnly`] while the log is failed.
    pub fn write(&self, payload: &[u8]) -> Result<u64, Error> {
        let mut w = self.writer();
        w.check_open()?;
        w.put(payload, &self.n_write_errors, true)
    }

    /// Writes a profile record, remembering which head profile it is until it is on disk, so
    /// that a failure before then takes the profile out of the head ([`Wal::heal`]).
    pub fn write_profile(&self, payload: &[u8], profile: ProfileRef) -> Result<u64, Error> {
        let mut w = self.writer();
        w.check_open()?;
        let seq = w.put(payload, &self.n_write_errors, true)?;
        w.unsynced.push_back((seq, profile));
        Ok(seq)
    }

    /// Follows a renumbering of the head's series (a cut): `renumbered[old]` is the new number.
    pub fn renumber_unsynced(&self, renumbered: &[Option<u32>]) {
        self.writer().unsynced.retain_mut(|(_, p)| {
            match renumbered.get(p.series as usize).copied().flatten() {
                Some(series) => {
                    p.series = series;
                    true
                }
                None => false,
            }
        });
    }

    /// Closes the current segment (durably) and starts the next one; returns the new segment's
    /// index. A checkpoint is written at the start of a fresh segment so that the segments before
    /// it can be deleted once it is on disk.
    pub fn cut_segment(&self) -> Result<u64, Error> {
        let mut w = self.writer();
        w.check_open()?;
        w.roll(&self.n_write_errors)?;
        Ok(w.segment.index)
    }

    /// Deletes the segments numbered below `index` (they are covered by a checkpoint).
    ///
    /// Newest first: a crash part way leaves a *prefix* of the old segments, which replays as
    /// it always did before the checkpoint replaces it. Oldest first would leave a suffix whose
    /// records name series defined in the deleted segments.
    pub fn remove_segments_before(&self, index: u64) -> Result<(), Error> {
        let dir = self.writer().dir.clone();
        for old in segments(&dir)?.into_iter().filter(|&i| i < index).rev() {
            let path = segment_path(&dir, old);
            fs::remove_file(&path).map_err(Error::io("cannot delete WAL segment", &path))?;
        }
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(Error::io("cannot sync WAL directory", &dir))
    }

    /// Moves the segments numbered below `index` into the directory `to` (created), instead of
    /// deleting them: for damaged segments that a checkpoint has replaced, kept for inspection.
    pub fn set_aside_segments_before(&self, index: u64, to: &Path) -> Result<(), Error> {
        let dir = self.writer().dir.clone();
        fs::create_dir_all(to).map_err(Error::io("cannot create quarantine directory", to))?;
        for old in segments(&dir)?.into_iter().filter(|&i| i < index).rev() {
            let path = segment_path(&dir, old);
            fs::rename(&path, to.join(format!("{old:08}")))
                .map_err(Error::io("cannot move WAL segment into quarantine", &path))?;
        }
        for d in [&dir, to] {
            File::open(d)
                .and_then(|d| d.sync_all())
                .map_err(Error::io("cannot sync directory", d))?;
        }
        Ok(())
    }

    /// Bytes of records in all segments on disk: what is buffered and not yet written is not
    /// counted, nor are the zeros written ahead of the current segment's records (at most
    /// `PREALLOCATE_BYTES` more on disk).
    pub fn size_bytes(&self) -> u64 {
        let (dir, current, records) = {
            let w = self.writer();
            (w.dir.clone(), w.segment.index, w.flushed.len)
        };
        segments(&dir)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|i| {
                if i == current {
                    return Some(records);
                }
                fs::metadata(segment_path(&dir, i)).ok().map(|m| m.len())
            })
            .sum()
    }

    /// Hands every record written so far to the operating system (no fsync): they survive the
    /// process being killed, not the machine crashing.
    pub fn flush(&self) -> Result<(), Error> {
        let mut w = self.writer();
        w.check_open()?;
        w.write_buffer(&self.n_write_errors)
    }

    /// Whether some record written is not yet known to be on disk.
    #[cfg(test)]
    pub(crate) fn has_unsynced(&self) -> bool {
        let w = self.writer();
        w.durable.seq < w.written
    }

    /// Returns once every record written so far is on disk.
    pub fn sync_all(&self) -> Result<(), Error> {
        let seq = self.writer().written;
        self.sync_through(seq)
    }

    /// Returns once every record up to sequence number `seq` is on disk; an error if the log
    /// failed before it got there (then those records are not stored, and never will be).
    pub fn sync_through(&self, seq: u64) -> Result<(), Error> {
        let _one_at_a_time = self.syncing.lock().expect("WAL sync lock poisoned");
        let (file, index, target) = {
            let mut w = self.writer();
            if let Some(f) = &w.failure
                && seq >= f.lost_from
            {
                return Err(f.refusal());
            }
            if w.durable.seq >= seq {
                return Ok(()); // another committer's fsync covered us
            }
            w.write_buffer(&self.n_write_errors)?;
            let file = w.segment.file.try_clone();
            let file = match file {
                Ok(file) => file,
                Err(e) => {
                    let (from, len) = (w.durable.seq + 1, w.durable.len);
                    return Err(w.fail(
                        &self.n_write_errors,
                        "cannot sync WAL segment",
                        e,
                        from,
                        len,
                    ));
                }
            };
            (file, w.segment.index, w.flushed)
        };
        // Outside the writer lock: appenders keep writing while the disk works.
        let synced = file.sync_data();
        let mut w = self.writer();
        #[cfg(test)]
        let synced = match w.fault {
            Some((Fault::Sync, kind)) => {
                w.fault = None;
                Err(kind.into())
            }
            _ => synced,
        };
        match synced {
            // A failure or a roll meanwhile has its own say about what is durable.
            Ok(()) if w.failure.is_none() && w.segment.index == index => {
                w.durable = target;
                w.forget_durable();
            }
            Ok(()) => {}
            Err(e) if w.failure.is_none() && w.segment.index == index => {
                // The records past the last good sync may or may not be on disk: drop them.
                let (from, len) = (w.durable.seq + 1, w.durable.len);
                return Err(w.fail(
                    &self.n_write_errors,
                    "cannot sync WAL segment",
                    e,
                    from,
                    len,
                ));
            }
            Err(_) => {}
        }
        match &w.failure {
            Some(f) if seq >= f.lost_from => Err(f.refusal()),
            _ => Ok(()),
        }
    }

    /// Why the log takes no records, if it does not: a message naming the failed operation,
    /// its file and the operating system's reason.
    pub fn failure(&self) -> Option<String> {
        self.writer().failure.as_ref().map(|f| f.cause.clone())
    }

    /// Makes the next `fault` operation fail with `kind`, as a disk would.
    #[cfg(test)]
    pub(crate) fn inject_fault(&self, fault: Fault, kind: std::io::ErrorKind) {
        self.writer().fault = Some((fault, kind));
    }

    /// Failed writes and syncs since the log was opened.
    pub fn n_write_errors(&self) -> u64 {
        self.n_write_errors.load(Ordering::Relaxed)
    }

    /// Brings a failed log back: cuts the damaged segment at its last good record, hands
    /// `rewrite` the profiles whose records were lost (to take out of the head) and a writer for
    /// a checkpoint of the head into a fresh segment, makes that durable, and takes records
    /// again. The caller holds the head's write lock, so the checkpoint and the head agree.
    /// Returns `Ok(false)` when the log was not failed; on error it stays failed (any
    /// half-written new segment is removed) and is tried again later.
    #[expect(
        clippy::too_many_lines,
        reason = "the steps of healing a failed log (reopen, rewrite, swap, sync) must run under one lock in this order"
    )]
    pub fn heal(
        &self,
        rewrite: impl FnOnce(&[ProfileRef], &mut RecordSink<'_>) -> Result<(), Error>,
    ) -> Result<bool, Error> {
        let _one_at_a_time = self.syncing.lock().expect("WAL sync lock poisoned");
        let n_errors = &self.n_write_errors;
        let mut w = self.writer();
        let Some(failure) = w.failure.clone() else {
            return Ok(false);
        };
        // 1. The damaged segment ends at its last good record, on disk.
        let cut = w
            .segment
            .file
            .set_len(failure.good_len)
            .and_then(|()| w.segment.file.sync_all());
        if cut.is_ok() {
            w.segment.allocated = failure.good_len;
        }
        if let Err(source) = cut {
            let path = w.segment.path.clone();
            return Err(w.note_failure(
                n_errors,
                Error::Io {
                    action: "cannot cut WAL segment back to its last good record",
                    path,
                    source,
                },
            ));
        }
        // 2. A fresh segment whose checkpoint describes the head as it is.
        let next = segments(&w.dir)?
            .last()
            .map_or(0, |l| l + 1)
            .max(w.segment.index + 1);
        let segment = match create_segment(&w.dir, next) {
            Ok(segment) => segment,
            Err((source, action, path)) => {
                return Err(w.note_failure(
                    n_errors,
                    Error::Io {
                        action,
                        path,
                        source,
                    },
                ));
            }
        };
        let lost: Vec<ProfileRef> = w
            .unsynced
            .iter()
            .filter(|(seq, _)| *seq >= failure.lost_from)
            .map(|&(_, p)| p)
            .collect();
        // `rewrite` takes the lost profiles out of the head now, whatever becomes of the rest.
        w.unsynced.clear();
        let old = std::mem::replace(&mut w.segment, segment);
        let saved = (w.flushed, w.durable);
        w.flushed = Position {
            seq: w.written,
            len: 0,
        };
        w.durable = w.flushed;
        let written = rewrite(
            &lost,
            &mut RecordSink {
                writer: &mut w,
                n_errors,
            },
        )
        .and_then(|()| w.write_buffer(n_errors))
        .and_then(|()| {
            w.segment
                .file
                .sync_data()
                .map_err(Error::io("cannot sync WAL segment", &w.segment.path))
        });
        if let Err(e) = written {
            let new = std::mem::replace(&mut w.segment, old);
            let _ = fs::remove_file(&new.path);
            // The old segment, cut back to its good part, is current again; still failed.
            (w.flushed, w.durable) = saved;
            w.flushed.len = w.flushed.len.min(failure.good_len);
            w.durable.len = w.durable.len.min(failure.good_len);
            w.buf.clear();
            return Err(match e {
                Error::ReadOnly { .. } => e,
                other => w.note_failure(n_errors, other),
            });
        }
        w.durable = w.flushed;
        w.failure = None;
        drop(old);
        let index = w.segment.index;
        drop(w);
        tracing::info!(
            cause = %failure.cause,
            lost_profiles = lost.len(),
            "the store takes writes again"
        );
        if let Err(e) = self.remove_segments_before(index) {
            tracing::warn!(
                error = %crate::error::with_causes(&e),
                "cannot delete WAL segments covered by a checkpoint; the next cut deletes them"
            );
        }
        Ok(true)
    }

    /// Starts a checkpoint: makes the current segment durable, starts a new one and writes the
    /// records `records` gives into it. Returns the new segment's index and the last record's
    /// sequence number: once that is synced, the segments before the new one may be deleted.
    pub fn checkpoint(
        &self,
        records: impl FnOnce(&mut RecordSink<'_>) -> Result<(), Error>,
    ) -> Result<(u64, u64), Error> {
        let n_errors = &self.n_write_errors;
        let mut w = self.writer();
        w.check_open()?;
        w.roll(n_errors)?;
        records(&mut RecordSink {
            writer: &mut w,
            n_errors,
        })?;
        Ok((w.segment.index, w.written))
    }
}

/// Writes records into the log for [`Wal::heal`] and [`Wal::checkpoint`], which hold its lock.
pub struct RecordSink<'a> {
    writer: &'a mut Writer,
    n_errors: &'a AtomicU64,
}

impl RecordSink<'_> {
    /// Writes one record.
    pub fn put(&mut self, payload: &[u8]) -> Result<(), Error> {
        self.writer.put(payload, self.n_errors, false).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(dir: &Path) -> Result<Vec<Vec<u8>>, Error> {
        let mut out = Vec::new();
        replay(dir, false, |payload, _, _| {
            out.push(payload.to_vec());
            Ok(())
        })?;
        Ok(out)
    }

    /// A log in `dir` holding `payloads`, synced.
    fn synced(dir: &Path, payloads: &[&[u8]]) -> Wal {
        let wal = Wal::open(dir).expect("open");
        let mut seq = 0;
        for payload in payloads {
            seq = wal.write(payload).expect("write");
        }
        wal.sync_through(seq).expect("sync");
        wal
    }

    /// Heals with a checkpoint of one record, `healed`, and returns the lost profiles.
    fn heal_with_marker(wal: &Wal) -> Vec<ProfileRef> {
        let mut lost = Vec::new();
        assert!(
            wal.heal(|l, sink| {
                lost = l.to_vec();
                sink.put(b"healed")
            })
            .expect("heal")
        );
        lost
    }

    fn profile(series: u32) -> ProfileRef {
        ProfileRef {
            series,
            timestamp_ms: 1,
        }
    }

    #[test]
    fn a_failed_write_stops_the_log_and_healing_leaves_no_torn_record() {
        let dir = tempfile::tempdir().expect("tempdir");
        let wal = Wal::open(dir.path()).expect("open");
        let kept = wal.write_profile(b"kept", profile(0)).expect("write");
        wal.sync_through(kept).expect("sync");
        let lost = wal.write_profile(b"lost", profile(1)).expect("buffered");
        wal.inject_fault(Fault::Write, std::io::ErrorKind::StorageFull);
        let err = wal.sync_through(lost).expect_err("the write fails");
        assert!(
            matches!(
                &err,
                Error::ReadOnly {
                    kind: std::io::ErrorKind::StorageFull,
                    ..
                }
            ),
            "{err}"
        );
        let message = err.to_string();
        assert!(
            message.contains("cannot write WAL segment") && message.contains("no storage space"),
            "names the operation and the cause: {message}"
        );
        // Nothing more is taken, and the lost record stays lost.
        assert!(matches!(wal.write(b"refused"), Err(Error::ReadOnly { .. })));
        assert!(wal.sync_through(lost).is_err());
        assert!(
            wal.sync_through(kept).is_ok(),
            "what was stored stays stored"
        );
        assert_eq!(wal.n_write_errors(), 1);
        assert_eq!(heal_with_marker(&wal), vec![profile(1)]);
        assert!(wal.failure().is_none());
        let after = wal.write(b"after").expect("takes writes again");
        wal.sync_through(after).expect("sync");
        // The segment with the torn half record was cut back; the checkpoint replaced it.
        assert_eq!(
            records(dir.path()).expect("replays strictly"),
            vec![b"healed".to_vec(), b"after".to_vec()]
        );
    }

    #[test]
    fn a_failed_sync_drops_what_it_may_not_have_stored() {
        let dir = tempfile::tempdir().expect("tempdir");
        let wal = Wal::open(dir.path()).expect("open");
        let kept = wal.write(b"kept").expect("write");
        wal.sync_through(kept).expect("sync");
        let unsure = wal.write_profile(b"unsure", profile(7)).expect("write");
        wal.flush().expect("handed to the OS");
        wal.inject_fault(Fault::Sync, std::io::ErrorKind::Other);
        assert!(matches!(
            wal.sync_through(unsure),
            Err(Error::ReadOnly { .. })
        ));
        // Until healed, a kill leaves records a replay reads; the heal cuts them off.
        assert_eq!(heal_with_marker(&wal), vec![profile(7)]);
        drop(wal);
        assert_eq!(
            records(dir.path()).expect("replay"),
            vec![b"healed".to_vec()],
            "the checkpoint replaces the kept record, and the unsure one is gone"
        );
    }

    #[test]
    fn a_failed_heal_stays_failed_and_retries() {
        let dir = tempfile::tempdir().expect("tempdir");
        let wal = Wal::open(dir.path()).expect("open");
        let seq = wal.write(b"lost").expect("write");
        wal.inject_fault(Fault::Write, std::io::ErrorKind::StorageFull);
        assert!(wal.sync_through(seq).is_err());
        wal.inject_fault(Fault::Write, std::io::ErrorKind::StorageFull);
        assert!(wal.heal(|_, sink| sink.put(b"checkpoint")).is_err());
        assert!(wal.failure().is_some());
        assert_eq!(
            segments(dir.path()).expect("list"),
            vec![0],
            "half a checkpoint removed"
        );
        heal_with_marker(&wal);
        assert_eq!(
            records(dir.path()).expect("replay"),
            vec![b"healed".to_vec()]
        );
    }

    #[test]
    fn damage_in_the_middle_is_stepped_over_when_repairing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let wal = Wal::open(dir.path()).expect("open");
        // Payloads start with a record kind byte, as replay's resynchronisation expects.
        let seq = wal
            .write(b"\x01before")
            .and_then(|_| wal.write(b"\x01torn"))
            .and_then(|_| wal.write(b"\x01after"))
            .expect("write");
        wal.sync_through(seq).expect("sync");
        drop(wal);
        // The middle record torn as a full disk left it, with later records behind it.
        let path = segment_path(dir.path(), 0);
        let mut bytes = fs::read(&path).expect("read");
        let torn_at = HEADER_BYTES + 7;
        bytes.drain(torn_at + HEADER_BYTES..torn_at + HEADER_BYTES + 2);
        fs::write(&path, &bytes).expect("write");
        assert!(records(dir.path()).is_err(), "strict replay refuses");
        let mut got = Vec::new();
        let damage = replay(dir.path(), true, |payload, _, _| {
            got.push(payload.to_vec());
            Ok(())
        })
        .expect("repairing replay");
        assert_eq!(got, vec![b"\x01before".to_vec(), b"\x01after".to_vec()]);
        assert_eq!(damage.len(), 1);
        assert_eq!(damage[0].offset, torn_at as u64);
        assert_eq!(damage[0].skipped_bytes, (HEADER_BYTES + 3) as u64);
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
        // Not closed: the segment keeps the zeros written ahead of its records, and once
        // reopened it is no longer the last; replay reads on past them.
        assert_eq!(
            fs::metadata(segment_path(dir.path(), 0))
                .expect("meta")
                .len(),
            PREALLOCATE_BYTES
        );
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
        // Torn two ways: the file cut short inside the record, and the record's end never
        // written over the zeros ahead of it.
        for cut_short in [true, false] {
            let dir = tempfile::tempdir().expect("tempdir");
            let _wal = synced(dir.path(), &[b"kept", b"torn record"]);
            let path = segment_path(dir.path(), 0);
            let records_end = (2 * HEADER_BYTES + 4 + 11) as u64;
            let file = OpenOptions::new().write(true).open(&path).expect("open");
            if cut_short {
                file.set_len(records_end - 3).expect("truncate");
            } else {
                use std::os::unix::fs::FileExt;
                assert!(fs::metadata(&path).expect("meta").len() > records_end);
                file.write_all_at(&[0; 3], records_end - 3).expect("zero");
            }
            assert_eq!(records(dir.path()).expect("replay"), vec![b"kept".to_vec()]);
            assert_eq!(
                fs::metadata(&path).expect("meta").len(),
                (HEADER_BYTES + 4) as u64,
                "torn bytes removed (cut short: {cut_short})"
            );
        }
    }

    #[test]
    fn zeros_are_written_ahead_and_a_closed_segment_is_cut_to_its_records() {
        let dir = tempfile::tempdir().expect("tempdir");
        let wal = synced(dir.path(), &[b"one"]);
        let first = segment_path(dir.path(), 0);
        assert_eq!(fs::metadata(&first).expect("meta").len(), PREALLOCATE_BYTES);
        assert_eq!(wal.size_bytes(), (HEADER_BYTES + 3) as u64, "records only");
        wal.cut_segment().expect("roll");
        assert_eq!(
            fs::metadata(&first).expect("meta").len(),
            (HEADER_BYTES + 3) as u64,
            "a closed segment ends with its last record"
        );
        assert_eq!(records(dir.path()).expect("replay"), vec![b"one".to_vec()]);
    }

    #[test]
    fn damage_before_the_end_names_segment_and_offset() {
        let dir = tempfile::tempdir().expect("tempdir");
        let _wal = synced(dir.path(), &[b"first", b"second"]);
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
