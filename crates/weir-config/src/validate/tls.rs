//! TLS: termination on virtual servers and TLS to the nodes of a pool.
//!
//! Only the shape is checked here (which keys go together, known versions,
//! suites and groups). Certificate files are read when the proxy is built,
//! and their problems are reported against the [`FileRef`] recorded here.

use std::path::PathBuf;

use super::{Checker, Zero, values};
use crate::defaults;
use crate::error::KeyPath;
use crate::model::{
    CIPHER_SUITES, CertificateSource, ClientAuth, FileRef, KeyExchangeGroup, ServerTls, TlsVersion,
    UpstreamTls,
};
use crate::schema::{CertificateTable, OneOrMany, ServerTlsTable, UpstreamTlsTable};

impl Checker {
    /// A `[tls]` table; `relayed`: the virtual server relays the plaintext as bytes
    /// (`protocol = "tls"`), so its ALPN may name any protocol its nodes speak.
    pub(super) fn server_tls(
        &mut self,
        path: &KeyPath,
        table: &ServerTlsTable,
        relayed: bool,
    ) -> ServerTls {
        let certificates_path = path.key("certificates");
        let certificates: Vec<CertificateSource> = match &table.certificates {
            None => {
                self.report(
                    &certificates_path,
                    "missing required key: at least one certificate, like \
                     [{ cert = \"site.pem\", key = \"site.key\" }]",
                );
                Vec::new()
            }
            Some(list) => {
                if list.is_empty() {
                    self.report(&certificates_path, "must name at least one certificate");
                }
                list.iter()
                    .enumerate()
                    .filter_map(|(index, entry)| {
                        self.certificate(&certificates_path.index(index), entry)
                    })
                    .collect()
            }
        };
        let versions = self.tls_versions(&path.key("versions"), table.versions.as_ref());
        let cipher_suites = table
            .cipher_suites
            .as_ref()
            .map(|names| self.cipher_suites(&path.key("cipher_suites"), names, &versions));
        let groups = self.groups(&path.key("groups"), table.groups.as_deref());
        let alpn = self.alpn(&path.key("alpn"), table.alpn.as_deref(), relayed);
        let client_auth = self.client_auth(path, table);
        let client_crl = table.client_crl.as_ref().and_then(|crl| {
            let crl_path = path.key("client_crl");
            if matches!(client_auth, ClientAuth::None) {
                self.report(
                    &crl_path,
                    "has no effect unless client_certificates = \"optional\" or \"required\"",
                );
                return None;
            }
            self.file_ref(&crl_path, crl)
        });
        let client_subject_header = table.client_subject_header.as_ref().and_then(|name| {
            let header_path = path.key("client_subject_header");
            if let Err(message) = values::added_request_header(name) {
                self.report(&header_path, message);
                return None;
            }
            if matches!(client_auth, ClientAuth::None) {
                self.report(
                    &header_path,
                    "needs client_certificates = \"optional\" or \"required\"",
                );
            }
            Some(name.clone())
        });
        ServerTls {
            certificates,
            versions,
            cipher_suites,
            groups,
            alpn,
            handshake_timeout: self.duration(
                &path.key("handshake_timeout"),
                table.handshake_timeout.as_ref(),
                defaults::HANDSHAKE_TIMEOUT,
                Zero::Rejected,
            ),
            max_handshakes: self.nonzero(
                &path.key("max_handshakes"),
                table.max_handshakes,
                defaults::MAX_HANDSHAKES,
                1..=1_000_000,
            ),
            session_tickets: table.session_tickets.unwrap_or(defaults::SESSION_TICKETS),
            ticket_rotation: self
                .ticket_rotation(&path.key("ticket_rotation"), table.ticket_rotation.as_ref()),
            session_cache_size: self.count(
                &path.key("session_cache_size"),
                table.session_cache_size,
                defaults::SESSION_CACHE_SIZE,
                0..=10_000_000,
            ) as usize,
            session_cache_lifetime: self.duration(
                &path.key("session_cache_lifetime"),
                table.session_cache_lifetime.as_ref(),
                defaults::SESSION_CACHE_LIFETIME,
                Zero::Rejected,
            ),
            client_auth,
            client_crl,
            client_subject_header,
        }
    }

    fn certificate(
        &mut self,
        path: &KeyPath,
        entry: &CertificateTable,
    ) -> Option<CertificateSource> {
        match (&entry.cert, &entry.key, &entry.self_signed) {
            (Some(cert), Some(key), None) => Some(CertificateSource::Files {
                cert: self.file_ref(&path.key("cert"), cert)?,
                key: self.file_ref(&path.key("key"), key)?,
                ocsp: match &entry.ocsp {
                    Some(ocsp) => Some(self.file_ref(&path.key("ocsp"), ocsp)?),
                    None => None,
                },
            }),
            (None, None, Some(names)) => {
                let names_path = path.key("self_signed");
                if entry.ocsp.is_some() {
                    self.report(
                        &path.key("ocsp"),
                        "an OCSP response is about a certificate a CA issued (cert and key), \
                         not a self-signed one",
                    );
                }
                if names.is_empty() {
                    self.report(&names_path, "must name at least one host name or address");
                }
                for (index, name) in names.iter().enumerate() {
                    if let Err(message) = values::server_name(name) {
                        self.report(&names_path.index(index), message);
                    }
                }
                Some(CertificateSource::SelfSigned {
                    names: names.clone(),
                    key: names_path.clone(),
                })
            }
            (Some(_), None, None) => {
                self.report(
                    &path.key("key"),
                    "missing required key: the certificate's private key file",
                );
                None
            }
            (None, Some(_), None) => {
                self.report(
                    &path.key("cert"),
                    "missing required key: the certificate chain file",
                );
                None
            }
            (None, None, None) => {
                self.report(path, "needs cert and key, or self_signed");
                None
            }
            _ => {
                self.report(
                    &path.key("self_signed"),
                    "use either cert and key, or self_signed, not both",
                );
                None
            }
        }
    }

    fn file_ref(&mut self, path: &KeyPath, text: &str) -> Option<FileRef> {
        if text.trim().is_empty() {
            self.report(path, "must name a file");
            return None;
        }
        Some(FileRef {
            path: PathBuf::from(text),
            key: path.clone(),
            line: None,
        })
    }

    fn tls_versions(
        &mut self,
        path: &KeyPath,
        value: Option<&OneOrMany<String>>,
    ) -> Vec<TlsVersion> {
        let Some(value) = value else {
            return defaults::TLS_VERSIONS.to_vec();
        };
        let mut versions = Vec::new();
        for (index, text) in value.values.iter().enumerate() {
            let at = if value.array {
                path.index(index)
            } else {
                path.clone()
            };
            match text.trim().trim_start_matches("TLSv").trim_start_matches("tls") {
                "1.2" => versions.push(TlsVersion::Tls12),
                "1.3" => versions.push(TlsVersion::Tls13),
                "1.0" | "1.1" | "1" => self.report(
                    &at,
                    format!("TLS {text} is not supported: it is insecure (RFC 8996); use \"1.2\" or \"1.3\""),
                ),
                _ => self.report(&at, format!("unknown TLS version \"{text}\"; expected \"1.2\" or \"1.3\"")),
            }
        }
        versions.sort();
        versions.dedup();
        if versions.is_empty() && value.values.is_empty() {
            self.report(path, "must name at least one version");
        }
        if versions.is_empty() {
            return defaults::TLS_VERSIONS.to_vec();
        }
        versions
    }

    fn cipher_suites(
        &mut self,
        path: &KeyPath,
        names: &[String],
        versions: &[TlsVersion],
    ) -> Vec<String> {
        if names.is_empty() {
            self.report(path, "must name at least one cipher suite");
        }
        let mut suites = Vec::new();
        for (index, name) in names.iter().enumerate() {
            let mut name = name.trim().to_ascii_uppercase();
            // TLS 1.3's suites by their IANA names (TLS_AES_128_GCM_SHA256, as OpenSSL and
            // the RFC write them) are the TLS13_ ones (as rustls writes them).
            if let Some(rest) = name.strip_prefix("TLS_")
                && !rest.starts_with("ECDHE_")
            {
                name = format!("TLS13_{rest}");
            }
            if CIPHER_SUITES.contains(&name.as_str()) {
                suites.push(name);
            } else {
                self.report(
                    &path.index(index),
                    format!(
                        "unknown or unsupported cipher suite \"{name}\"; weir offers AEAD suites only: {}",
                        CIPHER_SUITES.join(", ")
                    ),
                );
            }
        }
        for version in versions {
            let (prefix, label) = match version {
                TlsVersion::Tls13 => ("TLS13_", "1.3"),
                TlsVersion::Tls12 => ("TLS_ECDHE_", "1.2"),
            };
            if !suites.is_empty() && !suites.iter().any(|suite| suite.starts_with(prefix)) {
                self.report(
                    path,
                    format!("no suite for TLS {label}, which versions allows"),
                );
            }
        }
        suites
    }

    fn groups(&mut self, path: &KeyPath, names: Option<&[String]>) -> Vec<KeyExchangeGroup> {
        let Some(names) = names else {
            return defaults::TLS_GROUPS.to_vec();
        };
        if names.is_empty() {
            self.report(path, "must name at least one key exchange group");
        }
        let mut groups = Vec::new();
        for (index, name) in names.iter().enumerate() {
            let group = match name.trim().to_ascii_lowercase().as_str() {
                "x25519" => KeyExchangeGroup::X25519,
                "secp256r1" | "p-256" | "p256" | "prime256v1" => KeyExchangeGroup::Secp256r1,
                "secp384r1" | "p-384" | "p384" => KeyExchangeGroup::Secp384r1,
                "x25519mlkem768" => KeyExchangeGroup::X25519MlKem768,
                _ => {
                    self.report(
                        &path.index(index),
                        format!(
                            "unknown key exchange group \"{name}\"; expected \"x25519\", \
                             \"secp256r1\", \"secp384r1\" or \"x25519mlkem768\""
                        ),
                    );
                    continue;
                }
            };
            if !groups.contains(&group) {
                groups.push(group);
            }
        }
        if groups.is_empty() {
            return defaults::TLS_GROUPS.to_vec();
        }
        groups
    }

    fn alpn(&mut self, path: &KeyPath, names: Option<&[String]>, relayed: bool) -> Vec<String> {
        let Some(names) = names else {
            return defaults::TLS_ALPN
                .iter()
                .map(|name| (*name).to_owned())
                .collect();
        };
        for (index, name) in names.iter().enumerate() {
            // An ALPN protocol id is 1 to 255 bytes (RFC 7301 §3.1).
            if relayed && (name.is_empty() || name.len() > 255) {
                self.report(
                    &path.index(index),
                    format!("\"{name}\" is not an ALPN protocol name: 1 to 255 bytes, like \"postgresql\""),
                );
            } else if !relayed && name != "h2" && name != "http/1.1" && name != "http/1.0" {
                self.report(
                    &path.index(index),
                    format!("\"{name}\" is not served; weir speaks \"h2\", \"http/1.1\" and \"http/1.0\" to clients (a protocol = \"tls\" virtual server may offer any)"),
                );
            }
        }
        names.to_vec()
    }

    fn client_auth(&mut self, path: &KeyPath, table: &ServerTlsTable) -> ClientAuth {
        let mode_path = path.key("client_certificates");
        let mode = table.client_certificates.as_deref().map(str::trim);
        let ca = table
            .client_ca
            .as_ref()
            .and_then(|ca| self.file_ref(&path.key("client_ca"), ca));
        match (mode, ca) {
            (None | Some("none"), None) => ClientAuth::None,
            (None | Some("none"), Some(_)) => {
                self.report(
                    &path.key("client_ca"),
                    "has no effect unless client_certificates = \"optional\" or \"required\"",
                );
                ClientAuth::None
            }
            (Some("optional" | "required"), None) => {
                self.report(
                    &path.key("client_ca"),
                    "missing required key: the CA file client certificates are verified against",
                );
                ClientAuth::None
            }
            (Some("optional"), Some(ca)) => ClientAuth::Optional { ca },
            (Some("required"), Some(ca)) => ClientAuth::Required { ca },
            (Some(other), _) => {
                self.report(
                    &mode_path,
                    format!("invalid value \"{other}\"; expected one of \"none\", \"optional\", \"required\""),
                );
                ClientAuth::None
            }
        }
    }

    /// A ticket's lifetime hint counts whole seconds (RFC 8446 §4.6.1), and so do the
    /// ticketer's periods: a part of a second would be cut off, not honoured.
    fn ticket_rotation(
        &mut self,
        path: &KeyPath,
        value: Option<&crate::schema::DurationText>,
    ) -> std::time::Duration {
        let rotation = self.duration(path, value, defaults::TICKET_ROTATION, Zero::Rejected);
        if rotation < std::time::Duration::from_secs(1) || rotation.subsec_nanos() != 0 {
            self.report(
                path,
                "ticket lifetimes count whole seconds: use whole seconds, at least \"1s\"",
            );
        }
        rotation
    }

    pub(super) fn upstream_tls(&mut self, path: &KeyPath, table: &UpstreamTlsTable) -> UpstreamTls {
        let verify = table.verify.unwrap_or(defaults::UPSTREAM_TLS_VERIFY);
        let ca = table
            .ca
            .as_ref()
            .and_then(|ca| self.file_ref(&path.key("ca"), ca));
        if !verify && ca.is_some() {
            self.report(&path.key("ca"), "has no effect when verify = false");
        }
        let server_name =
            table
                .server_name
                .as_ref()
                .and_then(|name| match values::server_name(name) {
                    Ok(()) => Some(name.trim().to_owned()),
                    Err(message) => {
                        self.report(&path.key("server_name"), message);
                        None
                    }
                });
        let client_certificate = match (&table.certificate, &table.key) {
            (Some(cert), Some(key)) => {
                let cert = self.file_ref(&path.key("certificate"), cert);
                let key = self.file_ref(&path.key("key"), key);
                cert.zip(key)
            }
            (Some(_), None) => {
                self.report(
                    &path.key("key"),
                    "missing required key: the client certificate's private key",
                );
                None
            }
            (None, Some(_)) => {
                self.report(
                    &path.key("certificate"),
                    "missing required key: the client certificate chain",
                );
                None
            }
            (None, None) => None,
        };
        UpstreamTls {
            verify,
            ca,
            server_name,
            client_certificate,
            session_resumption: table
                .session_resumption
                .unwrap_or(defaults::UPSTREAM_SESSION_RESUMPTION),
            versions: self.tls_versions(&path.key("versions"), table.versions.as_ref()),
        }
    }
}
