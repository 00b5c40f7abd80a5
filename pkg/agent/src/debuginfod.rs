//! Debug files fetched from debuginfod servers (`--debuginfod-urls`, else `DEBUGINFOD_URLS`) by
//! build id (`GET <url>/buildid/<hex>/debuginfo`), kept in a disk cache named by build id and
//! bounded in bytes (the least recently written go first). A build id no server had is not
//! asked again for [`NEGATIVE_TTL`].
//!
//! Fetches happen while a profile is built (on the blocking pool), once per object: the
//! symbolizer keeps what it parsed.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use parca_symbolize::BuildId;
use rustc_hash::FxHashMap;

/// How long a build id that no server had is not asked for again.
pub const NEGATIVE_TTL: Duration = Duration::from_secs(600);

/// Largest debug file downloaded.
const MAX_FILE_BYTES: u64 = 1 << 30;

/// Where and how to fetch.
#[derive(Debug, Clone)]
pub struct DebuginfodConfig {
    /// Server base URLs, tried in order.
    pub urls: Vec<String>,
    /// The cache directory.
    pub cache_dir: PathBuf,
    /// Bytes the cache may hold.
    pub max_cache_bytes: u64,
    /// Time allowed per request.
    pub timeout: Duration,
}

impl DebuginfodConfig {
    /// The servers of `DEBUGINFOD_URLS` (space-separated, as elfutils reads it).
    pub fn urls_from_env() -> Vec<String> {
        std::env::var("DEBUGINFOD_URLS")
            .map(|v| v.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default()
    }
}

/// A debuginfod client with its disk cache.
#[derive(Debug)]
pub struct Debuginfod {
    config: DebuginfodConfig,
    client: reqwest::Client,
    missing: Mutex<FxHashMap<String, Instant>>,
    /// Files fetched, and fetches that found nothing or failed.
    pub stats: Mutex<DebuginfodStats>,
}

/// Counters for metrics.
#[derive(Debug, Default, Clone, Copy)]
pub struct DebuginfodStats {
    /// Debug files downloaded.
    pub fetched: u64,
    /// Debug files found in the cache.
    pub cache_hits: u64,
    /// Build ids no server had, or requests that failed.
    pub misses: u64,
}

impl Debuginfod {
    /// A client; the cache directory is created on first use.
    pub fn new(config: DebuginfodConfig) -> Result<Debuginfod, crate::Error> {
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .build()
            .map_err(|e| crate::Error::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Debuginfod {
            config,
            client,
            missing: Mutex::new(FxHashMap::default()),
            stats: Mutex::new(DebuginfodStats::default()),
        })
    }

    fn cache_path(&self, id: &str) -> PathBuf {
        self.config.cache_dir.join(id).join("debuginfo")
    }

    /// The debug file of `build_id`, from the cache or a server; `None` when none has it.
    /// Blocks: call it from a blocking thread.
    pub fn fetch(&self, build_id: &BuildId) -> Option<(File, PathBuf)> {
        let id = build_id.to_string();
        let path = self.cache_path(&id);
        if let Ok(file) = File::open(&path) {
            self.bump(|s| s.cache_hits += 1);
            return Some((file, path));
        }
        {
            let mut missing = self.missing.lock().expect("debuginfod lock");
            if missing.get(&id).is_some_and(|t| t.elapsed() < NEGATIVE_TTL) {
                return None;
            }
            missing.remove(&id);
        }
        for url in &self.config.urls {
            let url = format!("{}/buildid/{id}/debuginfo", url.trim_end_matches('/'));
            match self.download(&url, &path) {
                Ok(()) => {
                    self.bump(|s| s.fetched += 1);
                    self.trim_cache();
                    return File::open(&path).ok().map(|f| (f, path));
                }
                Err(error) => tracing::debug!(%url, %error, "debuginfod: no debug file"),
            }
        }
        self.bump(|s| s.misses += 1);
        self.missing
            .lock()
            .expect("debuginfod lock")
            .insert(id, Instant::now());
        None
    }

    fn bump(&self, f: impl FnOnce(&mut DebuginfodStats)) {
        f(&mut self.stats.lock().expect("debuginfod lock"));
    }

    /// Downloads `url` into `path` (through a temporary file, renamed when complete).
    fn download(&self, url: &str, path: &Path) -> Result<(), String> {
        let body = block_on(async {
            let response = self
                .client
                .get(url)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            if !response.status().is_success() {
                return Err(format!("HTTP {}", response.status()));
            }
            if response
                .content_length()
                .is_some_and(|n| n > MAX_FILE_BYTES)
            {
                return Err("too large".into());
            }
            let bytes = response.bytes().await.map_err(|e| e.to_string())?;
            Ok(bytes)
        })?;
        if body.len() as u64 > MAX_FILE_BYTES || !body.starts_with(b"\x7fELF") {
            return Err("not an ELF file".into());
        }
        let dir = path.parent().ok_or("no cache directory")?;
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let tmp = dir.join(".debuginfo.tmp");
        std::fs::write(&tmp, &body).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(())
    }

    /// Deletes the oldest cached files until the cache fits its bound.
    fn trim_cache(&self) {
        let Ok(entries) = std::fs::read_dir(&self.config.cache_dir) else {
            return;
        };
        let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let path = e.path().join("debuginfo");
                let meta = std::fs::metadata(&path).ok()?;
                Some((meta.modified().ok()?, meta.len(), e.path()))
            })
            .collect();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        files.sort();
        for (_, len, dir) in files {
            if total <= self.config.max_cache_bytes {
                break;
            }
            if std::fs::remove_dir_all(&dir).is_ok() {
                total -= len;
            }
        }
    }
}

/// Runs `future` to completion from a blocking thread: on the agent's runtime when there is
/// one, else on a runtime of its own (tests).
fn block_on<T>(future: impl std::future::Future<Output = Result<T, String>>) -> Result<T, String> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => handle.block_on(future),
        Err(_) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?
            .block_on(future),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(dir: &Path, max_cache_bytes: u64, urls: Vec<String>) -> Debuginfod {
        Debuginfod::new(DebuginfodConfig {
            urls,
            cache_dir: dir.to_owned(),
            max_cache_bytes,
            timeout: Duration::from_secs(2),
        })
        .unwrap()
    }

    #[test]
    fn the_cache_keeps_the_newest_within_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let d = client(dir.path(), 25, Vec::new());
        for (i, id) in ["aa01", "aa02", "aa03"].iter().enumerate() {
            let path = d.cache_path(id);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, [0u8; 10]).unwrap();
            let t = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1000 + i as u64);
            File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
        d.trim_cache();
        assert!(!d.cache_path("aa01").exists());
        assert!(d.cache_path("aa02").exists() && d.cache_path("aa03").exists());
        // A cached file is served without any server.
        let id = BuildId::new(&[0xaa, 0x03]);
        let (_, path) = d.fetch(&id).unwrap();
        assert_eq!(path, d.cache_path("aa03"));
        assert_eq!(d.stats.lock().unwrap().cache_hits, 1);
    }

    #[test]
    fn an_unreachable_server_is_a_miss_remembered() {
        let dir = tempfile::tempdir().unwrap();
        // Port 9 (discard) on loopback: refused at once.
        let d = client(dir.path(), 1 << 20, vec!["http://127.0.0.1:9".into()]);
        let id = BuildId::new(&[1, 2, 3, 4]);
        assert!(d.fetch(&id).is_none());
        assert!(d.fetch(&id).is_none());
        // The second was not asked: remembered as missing.
        assert_eq!(d.stats.lock().unwrap().misses, 1);
    }
}
