//! The handshake stage of an HTTPS virtual server, its metrics and log
//! lines, and certificate reload.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::net::TcpStream;
use weir_config::{ClientAuth, ConfigError, ServerTls};
use weir_observe::{Metrics, TlsMetrics};
use weir_tls::{
    Acceptor, FirstSpeaker, HandshakeFailure, HandshakeInfo, HandshakeStart, ServerStream,
    StagedReload,
};

/// TLS termination on one virtual server.
#[derive(Debug)]
pub struct TlsTermination {
    acceptor: Acceptor,
    metrics: TlsMetrics,
    /// Header that carries the verified client-certificate subject to nodes.
    pub(crate) subject_header: Option<Arc<str>>,
    /// Expiry series exported now: (certificate, key type).
    exported: Mutex<Vec<(String, &'static str)>>,
}

impl TlsTermination {
    /// Reads the certificates; a problem is reported against the config key
    /// that named the file.
    pub fn new(
        virtual_server: &str,
        settings: &ServerTls,
        file_name: &str,
        metrics: &Metrics,
    ) -> Result<TlsTermination, ConfigError> {
        let acceptor = Acceptor::new(virtual_server, settings, file_name)?;
        let termination = TlsTermination {
            acceptor,
            metrics: metrics.tls(virtual_server),
            subject_header: match settings.client_auth {
                ClientAuth::None => None,
                _ => settings.client_subject_header.as_deref().map(Arc::from),
            },
            exported: Mutex::new(Vec::new()),
        };
        // Its expiry series are exported once its model serves (`Live::new`, a reload's
        // commit): a dry run or a refused reload builds it too, and serves nothing.
        Ok(termination)
    }

    /// The handshakes' acceptor.
    pub(crate) fn acceptor(&self) -> &Acceptor {
        &self.acceptor
    }

    /// The virtual server this termination serves.
    pub fn virtual_server(&self) -> &str {
        self.acceptor.virtual_server()
    }

    /// Re-reads certificate, key and CA files. New handshakes use them; open
    /// connections keep theirs. On error nothing changes.
    pub fn reload(&self) -> Result<(), ConfigError> {
        self.acceptor.reload()?;
        self.refresh_expiry();
        Ok(())
    }

    /// Reads the certificate, key and CA files without using them yet (a reload's stage).
    pub(crate) fn stage(&self) -> Result<StagedReload, ConfigError> {
        self.acceptor.stage_reload()
    }

    /// New handshakes use the staged certificates from now on.
    pub(crate) fn commit(&self, staged: StagedReload) {
        self.acceptor.commit(staged);
        self.refresh_expiry();
    }

    /// The termination for new TLS settings of the same virtual server, keeping its
    /// ticket keys and session cache where their settings did not change.
    pub(crate) fn successor(
        &self,
        settings: &ServerTls,
        file_name: &str,
    ) -> Result<TlsTermination, ConfigError> {
        let acceptor = self.acceptor.successor(settings, file_name)?;
        Ok(TlsTermination {
            acceptor,
            metrics: self.metrics.clone(),
            subject_header: match settings.client_auth {
                ClientAuth::None => None,
                _ => settings.client_subject_header.as_deref().map(Arc::from),
            },
            exported: Mutex::new(
                self.exported
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clone(),
            ),
        })
    }

    /// Whether a client whose certificate last passed the checks of epoch `passed` may
    /// still be served, and under which epoch ([`weir_tls::Acceptor::recheck`]).
    pub(crate) fn recheck(
        &self,
        passed: u32,
        chain: Option<&[weir_tls::rustls::pki_types::CertificateDer<'static>]>,
    ) -> Option<u32> {
        self.acceptor.recheck(passed, chain)
    }

    /// The TLS settings this termination was built from.
    pub fn settings(&self) -> &ServerTls {
        self.acceptor.settings()
    }

    /// Logs a warning for each problem with the certificates served now that clients
    /// will refuse or that makes one of them useless (expired, not yet valid, a CA
    /// certificate, a duplicate): at start, after a reload, after a certificate reload.
    pub fn warn_about_certificates(&self) {
        for warning in self.acceptor.certificate_warnings() {
            tracing::warn!(virtual_server = %self.virtual_server(), "{warning}");
        }
    }

    /// Sets the expiry gauges (each certificate's notAfter, and the nextUpdate of the OCSP
    /// response stapled to it) from the certificates served now. A certificate no client
    /// gets (an earlier one of its key type has all its names: the old one during a
    /// rotation, listed after the new one) has no series, so the gauge shows the one
    /// served; one whose first name and key type an earlier one's series has already is
    /// told apart by its place in the list (`api.test #2`).
    pub fn refresh_expiry(&self) {
        let unix = |time: SystemTime| match time.duration_since(UNIX_EPOCH) {
            Ok(since) => since.as_secs_f64(),
            Err(before) => -before.duration().as_secs_f64(),
        };
        let mut current: Vec<(String, &'static str, f64, Option<f64>)> = Vec::new();
        for (index, served) in self.acceptor.certificates().iter().enumerate() {
            if served.never_served {
                continue;
            }
            let info = &served.info;
            let mut name = info
                .names
                .first()
                .cloned()
                .or_else(|| info.addresses.first().map(ToString::to_string))
                .unwrap_or_else(|| info.subject.clone());
            if current
                .iter()
                .any(|(n, k, ..)| *n == name && *k == info.key_type)
            {
                name = format!("{name} #{}", index + 1);
            }
            current.push((
                name,
                info.key_type,
                unix(info.not_after),
                served.ocsp_next_update.map(unix),
            ));
        }
        let mut exported = self
            .exported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (name, key_type) in exported.iter() {
            if !current.iter().any(|(n, k, ..)| n == name && k == key_type) {
                self.metrics.remove_certificate(name, key_type);
            }
        }
        self.metrics.set_certificates(&current);
        *exported = current.into_iter().map(|(n, k, ..)| (n, k)).collect();
    }

    /// A place among the handshakes in progress for a connection whose ClientHello is read
    /// first (passthrough rules), its time counted from now ([`weir_tls::Acceptor::start`]).
    /// `None` at `max_handshakes` (counted and logged): the connection is closed.
    pub(crate) fn start(&self, peer: SocketAddr) -> Option<HandshakeStart> {
        self.acceptor
            .start()
            .map_err(|failure| self.failed(peer, &failure))
            .ok()
    }

    /// The handshake stage. `None`: the handshake failed (counted and
    /// logged); the connection is closed. `first`: who speaks first after it
    /// (the client on HTTP; either side on a tcp virtual server); `start`: a place and a
    /// time taken before ([`TlsTermination::start`]), else from now.
    pub(crate) async fn handshake(
        &self,
        tcp: TcpStream,
        peer: SocketAddr,
        first: FirstSpeaker,
        start: Option<HandshakeStart>,
    ) -> Option<(ServerStream, HandshakeInfo)> {
        let start = start.unwrap_or_else(HandshakeStart::now);
        match self.acceptor.accept_from(tcp, first, start).await {
            Ok((stream, info)) => {
                self.metrics
                    .record_handshake(info.version, info.suite, info.resumed);
                Some((ServerStream::Tls(Box::new(stream)), info))
            }
            Err(failure) => {
                self.failed(peer, &failure);
                None
            }
        }
    }

    fn failed(&self, peer: SocketAddr, failure: &HandshakeFailure) {
        self.metrics.record_failure(failure.reason.as_str());
        tracing::debug!(
            virtual_server = %self.acceptor.virtual_server(),
            client = %peer,
            reason = failure.reason.as_str(),
            detail = %failure.detail,
            "TLS handshake failed"
        );
    }
}
