//! A bucket from parca.yaml's `object_storage.bucket`, with Thanos' keys.

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::path::Path as ObjectPath;
use parca_config::{BucketConfig, BucketType};

use crate::Error;

/// The providers' clients retry a failed request a few times within this; past it the
/// shipper's own backoff takes over (so a bucket that is down is counted and logged soon,
/// rather than after the clients' default of minutes).
fn retry() -> object_store::RetryConfig {
    object_store::RetryConfig {
        backoff: object_store::BackoffConfig::default(),
        max_retries: 3,
        retry_timeout: std::time::Duration::from_secs(20),
    }
}

/// An object store and the folder (`prefix`) this server keeps its blocks under.
#[derive(Debug, Clone)]
pub struct Bucket {
    /// The store.
    pub store: Arc<dyn ObjectStore>,
    /// `bucket.prefix`, empty for the bucket's root.
    pub prefix: ObjectPath,
    /// What the bucket is, for logs (`s3://profiles/parca`, `file:///var/lib/bucket`).
    pub description: String,
}

impl Bucket {
    /// Opens the bucket `config` describes. Credentials come from the configuration when it
    /// has them, else from the environment and the files the providers' SDKs read
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SESSION_TOKEN`, `GOOGLE_APPLICATION_CREDENTIALS`,
    /// `AZURE_STORAGE_ACCOUNT_KEY`, …). Nothing is contacted yet.
    #[expect(
        clippy::too_many_lines,
        reason = "one match over the providers (FILESYSTEM, S3, GCS, AZURE) mapping Thanos' keys, each arm short"
    )]
    pub fn open(config: &BucketConfig) -> Result<Bucket, Error> {
        let get = |key: &str| config.get_str(key).filter(|v| !v.is_empty());
        let kind = config.kind.to_string();
        let setup = |source| Error::Setup {
            kind: kind.clone(),
            source,
        };
        let (store, description): (Arc<dyn ObjectStore>, String) = match config.kind {
            BucketType::Filesystem => {
                let directory = get("directory").unwrap_or(".");
                std::fs::create_dir_all(directory).map_err(|source| Error::Directory {
                    path: directory.to_owned(),
                    source,
                })?;
                let store = object_store::local::LocalFileSystem::new_with_prefix(directory)
                    .map_err(setup)?;
                (Arc::new(store), format!("file://{directory}"))
            }
            BucketType::S3 => {
                let bucket = get("bucket").unwrap_or_default();
                let insecure = matches!(
                    config.config.get("insecure"),
                    Some(parca_config::ConfigValue::Bool(true))
                );
                let mut builder = object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .with_retry(retry());
                if let Some(endpoint) = get("endpoint") {
                    let url = if endpoint.contains("://") {
                        endpoint.to_owned()
                    } else if insecure {
                        format!("http://{endpoint}")
                    } else {
                        format!("https://{endpoint}")
                    };
                    builder = builder
                        .with_endpoint(url)
                        .with_allow_http(insecure || endpoint.starts_with("http://"));
                }
                builder = builder.with_region(get("region").unwrap_or("us-east-1"));
                if let (Some(key), Some(secret)) = (get("access_key"), get("secret_key")) {
                    builder = builder
                        .with_access_key_id(key)
                        .with_secret_access_key(secret);
                }
                if let Some(token) = get("session_token") {
                    builder = builder.with_token(token);
                }
                // Thanos' `bucket_lookup_type`: path style unless told virtual-hosted (what
                // S3-compatible servers expect).
                let virtual_hosted = get("bucket_lookup_type") == Some("virtual-hosted");
                builder = builder.with_virtual_hosted_style_request(virtual_hosted);
                (
                    Arc::new(builder.build().map_err(setup)?),
                    format!("s3://{bucket}"),
                )
            }
            BucketType::Gcs => {
                let bucket = get("bucket").unwrap_or_default();
                let mut builder = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_bucket_name(bucket)
                    .with_retry(retry());
                if let Some(key) = get("service_account") {
                    builder = builder.with_service_account_key(key);
                }
                (
                    Arc::new(builder.build().map_err(setup)?),
                    format!("gs://{bucket}"),
                )
            }
            BucketType::Azure => {
                let account = get("storage_account").unwrap_or_default();
                let container = get("container").unwrap_or_default();
                let mut builder = object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_account(account)
                    .with_container_name(container)
                    .with_retry(retry());
                if let Some(key) = get("storage_account_key") {
                    builder = builder.with_access_key(key);
                }
                if let Some(endpoint) = get("endpoint") {
                    builder = builder.with_endpoint(endpoint.to_owned());
                }
                (
                    Arc::new(builder.build().map_err(setup)?),
                    format!("azure://{account}/{container}"),
                )
            }
            other => return Err(Error::Unsupported(other.to_string())),
        };
        let prefix = ObjectPath::from(config.prefix.trim_matches('/'));
        let description = if prefix.as_ref().is_empty() {
            description
        } else {
            format!("{description}/{prefix}")
        };
        Ok(Bucket {
            store,
            prefix,
            description,
        })
    }

    /// The path of `name` (`a/b`) under the prefix.
    pub fn path(&self, name: &str) -> ObjectPath {
        let mut path = self.prefix.clone();
        for part in name.split('/').filter(|p| !p.is_empty()) {
            path = path.join(part);
        }
        path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> BucketConfig {
        let text = format!("object_storage:\n  bucket:\n{yaml}");
        parca_config::parse(&text, "parca.yaml")
            .expect("config")
            .object_storage
            .expect("object_storage")
            .bucket
    }

    #[test]
    fn thanos_keys_make_buckets() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("new/bucket");
        let b = Bucket::open(&config(&format!(
            "    type: FILESYSTEM\n    prefix: /a/b/\n    config: {{directory: {}}}\n",
            folder.display()
        )))
        .unwrap();
        assert!(folder.is_dir(), "the folder is made");
        assert_eq!(b.path("01ABC/meta.json").as_ref(), "a/b/01ABC/meta.json");
        let s3 = Bucket::open(&config(
            "    type: S3\n    config: {bucket: profiles, endpoint: 127.0.0.1:9000, insecure: true, access_key: k, secret_key: s}\n",
        ))
        .unwrap();
        assert_eq!(s3.description, "s3://profiles");
        assert_eq!(s3.path("x").as_ref(), "x");
        let swift = Bucket::open(&config("    type: SWIFT\n    config: {container: c}\n"));
        assert!(
            swift
                .unwrap_err()
                .to_string()
                .contains("SWIFT is not supported by this server")
        );
    }
}
