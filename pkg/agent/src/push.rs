//! Pushing each window to a server's `POST /api/v1/write`.

/// Where and how to push.
#[derive(Debug, Clone)]
pub(crate) struct Pusher {
    client: reqwest::Client,
    url: String,
}

impl Pusher {
    /// A pusher to the server at `base` (`http://host:7070`). The samples carry their labels
    /// (`node` among them), so the URL adds only the profile name.
    pub fn new(base: &str) -> Result<Pusher, crate::Error> {
        let base = if base.contains("://") {
            base.to_owned()
        } else {
            format!("http://{base}")
        };
        if !base.starts_with("http://") {
            return Err(crate::Error::Config(format!(
                "--remote-store-address `{base}`: only http:// is supported"
            )));
        }
        let query: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("__name__", crate::profile::PROFILE_NAME)
            .finish();
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .map_err(|e| crate::Error::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Pusher {
            client,
            url: format!("{}/api/v1/write?{query}", base.trim_end_matches('/')),
        })
    }

    /// Sends one gzipped pprof; the error says what the server answered.
    pub async fn push(&self, body: Vec<u8>) -> Result<(), String> {
        let response = self
            .client
            .post(&self.url)
            .header("content-type", "application/vnd.google.protobuf+gzip")
            .body(body)
            .send()
            .await
            .map_err(|e| format!("POST {}: {e}", self.url))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let text = response.text().await.unwrap_or_default();
        Err(format!("POST {}: {status}: {}", self.url, text.trim()))
    }

    /// The URL pushed to.
    pub fn url(&self) -> &str {
        &self.url
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_names_the_profile() {
        let p = Pusher::new("127.0.0.1:7070/").unwrap();
        assert_eq!(
            p.url(),
            "http://127.0.0.1:7070/api/v1/write?__name__=parca_agent"
        );
        assert!(Pusher::new("https://x").is_err());
    }
}
