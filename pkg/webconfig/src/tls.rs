//! `tls_server_config` → a rustls server configuration: certificates, client-certificate
//! policies in Go's terms, versions, cipher suites and key-exchange groups by Go's names.

use std::path::Path;
use std::sync::Arc;

use tokio_rustls::rustls::client::danger::HandshakeSignatureValid;
use tokio_rustls::rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms, ring};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::{
    self, CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme, SupportedCipherSuite, SupportedProtocolVersion,
};

use crate::error::Error;
use crate::file::TlsServerConfig;

/// The server configuration for `tls`, whose relative file names are under `dir`; `config` is
/// the web configuration file, named in errors.
pub(crate) fn server_config(
    tls: &TlsServerConfig,
    dir: &Path,
    http2: bool,
    config: &Path,
) -> Result<Arc<ServerConfig>, Error> {
    let invalid = |message: String| Error::Invalid {
        path: config.to_owned(),
        message,
    };
    let chain = pem_source(&tls.cert, &tls.cert_file, "cert", dir, config)?
        .ok_or_else(|| invalid("tls_server_config needs cert_file (or cert)".into()))?;
    let key_pem = pem_source(&tls.key, &tls.key_file, "key", dir, config)?
        .ok_or_else(|| invalid("tls_server_config needs key_file (or key)".into()))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&chain)
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(format!("the server certificate is not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(invalid(
            "the server certificate file holds no certificate".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| invalid(format!("the server key is not a PEM private key: {e}")))?;

    let provider = Arc::new(provider(tls).map_err(invalid)?);
    let versions = versions(tls).map_err(invalid)?;
    let verifier = client_verifier(tls, dir, config, &provider)?;
    let mut server = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&versions)
        .map_err(|e| invalid(format!("the TLS settings do not fit together: {e}")))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| invalid(format!("the server certificate and key do not fit: {e}")))?;
    server.alpn_protocols = if http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok(Arc::new(server))
}

/// The bytes of a PEM given inline or as a file; an error when both are.
fn pem_source(
    inline: &str,
    file: &str,
    key: &str,
    dir: &Path,
    config: &Path,
) -> Result<Option<Vec<u8>>, Error> {
    match (inline.is_empty(), file.is_empty()) {
        (true, true) => Ok(None),
        (false, true) => Ok(Some(inline.as_bytes().to_vec())),
        (true, false) => {
            let path = dir.join(file);
            std::fs::read(&path)
                .map(Some)
                .map_err(|source| Error::Read { path, source })
        }
        (false, false) => Err(Error::Invalid {
            path: config.to_owned(),
            message: format!("tls_server_config sets both `{key}` and `{key}_file`; keep one"),
        }),
    }
}

/// rustls' ring provider with the file's cipher suites and groups.
fn provider(tls: &TlsServerConfig) -> Result<CryptoProvider, String> {
    let mut provider = ring::default_provider();
    if !tls.cipher_suites.is_empty() {
        let mut chosen: Vec<SupportedCipherSuite> = provider
            .cipher_suites
            .iter()
            .filter(|s| s.tls13().is_some())
            .copied()
            .collect();
        for name in &tls.cipher_suites {
            // Go also spells the ChaCha20 suites without their hash.
            let full = if name.ends_with("CHACHA20_POLY1305") {
                format!("{name}_SHA256")
            } else {
                name.clone()
            };
            let suite = provider
                .cipher_suites
                .iter()
                .find(|s| s.tls13().is_none() && format!("{:?}", s.suite()) == full)
                .ok_or_else(|| {
                    format!(
                        "cipher suite `{name}` is not offered; these TLS 1.2 suites are: {}",
                        tls12_suite_names(&provider).join(", ")
                    )
                })?;
            chosen.push(*suite);
        }
        provider.cipher_suites = chosen;
    }
    if !tls.curve_preferences.is_empty() {
        let mut groups = Vec::new();
        for name in &tls.curve_preferences {
            let wanted = match name.as_str() {
                "X25519" => rustls::NamedGroup::X25519,
                "CurveP256" => rustls::NamedGroup::secp256r1,
                "CurveP384" => rustls::NamedGroup::secp384r1,
                other => {
                    return Err(format!(
                        "curve `{other}` is not offered; use X25519, CurveP256 or CurveP384"
                    ));
                }
            };
            let group = provider
                .kx_groups
                .iter()
                .find(|g| g.name() == wanted)
                .ok_or_else(|| format!("curve `{name}` is not offered by this build"))?;
            groups.push(*group);
        }
        provider.kx_groups = groups;
    }
    Ok(provider)
}

fn tls12_suite_names(provider: &CryptoProvider) -> Vec<String> {
    provider
        .cipher_suites
        .iter()
        .filter(|s| s.tls13().is_none())
        .map(|s| format!("{:?}", s.suite()))
        .collect()
}

/// TLS 1.2 and 1.3 within `min_version`..=`max_version`. rustls speaks nothing older than 1.2:
/// a minimum of TLS10 or TLS11 serves 1.2 and up, which only refuses clients Go would let in.
fn versions(tls: &TlsServerConfig) -> Result<Vec<&'static SupportedProtocolVersion>, String> {
    let rank = |name: &str, default: u8, key: &str| match name {
        "" => Ok(default),
        "TLS10" => Ok(10),
        "TLS11" => Ok(11),
        "TLS12" => Ok(12),
        "TLS13" => Ok(13),
        other => Err(format!(
            "{key} `{other}` is not one of TLS10, TLS11, TLS12, TLS13"
        )),
    };
    let min = rank(&tls.min_version, 12, "min_version")?;
    let max = rank(&tls.max_version, 13, "max_version")?;
    if max < 12 {
        return Err(format!(
            "max_version {} is older than TLS 1.2, the oldest version served",
            tls.max_version
        ));
    }
    if min > max {
        return Err(format!(
            "min_version {} is newer than max_version {}",
            tls.min_version, tls.max_version
        ));
    }
    if min < 12 {
        tracing::warn!(
            min_version = %tls.min_version,
            "TLS older than 1.2 is not served; clients need TLS 1.2 or 1.3"
        );
    }
    let mut versions = Vec::new();
    if min <= 12 {
        versions.push(&rustls::version::TLS12);
    }
    if max >= 13 {
        versions.push(&rustls::version::TLS13);
    }
    Ok(versions)
}

/// The client-certificate policy of `client_auth_type`, with exporter-toolkit's checks.
#[expect(
    clippy::too_many_lines,
    reason = "exporter-toolkit's client_auth_type values mapped one by one onto rustls' verifiers"
)]
fn client_verifier(
    tls: &TlsServerConfig,
    dir: &Path,
    config: &Path,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, Error> {
    let invalid = |message: String| Error::Invalid {
        path: config.to_owned(),
        message,
    };
    let ca_pem = pem_source(
        &tls.client_ca,
        &tls.client_ca_file,
        "client_ca",
        dir,
        config,
    )?;
    let roots = match &ca_pem {
        None => None,
        Some(pem) => {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert =
                    cert.map_err(|e| invalid(format!("the client CA file is not PEM: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| invalid(format!("a client CA certificate is unusable: {e}")))?;
            }
            if roots.is_empty() {
                return Err(invalid("the client CA file holds no certificate".into()));
            }
            Some(Arc::new(roots))
        }
    };
    let algorithms = provider.signature_verification_algorithms;
    let verified = |optional: bool| -> Result<Arc<dyn ClientCertVerifier>, Error> {
        let roots = roots.clone().ok_or_else(|| {
            invalid(format!(
                "client_auth_type {} needs client_ca_file",
                tls.client_auth_type
            ))
        })?;
        let builder = WebPkiClientVerifier::builder_with_provider(roots, Arc::clone(provider));
        let builder = if optional {
            builder.allow_unauthenticated()
        } else {
            builder
        };
        let verifier = builder
            .build()
            .map_err(|e| invalid(format!("cannot verify client certificates: {e}")))?;
        Ok(verifier)
    };
    let verifier: Arc<dyn ClientCertVerifier> = match tls.client_auth_type.as_str() {
        "" | "NoClientCert" => {
            if roots.is_some() {
                return Err(invalid(
                    "client CAs are configured without a client_auth_type; set \
                     RequireAndVerifyClientCert or VerifyClientCertIfGiven"
                        .into(),
                ));
            }
            WebPkiClientVerifier::no_client_auth()
        }
        "RequestClientCert" => Arc::new(AnyClientCert {
            mandatory: false,
            algorithms,
        }),
        "RequireAnyClientCert" | "RequireClientCert" => Arc::new(AnyClientCert {
            mandatory: true,
            algorithms,
        }),
        "VerifyClientCertIfGiven" => verified(true)?,
        "RequireAndVerifyClientCert" => verified(false)?,
        other => {
            return Err(invalid(format!(
                "client_auth_type `{other}` is not one of NoClientCert, RequestClientCert, \
                 RequireAnyClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert"
            )));
        }
    };
    if tls.client_allowed_sans.is_empty() {
        return Ok(verifier);
    }
    let names = tls
        .client_allowed_sans
        .iter()
        .map(|n| {
            ServerName::try_from(n.as_str())
                .map(|n| n.to_owned())
                .map_err(|_| {
                    invalid(format!(
                        "client_allowed_sans: `{n}` is neither a DNS name nor an IP address"
                    ))
                })
        })
        .collect::<Result<_, _>>()?;
    Ok(Arc::new(AllowedSans {
        inner: verifier,
        names,
    }))
}

/// Go's `RequestClientCert` and `RequireAnyClientCert`: a certificate is asked for (and
/// required by the latter) but not checked against any CA; the handshake still proves the
/// client holds its key.
#[derive(Debug)]
struct AnyClientCert {
    mandatory: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyClientCert {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// `client_allowed_sans`: after the policy's own checks, the client certificate must name one
/// of these DNS names or IP addresses among its subject alternative names.
#[derive(Debug)]
struct AllowedSans {
    inner: Arc<dyn ClientCertVerifier>,
    names: Vec<ServerName<'static>>,
}

impl ClientCertVerifier for AllowedSans {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let cert = webpki::EndEntityCert::try_from(end_entity)
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
        if self
            .names
            .iter()
            .any(|name| cert.verify_is_valid_for_subject_name(name).is_ok())
        {
            Ok(verified)
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls(yaml: &str) -> TlsServerConfig {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn versions_and_suites_by_go_names() {
        assert_eq!(versions(&tls("{}")).unwrap().len(), 2);
        assert_eq!(versions(&tls("min_version: TLS13")).unwrap().len(), 1);
        assert_eq!(versions(&tls("min_version: TLS10")).unwrap().len(), 2);
        assert!(
            versions(&tls("max_version: TLS11"))
                .unwrap_err()
                .contains("older")
        );
        assert!(
            versions(&tls("min_version: TLS13\nmax_version: TLS12"))
                .unwrap_err()
                .contains("newer")
        );
        let p = provider(&tls(
            "cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, \
             TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305]\ncurve_preferences: [CurveP256, X25519]",
        ))
        .unwrap();
        assert_eq!(tls12_suite_names(&p).len(), 2);
        assert_eq!(p.kx_groups[0].name(), rustls::NamedGroup::secp256r1);
        let e = provider(&tls("cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]")).unwrap_err();
        assert!(
            e.contains("`TLS_RSA_WITH_RC4_128_SHA` is not offered"),
            "{e}"
        );
        assert!(
            provider(&tls("curve_preferences: [CurveP521]"))
                .unwrap_err()
                .contains("CurveP521")
        );
    }
}
