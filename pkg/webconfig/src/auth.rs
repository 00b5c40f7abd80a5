//! Credentials: basic auth against bcrypt hashes and bearer tokens, checked so that timing
//! tells a known user from an unknown one no better than a wrong password does.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use subtle::ConstantTimeEq;

/// What [`crate::Security::authorize`] says to a request it refuses: answer 401 with this
/// challenge in `WWW-Authenticate`, and nothing of which part was wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Denied {
    /// `Basic` when users are configured, else `Bearer`.
    pub challenge: &'static str,
}

/// Successful basic-auth checks remembered, so that a client sending the same password on
/// every request does not cost a bcrypt each time (exporter-toolkit does the same).
const CACHE_ENTRIES: usize = 1024;

/// The credentials of one loaded configuration.
pub(crate) struct Credentials {
    /// User → bcrypt hash.
    users: BTreeMap<String, String>,
    /// A hash of the users' cost for a password nobody has: unknown users are checked against
    /// it so that they take as long as known ones.
    dummy_hash: String,
    /// SHA-256 of each accepted bearer token.
    token_digests: Vec<[u8; 32]>,
    /// Digests of (salt, user, password, hash) that passed.
    passed: Mutex<HashSet<[u8; 32]>>,
    /// Random per process, so the cache's digests say nothing outside it.
    salt: [u8; 32],
}

impl Credentials {
    pub(crate) fn new(users: BTreeMap<String, String>, tokens: Vec<String>) -> Credentials {
        let cost = users
            .values()
            .filter_map(|h| h.parse::<bcrypt::HashParts>().ok())
            .map(|p| p.get_cost())
            .max()
            .unwrap_or(bcrypt::DEFAULT_COST);
        let dummy_hash = if users.is_empty() {
            String::new()
        } else {
            bcrypt::hash("not anybody's password", cost).expect("the cost is a valid bcrypt cost")
        };
        let mut salt = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut salt)
            .expect("the system's random source works");
        Credentials {
            users,
            dummy_hash,
            token_digests: tokens.iter().map(|t| sha256(&[t.as_bytes()])).collect(),
            passed: Mutex::new(HashSet::new()),
            salt,
        }
    }

    /// Whether any credential is required.
    pub(crate) fn required(&self) -> bool {
        !self.users.is_empty() || !self.token_digests.is_empty()
    }

    fn denied(&self) -> Denied {
        Denied {
            challenge: if self.users.is_empty() {
                "Bearer"
            } else {
                "Basic"
            },
        }
    }

    /// Checks an `Authorization` header value. bcrypt runs on the blocking pool.
    pub(crate) async fn check(
        self: &Arc<Self>,
        authorization: Option<&[u8]>,
    ) -> Result<(), Denied> {
        if !self.required() {
            return Ok(());
        }
        let value = authorization.ok_or(self.denied())?;
        if let Some(token) = strip_scheme(value, b"Bearer ")
            && !self.token_digests.is_empty()
        {
            let digest = sha256(&[token]);
            let matched = self
                .token_digests
                .iter()
                .fold(subtle::Choice::from(0), |any, t| any | t.ct_eq(&digest));
            return if bool::from(matched) {
                Ok(())
            } else {
                Err(self.denied())
            };
        }
        let Some(encoded) = strip_scheme(value, b"Basic ") else {
            return Err(self.denied());
        };
        if self.users.is_empty() {
            return Err(self.denied());
        }
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|_| self.denied())?;
        let text = String::from_utf8(decoded).map_err(|_| self.denied())?;
        let (user, password) = text.split_once(':').ok_or(self.denied())?;
        let hash = self.users.get(user);
        let key = sha256(&[
            &self.salt,
            user.as_bytes(),
            b"\0",
            password.as_bytes(),
            b"\0",
            hash.map_or(&b""[..], |h| h.as_bytes()),
        ]);
        if hash.is_some() && self.passed.lock().expect("auth cache lock").contains(&key) {
            return Ok(());
        }
        let known = hash.is_some();
        let hash = hash.cloned().unwrap_or_else(|| self.dummy_hash.clone());
        let password = password.to_owned();
        let ok =
            tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash).unwrap_or(false))
                .await
                .unwrap_or(false);
        if !(ok && known) {
            return Err(self.denied());
        }
        let mut passed = self.passed.lock().expect("auth cache lock");
        if passed.len() >= CACHE_ENTRIES {
            passed.clear();
        }
        passed.insert(key);
        Ok(())
    }
}

/// The credentials after `scheme ` (case-insensitive, as RFC 9110 has it).
fn strip_scheme<'a>(value: &'a [u8], scheme: &[u8]) -> Option<&'a [u8]> {
    (value.len() >= scheme.len() && value[..scheme.len()].eq_ignore_ascii_case(scheme))
        .then(|| value[scheme.len()..].trim_ascii())
}

fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for part in parts {
        context.update(part);
    }
    context
        .finish()
        .as_ref()
        .try_into()
        .expect("SHA-256 digests are 32 bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(user: &str, password: &str) -> Vec<u8> {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        )
        .into_bytes()
    }

    #[tokio::test]
    async fn basic_users_and_tokens() {
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let creds = Arc::new(Credentials::new(
            [("alice".to_owned(), hash)].into(),
            vec!["token-1".into(), "token-2".into()],
        ));
        assert_eq!(creds.check(Some(&basic("alice", "s3cret"))).await, Ok(()));
        // Again, from the cache.
        assert_eq!(creds.check(Some(&basic("alice", "s3cret"))).await, Ok(()));
        let denied = Err(Denied { challenge: "Basic" });
        assert_eq!(creds.check(Some(&basic("alice", "wrong"))).await, denied);
        assert_eq!(creds.check(Some(&basic("mallory", "s3cret"))).await, denied);
        assert_eq!(creds.check(None).await, denied);
        assert_eq!(creds.check(Some(b"Basic !!!")).await, denied);
        assert_eq!(creds.check(Some(b"bearer token-2")).await, Ok(()));
        assert_eq!(creds.check(Some(b"Bearer token-3")).await, denied);
        assert_eq!(creds.check(Some(b"Bearer ")).await, denied);
    }

    #[tokio::test]
    async fn nothing_configured_lets_everyone_in() {
        let creds = Arc::new(Credentials::new(BTreeMap::new(), Vec::new()));
        assert_eq!(creds.check(None).await, Ok(()));
        let tokens_only = Arc::new(Credentials::new(BTreeMap::new(), vec!["t".into()]));
        assert_eq!(
            tokens_only.check(Some(&basic("a", "b"))).await,
            Err(Denied {
                challenge: "Bearer"
            })
        );
    }
}
