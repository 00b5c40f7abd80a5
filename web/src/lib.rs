//! The browser UI of the server, embedded in the binary.
//!
//! `static/` holds plain HTML, CSS and ES modules (no framework, no build step); `build.rs`
//! embeds every file with `include_bytes!`, so `cargo build` alone produces a server that serves
//! its UI, offline. [`asset`] answers a URL path with the file and its content type; a path that
//! looks like a client-side route (`/compare`, `/targets`: no extension in its last segment)
//! gets `index.html`, which routes in the browser.
//!
//! # Design constraints
//!
//! - No dependency and no HTTP types here: the API crate (which owns hyper) serves the bytes.
//! - The UI speaks only the documented HTTP API (`shared/design/http-api.md`).
//! - Files are served with an [`Asset::etag`] (a hash of the content) and `no-cache`: module
//!   URLs are not content-hashed, so the browser revalidates and gets 304 when nothing changed.
//!
//! # Example
//!
//! ```
//! let index = parca_web::asset("/").expect("the UI has an index");
//! assert_eq!(index.content_type, "text/html; charset=utf-8");
//! // Client-side routes get the index too; a missing file does not.
//! assert_eq!(parca_web::asset("/targets").unwrap().bytes, index.bytes);
//! assert!(parca_web::asset("/js/nope.js").is_none());
//! ```

/// One embedded file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asset {
    /// The file's content.
    pub bytes: &'static [u8],
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// A strong ETag (quoted hash of the content) for conditional requests.
    pub etag: &'static str,
}

/// A row of the generated table.
struct Entry {
    path: &'static str,
    bytes: &'static [u8],
    content_type: &'static str,
    etag: &'static str,
}

include!(concat!(env!("OUT_DIR"), "/assets.rs"));

/// The `Cache-Control` value to send with every asset: revalidate each time (cheap with the ETag).
pub const CACHE_CONTROL: &str = "no-cache";

/// The embedded file at URL `path` (e.g. `/js/main.js`), `index.html` for `/` and for
/// client-side routes, or `None` for a missing file.
pub fn asset(path: &str) -> Option<Asset> {
    let path = if path.is_empty() || path == "/" {
        "/index.html"
    } else {
        path
    };
    if let Ok(i) = ASSETS.binary_search_by(|e| e.path.cmp(path)) {
        let e = &ASSETS[i];
        return Some(Asset {
            bytes: e.bytes,
            content_type: e.content_type,
            etag: e.etag,
        });
    }
    let last = path.rsplit('/').next().unwrap_or("");
    if last.contains('.') || path.contains("/js/") || path.contains("/css/") {
        return None;
    }
    asset("/index.html")
}

/// URL paths of every embedded file, sorted.
pub fn paths() -> impl Iterator<Item = &'static str> {
    ASSETS.iter().map(|e| e.path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_and_client_routes() {
        let index = asset("/index.html").expect("index exists");
        assert_eq!(asset("/").unwrap(), index);
        assert_eq!(asset("").unwrap(), index);
        assert_eq!(asset("/compare").unwrap(), index);
        assert_eq!(asset("/targets").unwrap(), index);
        assert_eq!(asset("/favicon.svg").unwrap().content_type, "image/svg+xml");
        assert!(asset("/js/missing.js").is_none());
    }

    #[test]
    fn content_types_and_etags() {
        let js = asset("/js/main.js").expect("main module exists");
        assert_eq!(js.content_type, "text/javascript; charset=utf-8");
        assert!(js.etag.starts_with('"') && js.etag.ends_with('"'));
        assert_eq!(
            asset("/style.css").unwrap().content_type,
            "text/css; charset=utf-8"
        );
    }

    /// Every module the index loads and every relative import resolves to an embedded file,
    /// so a typo in an import is a test failure, not a blank page.
    #[test]
    fn imports_resolve() {
        for path in paths().filter(|p| p.ends_with(".js")) {
            let text = std::str::from_utf8(asset(path).unwrap().bytes).expect("utf-8 module");
            let dir = &path[..path.rfind('/').unwrap()];
            for line in text.lines() {
                let line = line.trim();
                if !(line.starts_with("import ")
                    || line.starts_with("export ") && line.contains(" from "))
                {
                    continue;
                }
                let Some(spec) = line.split(['\'', '"']).nth(1) else {
                    continue;
                };
                if let Some(rel) = spec.strip_prefix("./") {
                    let target = format!("{dir}/{rel}");
                    assert!(asset(&target).is_some(), "{path} imports missing {target}");
                }
            }
        }
        let index = std::str::from_utf8(asset("/").unwrap().bytes).unwrap();
        for part in index
            .split("src=\"")
            .skip(1)
            .chain(index.split("href=\"").skip(1))
        {
            let target = part.split('"').next().unwrap();
            if target.starts_with('/') && target.len() > 1 {
                assert!(
                    asset(target).is_some(),
                    "index.html refers to missing {target}"
                );
            }
        }
    }
}
