//! State the rules keep beside the store (deploy insights, alert state): JSON files written so a
//! crash leaves the old file or the new one, never half of one.

use std::io::Write;
use std::path::Path;

/// Writes `value` as JSON to `path` whole: a temporary file beside it, fsynced, renamed over
/// it, and the folder fsynced. The error names the file.
pub(crate) fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("cannot write `{}`: {e}", path.display());
    let tmp = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec(value)
        .map_err(|e| format!("cannot encode `{}`: {e}", path.display()))?;
    let mut file = std::fs::File::create(&tmp).map_err(fail)?;
    file.write_all(&bytes).map_err(fail)?;
    file.sync_all().map_err(fail)?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(fail)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(fail)?;
    }
    Ok(())
}
