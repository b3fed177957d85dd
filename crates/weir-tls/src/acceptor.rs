//! TLS termination for one virtual server: the rustls server config built
//! from the model, the handshake with its timeout and concurrency limit, and
//! hot reload of the certificates.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use arc_swap::ArcSwap;
use aws_lc_rs::digest;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::pki_types::{CertificateDer, UnixTime};
use tokio_rustls::rustls::server::danger::ClientCertVerifier;
use tokio_rustls::rustls::server::{NoServerSessionStorage, ServerConfig, WebPkiClientVerifier};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{self, HandshakeKind, RootCertStore};
use weir_config::{CertificateSource, ClientAuth, ConfigError, ServerTls};

use crate::certs::{self, CertificateInfo, FileProblem, KeyType};
use crate::hold::{self, FirstSpeaker, FlightProbe, Handshake};
use crate::provider;
use crate::session_cache::{InContext, SessionCache};
use crate::store::{CertStore, Entry, Resolver};
use crate::ticketer::Ticketer;

/// Days a generated self-signed certificate is valid.
const SELF_SIGNED_DAYS: u32 = 90;

/// A finished handshake as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakeInfo {
    /// `TLSv1_2` or `TLSv1_3`.
    pub version: &'static str,
    /// IANA suite name.
    pub suite: &'static str,
    /// Whether the handshake resumed a session.
    pub resumed: bool,
    /// The SNI name the client sent, if any.
    pub server_name: Option<String>,
    /// Subject of the client certificate, when one was verified.
    pub client_subject: Option<String>,
    /// The epoch of the client certificate checks the handshake was made under: the same
    /// number while a reload re-reads the same CAs, lists and mode, a new one when they
    /// change (see [`Acceptor::recheck`]).
    pub checks_epoch: u32,
}

/// Why a handshake did not finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureReason {
    /// Not finished within the handshake timeout.
    Timeout,
    /// Too many handshakes in progress; closed without reading.
    Overload,
    /// The client closed or reset the connection.
    Closed,
    /// No version, suite, group or signature scheme in common.
    Incompatible,
    /// A client certificate was required and missing, or did not verify.
    ClientCertificate,
    /// Malformed or unexpected messages (plain HTTP sent to a TLS port, say).
    Protocol,
    /// The client sent a fatal alert.
    Alert,
    /// Any other failure (I/O errors, rustls errors not listed above).
    Other,
}

impl FailureReason {
    /// Every reason, once each, in declaration order.
    pub const ALL: [FailureReason; 8] = [
        FailureReason::Timeout,
        FailureReason::Overload,
        FailureReason::Closed,
        FailureReason::Incompatible,
        FailureReason::ClientCertificate,
        FailureReason::Protocol,
        FailureReason::Alert,
        FailureReason::Other,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::Timeout => "timeout",
            FailureReason::Overload => "overload",
            FailureReason::Closed => "closed",
            FailureReason::Incompatible => "incompatible",
            FailureReason::ClientCertificate => "client_certificate",
            FailureReason::Protocol => "protocol",
            FailureReason::Alert => "alert",
            FailureReason::Other => "other",
        }
    }

    /// Classifies an error from a handshake.
    pub fn of(error: &io::Error) -> FailureReason {
        use io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
        if let Some(tls) = crate::tls_error(error) {
            return match tls {
                rustls::Error::PeerIncompatible(_) => FailureReason::Incompatible,
                // TLS 1.2 when no certificate's key can sign with a scheme the client
                // offered: rustls says so only as a general error (and sends no alert).
                rustls::Error::General(message) if message == "incompatible signing key" => {
                    FailureReason::Incompatible
                }
                rustls::Error::NoCertificatesPresented | rustls::Error::InvalidCertificate(_) => {
                    FailureReason::ClientCertificate
                }
                rustls::Error::AlertReceived(_) => FailureReason::Alert,
                rustls::Error::InvalidMessage(_)
                | rustls::Error::InappropriateMessage { .. }
                | rustls::Error::InappropriateHandshakeMessage { .. }
                | rustls::Error::PeerMisbehaved(_)
                | rustls::Error::DecryptError => FailureReason::Protocol,
                _ => FailureReason::Other,
            };
        }
        match error.kind() {
            UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe => {
                FailureReason::Closed
            }
            io::ErrorKind::InvalidData => FailureReason::Protocol,
            _ => FailureReason::Other,
        }
    }
}

/// Where a connection's handshake stands before it runs: when it began (the handshake
/// timeout counts from then) and, when it was taken already, its place among the
/// handshakes in progress ([`Acceptor::start`]).
#[derive(Debug)]
pub struct HandshakeStart {
    since: std::time::Instant,
    place: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl HandshakeStart {
    /// A handshake that begins now; its place is taken when it runs.
    pub fn now() -> HandshakeStart {
        HandshakeStart {
            since: std::time::Instant::now(),
            place: None,
        }
    }
}

/// A handshake that did not finish.
#[derive(Debug)]
pub struct HandshakeFailure {
    /// Why, as a metric label.
    pub reason: FailureReason,
    /// What happened, for the log line.
    pub detail: String,
}

/// One certificate of a virtual server, as metrics and tools see it.
#[derive(Debug, Clone)]
pub struct Served {
    /// What the certificate says about itself.
    pub info: CertificateInfo,
    /// The nextUpdate of the OCSP response stapled to it (`None` when none is, or the
    /// response has none).
    pub ocsp_next_update: Option<std::time::SystemTime>,
    /// An earlier certificate with the same key type has all its names, so no client gets
    /// it (see [`CertStore::shadowed`]).
    pub never_served: bool,
}

/// Certificates read and a server config built by [`Acceptor::stage_reload`], not yet in use.
#[derive(Debug)]
pub struct StagedReload(Current);

/// What a reload swaps: the server config and the certificates in it.
#[derive(Debug)]
struct Current {
    config: Arc<ServerConfig>,
    store: Arc<CertStore>,
    /// The digest of the client certificate checks this config makes ([`session_context`]).
    checks: [u8; 32],
    /// Names those checks among the configs this acceptor and its predecessors have had:
    /// the same number while they stay the same, a new one when they change.
    checks_epoch: u32,
    /// What verifies client certificates under those checks; `None` when none are asked
    /// for.
    verifier: Option<Verifier>,
}

/// TLS termination for one virtual server.
pub struct Acceptor {
    virtual_server: String,
    settings: ServerTls,
    /// The config file, for errors.
    file_name: String,
    provider: Arc<CryptoProvider>,
    /// Kept across reloads so that sessions survive a certificate change.
    ticketer: Option<Arc<Ticketer>>,
    cache: Option<Arc<SessionCache>>,
    /// Self-signed certificates generated at start, by certificate index; kept across reloads.
    generated: Vec<Option<Arc<CertifiedKey>>>,
    current: ArcSwap<Current>,
    handshakes: Arc<Semaphore>,
    /// The last epoch of client certificate checks given out, shared with successors.
    epochs: Arc<AtomicU32>,
}

impl std::fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acceptor")
            .field("virtual_server", &self.virtual_server)
            .finish_non_exhaustive()
    }
}

impl Acceptor {
    /// Reads the certificates and builds the server config. Problems are
    /// reported against the config key that named the file.
    pub fn new(
        virtual_server: &str,
        settings: &ServerTls,
        file_name: &str,
    ) -> Result<Acceptor, ConfigError> {
        let provider = provider::provider(settings.cipher_suites.as_deref(), &settings.groups);
        let error = |key: &weir_config::KeyPath, message: String| {
            ConfigError::single(file_name, None, key.to_string(), message)
        };
        let ticketer = if settings.session_tickets {
            Some(
                crate::ticketer::ticketer(settings.ticket_rotation).map_err(|e| {
                    ConfigError::single(file_name, None, String::new(), format!("ticket keys: {e}"))
                })?,
            )
        } else {
            None
        };
        let cache = (settings.session_cache_size > 0).then(|| {
            Arc::new(SessionCache::new(
                settings.session_cache_size,
                settings.session_cache_lifetime,
            ))
        });
        // What the process before a binary upgrade had for this virtual server.
        if let Some(carried) = crate::carry::take(virtual_server) {
            if let Some(ticketer) = &ticketer {
                ticketer.adopt(&carried.keys);
            }
            if let Some(cache) = &cache {
                cache.adopt(carried.sessions);
            }
        }
        let mut generated = Vec::with_capacity(settings.certificates.len());
        for source in &settings.certificates {
            generated.push(match source {
                CertificateSource::SelfSigned { names, key } => {
                    let cert = certs::self_signed(names, KeyType::EcdsaP256, SELF_SIGNED_DAYS)
                        .map_err(|e| error(key, format!("cannot generate a certificate: {e}")))?;
                    Some(
                        certs::generated_key(&provider, &cert)
                            .map_err(|message| error(key, message))?,
                    )
                }
                CertificateSource::Files { .. } => None,
            });
        }
        let acceptor_parts = Parts {
            settings,
            provider: &provider,
            ticketer: ticketer.as_ref(),
            cache: cache.as_ref(),
            generated: &generated,
        };
        let current = acceptor_parts
            .build()
            .map_err(|problem| to_config_error(file_name, problem))?;
        Ok(Acceptor {
            virtual_server: virtual_server.to_owned(),
            settings: settings.clone(),
            file_name: file_name.to_owned(),
            provider,
            ticketer,
            cache,
            generated,
            current: ArcSwap::from_pointee(current),
            handshakes: Arc::new(Semaphore::new(settings.max_handshakes.get() as usize)),
            epochs: Arc::new(AtomicU32::new(0)),
        })
    }

    /// Re-reads the certificate, key and CA files. On success new handshakes
    /// use them (open connections keep theirs); on failure nothing changes.
    pub fn reload(&self) -> Result<(), ConfigError> {
        let staged = self.stage_reload()?;
        self.commit(staged);
        Ok(())
    }

    /// Reads the certificate, key and CA files and builds the config new handshakes
    /// would use, without using it yet: a reload validates everything before it
    /// [`commit`](Self::commit)s anything.
    pub fn stage_reload(&self) -> Result<StagedReload, ConfigError> {
        let parts = Parts {
            settings: &self.settings,
            provider: &self.provider,
            ticketer: self.ticketer.as_ref(),
            cache: self.cache.as_ref(),
            generated: &self.generated,
        };
        let mut current = parts
            .build()
            .map_err(|problem| to_config_error(&self.file_name, problem))?;
        current.checks_epoch = self.epoch_for(&current.checks);
        Ok(StagedReload(current))
    }

    /// The epoch a config with client certificate `checks` takes after the one serving
    /// now: the same while the checks are the same (the same CAs, revocation lists and
    /// mode, re-read), a new one when they differ.
    fn epoch_for(&self, checks: &[u8; 32]) -> u32 {
        let now = self.current.load();
        if now.checks == *checks {
            now.checks_epoch
        } else {
            self.epochs.fetch_add(1, Ordering::Relaxed).wrapping_add(1)
        }
    }

    /// Whether a connection whose client's certificate last passed the checks of epoch
    /// `passed` may still be served: at once when those are the checks configured now
    /// (one load); else its certificate chain (`None`: it presented none) is checked
    /// against the current checks. The epoch it passes now, or `None` when it does not
    /// (a CA removed, the certificate revoked, or certificates required of a client that
    /// sent none).
    pub fn recheck(&self, passed: u32, chain: Option<&[CertificateDer<'static>]>) -> Option<u32> {
        let current = self.current.load();
        if current.checks_epoch == passed {
            return Some(passed);
        }
        let passes = match (&current.verifier, chain) {
            (None, _) => true,
            (Some(verifier), Some([leaf, intermediates @ ..])) => verifier
                .verify_client_cert(leaf, intermediates, UnixTime::now())
                .is_ok(),
            (Some(verifier), _) => !verifier.client_auth_mandatory(),
        };
        passes.then_some(current.checks_epoch)
    }

    /// New handshakes use the staged certificates from now on.
    pub fn commit(&self, staged: StagedReload) {
        self.current.store(Arc::new(staged.0));
    }

    /// The acceptor for new `settings` of the same virtual server (a reload changed its
    /// TLS table): the ticket keys and the session cache carry over when their settings
    /// and the client certificate checks did not change, so clients keep resuming; so do self-signed certificates generated
    /// for the same names, and the count of handshakes in progress.
    pub fn successor(
        &self,
        settings: &ServerTls,
        file_name: &str,
    ) -> Result<Acceptor, ConfigError> {
        let mut next = Acceptor::new(&self.virtual_server, settings, file_name)?;
        let old = &self.settings;
        // A session remembers the client certificate checks of the handshake that made it
        // (none, or another CA's): it resumes only under the same ones. New checks start
        // new keys and a new cache, so every client goes through them.
        let same_checks =
            settings.client_auth == old.client_auth && settings.client_crl == old.client_crl;
        if same_checks
            && settings.session_tickets == old.session_tickets
            && settings.ticket_rotation == old.ticket_rotation
        {
            next.ticketer = self.ticketer.clone();
        }
        if same_checks
            && settings.session_cache_size == old.session_cache_size
            && settings.session_cache_lifetime == old.session_cache_lifetime
        {
            next.cache = self.cache.clone();
        }
        if settings.max_handshakes == old.max_handshakes {
            next.handshakes = Arc::clone(&self.handshakes);
        }
        for (index, source) in settings.certificates.iter().enumerate() {
            if let (
                CertificateSource::SelfSigned { names, .. },
                Some(CertificateSource::SelfSigned {
                    names: old_names, ..
                }),
            ) = (source, old.certificates.get(index))
                && names == old_names
                && let Some(Some(key)) = self.generated.get(index)
            {
                next.generated[index] = Some(Arc::clone(key));
            }
        }
        // Rebuild with what was carried over, so the server config uses it. The epochs
        // of client certificate checks go on from this acceptor's.
        next.epochs = Arc::clone(&self.epochs);
        let mut staged = next.stage_reload()?;
        staged.0.checks_epoch = self.epoch_for(&staged.0.checks);
        next.commit(staged);
        Ok(next)
    }

    /// The TLS settings this acceptor was built from.
    pub fn settings(&self) -> &ServerTls {
        &self.settings
    }

    /// The certificates loaded now, in config order.
    pub fn certificates(&self) -> Vec<Served> {
        let current = self.current.load();
        let store = &current.store;
        store
            .entries()
            .iter()
            .enumerate()
            .map(|(index, entry)| Served {
                info: entry.info.clone(),
                ocsp_next_update: entry
                    .stapled
                    .as_ref()
                    .and_then(|(_, staple)| staple.next_update),
                never_served: store.shadowed(index).is_some(),
            })
            .collect()
    }

    /// What an operator should hear about the certificates served now (see
    /// [`CertStore::warnings`]).
    pub fn certificate_warnings(&self) -> Vec<String> {
        self.current
            .load()
            .store
            .warnings(std::time::SystemTime::now())
    }

    /// The virtual server whose handshakes this acceptor makes.
    pub fn virtual_server(&self) -> &str {
        &self.virtual_server
    }

    /// Its ticket keys and cached sessions, for a successor process (`crate::carry`).
    pub(crate) fn carried(&self) -> crate::carry::Carried {
        crate::carry::Carried {
            keys: self
                .ticketer
                .as_ref()
                .map(|ticketer| ticketer.export())
                .unwrap_or_default(),
            sessions: self
                .cache
                .as_ref()
                .map(|cache| cache.export())
                .unwrap_or_default(),
        }
    }

    /// The server config new handshakes use (for tests and tools).
    pub fn server_config(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.current.load().config)
    }

    /// Runs the handshake on an accepted connection, within the handshake
    /// timeout and the limit on handshakes in progress. `first` says who speaks
    /// first afterwards (see [`crate::hold`]).
    pub async fn accept(
        &self,
        tcp: TcpStream,
        first: FirstSpeaker,
    ) -> Result<(tokio_rustls::server::TlsStream<TcpStream>, HandshakeInfo), HandshakeFailure> {
        self.accept_from(tcp, first, HandshakeStart::now()).await
    }

    /// Takes a place among the handshakes in progress (`max_handshakes`) for a connection
    /// whose ClientHello is read before it is known whether weir makes its handshake
    /// (passthrough rules): the reading counts against the limit and the handshake timeout
    /// as the handshake does. The `Overload` failure when the limit is reached.
    pub fn start(&self) -> Result<HandshakeStart, HandshakeFailure> {
        Ok(HandshakeStart {
            since: std::time::Instant::now(),
            place: Some(self.take_place()?),
        })
    }

    fn take_place(&self) -> Result<tokio::sync::OwnedSemaphorePermit, HandshakeFailure> {
        Arc::clone(&self.handshakes)
            .try_acquire_owned()
            .map_err(|_| HandshakeFailure {
                reason: FailureReason::Overload,
                detail: format!(
                    "{} handshakes already in progress",
                    self.settings.max_handshakes
                ),
            })
    }

    /// [`Acceptor::accept`] for a handshake that began at `start` ([`Acceptor::start`]):
    /// its place is kept, and its time counts from then.
    pub async fn accept_from(
        &self,
        tcp: TcpStream,
        first: FirstSpeaker,
        start: HandshakeStart,
    ) -> Result<(tokio_rustls::server::TlsStream<TcpStream>, HandshakeInfo), HandshakeFailure> {
        let permit = match start.place {
            Some(place) => place,
            None => self.take_place()?,
        };
        // The config and its checks' epoch from one load: the epoch is the one of the
        // checks this handshake makes.
        let (config, checks_epoch) = {
            let current = self.current.load();
            (Arc::clone(&current.config), current.checks_epoch)
        };
        let acceptor = TlsAcceptor::from(config);
        let mut handshake = Handshake::new(acceptor.accept(tcp), first, permit);
        let timeout = self.settings.handshake_timeout;
        let left = timeout.saturating_sub(start.since.elapsed());
        let outcome = match tokio::time::timeout(left, &mut handshake).await {
            // A client that finished and stayed silent: let its queued Finished count.
            Err(_) if handshake.is_held() => match handshake.release() {
                Ok(()) => tokio::time::timeout(hold::GRACE, &mut handshake).await,
                Err(error) => Ok(Err(error)),
            },
            outcome => outcome,
        };
        let failure = |reason: FailureReason, detail: String| HandshakeFailure { reason, detail };
        let stream = match outcome {
            Ok(Ok(stream)) => handshake
                .finish(stream)
                .map_err(|error| failure(FailureReason::Other, error.to_string()))?,
            Ok(Err(error)) => return Err(failure(FailureReason::of(&error), error.to_string())),
            Err(_) => {
                return Err(failure(
                    FailureReason::Timeout,
                    format!("handshake not finished within {timeout:?}"),
                ));
            }
        };
        let connection = stream.get_ref().1;
        let info = HandshakeInfo {
            version: connection
                .protocol_version()
                .and_then(|version| version.as_str())
                .unwrap_or("unknown"),
            suite: connection
                .negotiated_cipher_suite()
                .map_or("unknown", provider::suite_name),
            resumed: connection.handshake_kind() == Some(HandshakeKind::Resumed),
            server_name: connection.server_name().map(str::to_owned),
            client_subject: connection
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(certs::subject_of),
            checks_epoch,
        };
        Ok((stream, info))
    }
}

fn to_config_error(file_name: &str, problem: FileProblem) -> ConfigError {
    ConfigError::single(
        file_name,
        problem.file.line,
        problem.file.key.to_string(),
        problem.message,
    )
}

/// Everything a server config is built from.
struct Parts<'a> {
    settings: &'a ServerTls,
    provider: &'a Arc<CryptoProvider>,
    ticketer: Option<&'a Arc<Ticketer>>,
    cache: Option<&'a Arc<SessionCache>>,
    generated: &'a [Option<Arc<CertifiedKey>>],
}

/// With TLS 1.2 alone, a certificate needs a configured suite that signs with its kind of
/// key (an `ECDHE_ECDSA` suite for an ECDSA key, `ECDHE_RSA` for RSA: RFC 5246 §7.4.2),
/// or every handshake that would choose it fails. TLS 1.3 suites sign with any key.
fn usable_with_tls12_only(
    settings: &ServerTls,
    provider: &CryptoProvider,
    key: &CertifiedKey,
) -> Result<(), String> {
    if settings.versions.contains(&weir_config::TlsVersion::Tls13) {
        return Ok(());
    }
    let algorithm = key.key.algorithm();
    let usable = provider.cipher_suites.iter().any(|suite| match suite {
        rustls::SupportedCipherSuite::Tls12(suite) => key.key.choose_scheme(suite.sign).is_some(),
        rustls::SupportedCipherSuite::Tls13(_) => false,
    });
    match usable {
        true => Ok(()),
        false => Err(format!(
            "with versions = \"1.2\" alone, cipher_suites has no suite for this certificate's \
             {algorithm:?} key: every handshake would fail (add an ECDHE suite for it, or allow \
             TLS 1.3)"
        )),
    }
}

impl Parts<'_> {
    fn build(&self) -> Result<Current, FileProblem> {
        let settings = self.settings;
        let mut entries = Vec::with_capacity(settings.certificates.len());
        for (index, source) in settings.certificates.iter().enumerate() {
            let (key, named_by) = match (source, self.generated.get(index).cloned().flatten()) {
                (CertificateSource::SelfSigned { key, .. }, Some(generated)) => (
                    generated,
                    weir_config::FileRef {
                        path: Default::default(),
                        key: key.clone(),
                        line: None,
                    },
                ),
                (CertificateSource::Files { cert, key, .. }, _) => (
                    Arc::new(certs::load_certified_key(self.provider, cert, key)?),
                    cert.clone(),
                ),
                (CertificateSource::SelfSigned { key, .. }, None) => {
                    return Err(FileProblem {
                        file: weir_config::FileRef {
                            path: Default::default(),
                            key: key.clone(),
                            line: None,
                        },
                        message: "self-signed certificate missing".to_owned(),
                    });
                }
            };
            let leaf = key.end_entity_cert().map_err(|error| FileProblem {
                file: named_by.clone(),
                message: format!("no certificate: {error}"),
            })?;
            let info =
                CertificateInfo::of(leaf, key.key.algorithm()).map_err(|message| FileProblem {
                    file: named_by.clone(),
                    message,
                })?;
            usable_with_tls12_only(settings, self.provider, &key).map_err(|message| {
                FileProblem {
                    file: named_by.clone(),
                    message,
                }
            })?;
            let entry = Entry::new(Arc::clone(&key), info);
            entries.push(match source {
                CertificateSource::Files {
                    ocsp: Some(file), ..
                } => entry.with_staple(certs::load_staple(file, &key.cert)?),
                _ => entry,
            });
        }
        let store = Arc::new(CertStore::new(entries));

        let builder = ServerConfig::builder_with_provider(Arc::clone(self.provider))
            .with_protocol_versions(&provider::versions(&settings.versions))
            .map_err(|error| FileProblem {
                file: first_file(settings),
                message: format!("no usable TLS version with these suites: {error}"),
            })?;
        let (client_verifier, context) = client_checks(settings, self.provider)?;
        let builder = match &client_verifier {
            None => builder.with_no_client_auth(),
            Some(verifier) => builder.with_client_cert_verifier(Arc::clone(verifier)),
        };
        let mut config = builder.with_cert_resolver(Arc::new(Resolver(Arc::clone(&store))));
        config.alpn_protocols = alpn_ids(&settings.alpn);
        // The configured suite order decides, not the client's (AES-GCM first).
        config.ignore_client_order = true;
        // The cache and the ticket keys outlive this config; what it verifies clients
        // against is sealed into each session, so only sessions made under it resume here.
        config.session_storage = match self.cache {
            Some(cache) => Arc::new(InContext::new(cache, context)),
            None => Arc::new(NoServerSessionStorage {}),
        };
        if let Some(ticketer) = self.ticketer {
            config.ticketer = crate::ticketer::in_context(ticketer, context);
        }
        if self.ticketer.is_none() && self.cache.is_none() {
            config.send_tls13_tickets = 0;
        }
        // Tells a handshake when weir's flight is complete (see `crate::hold`).
        config.key_log = Arc::new(FlightProbe);
        Ok(Current {
            config: Arc::new(config),
            store,
            checks: context,
            checks_epoch: 0,
            verifier: client_verifier,
        })
    }
}

/// What verifies client certificates.
type Verifier = Arc<dyn ClientCertVerifier>;

/// The client certificate checks of `settings`: what verifies client certificates (`None`
/// when none are asked for), and the digest of those checks ([`session_context`]).
fn client_checks(
    settings: &ServerTls,
    provider: &Arc<CryptoProvider>,
) -> Result<(Option<Verifier>, [u8; 32]), FileProblem> {
    let (ClientAuth::Optional { ca } | ClientAuth::Required { ca }) = &settings.client_auth else {
        return Ok((None, session_context(&settings.client_auth, None, &[])));
    };
    let roots = Arc::new(certs::load_roots(ca)?);
    let crls = match &settings.client_crl {
        Some(file) => certs::load_crls(file)?,
        None => Vec::new(),
    };
    let context = session_context(&settings.client_auth, Some(&roots), &crls);
    let mut verifier = WebPkiClientVerifier::builder_with_provider(roots, Arc::clone(provider));
    if !crls.is_empty() {
        // The client's own certificate is checked (as nginx's ssl_crl does), and a
        // certificate whose issuer has no list in the file is refused.
        verifier = verifier.with_crls(crls).only_check_end_entity_revocation();
    }
    let verifier = if matches!(settings.client_auth, ClientAuth::Optional { .. }) {
        verifier.allow_unauthenticated()
    } else {
        verifier
    };
    let verifier: Verifier = verifier.build().map_err(|error| FileProblem {
        file: ca.clone(),
        message: format!("cannot verify client certificates with this CA: {error}"),
    })?;
    Ok((Some(verifier), context))
}

/// What a revocation list decides: its issuer and the serial numbers it revokes, as a set.
/// A list re-issued on schedule (a new number and update times, the same certificates)
/// decides the same, so it changes neither what resumes nor which connections stay
/// (`Acceptor::recheck`). A list that does not parse (rustls read it) counts as its
/// bytes.
fn revocation_digest(crl: &[u8]) -> [u8; 32] {
    let mut one = digest::Context::new(&digest::SHA256);
    match x509_parser::parse_x509_crl(crl) {
        Ok((_, list)) => {
            let issuer = list.issuer().as_raw();
            one.update(&[1]);
            one.update(&(issuer.len() as u64).to_be_bytes());
            one.update(issuer);
            let mut serials: Vec<&[u8]> = list
                .iter_revoked_certificates()
                .map(|revoked| revoked.raw_serial())
                .collect();
            serials.sort_unstable();
            serials.dedup();
            for serial in serials {
                one.update(&(serial.len() as u64).to_be_bytes());
                one.update(serial);
            }
        }
        Err(_) => {
            one.update(&[0]);
            one.update(crl);
        }
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(one.finish().as_ref());
    out
}

/// The protocol ids of ALPN names, as the server config takes them.
fn alpn_ids(names: &[String]) -> Vec<Vec<u8>> {
    names.iter().map(|name| name.as_bytes().to_vec()).collect()
}

/// The digest of what a handshake checks client certificates against: the mode (none,
/// optional, required), the trust anchors loaded from the CA file and the revocation lists —
/// their content, not their paths, the anchors as a set, so a reload that re-reads a changed
/// file changes it while one that re-reads the same CAs does not. A session resumes only
/// under the context it was made in (a resumed handshake skips the client certificate check).
fn session_context(
    client_auth: &ClientAuth,
    roots: Option<&RootCertStore>,
    crls: &[rustls::pki_types::CertificateRevocationListDer<'_>],
) -> [u8; 32] {
    let mode: u8 = match client_auth {
        ClientAuth::None => 0,
        ClientAuth::Optional { .. } => 1,
        ClientAuth::Required { .. } => 2,
    };
    let mut anchors: Vec<[u8; 32]> = roots
        .map(|roots| {
            roots
                .roots
                .iter()
                .map(|anchor| {
                    let mut one = digest::Context::new(&digest::SHA256);
                    for part in [
                        Some(anchor.subject.as_ref()),
                        Some(anchor.subject_public_key_info.as_ref()),
                        anchor.name_constraints.as_ref().map(|der| der.as_ref()),
                    ] {
                        // Length-prefixed, so no two anchors encode alike; absent is not empty.
                        match part {
                            Some(bytes) => {
                                one.update(&[1]);
                                one.update(&(bytes.len() as u64).to_be_bytes());
                                one.update(bytes);
                            }
                            None => one.update(&[0]),
                        }
                    }
                    let mut out = [0u8; 32];
                    out.copy_from_slice(one.finish().as_ref());
                    out
                })
                .collect()
        })
        .unwrap_or_default();
    anchors.sort_unstable();
    anchors.dedup();
    let mut all = digest::Context::new(&digest::SHA256);
    all.update(&[mode]);
    for anchor in &anchors {
        all.update(anchor);
    }
    // The revocation lists too: a session made before a certificate was revoked must not
    // resume past the list that revokes it (a resumed handshake checks no certificate).
    // What each list decides, as a set: one re-issued on schedule is the same.
    let mut lists: Vec<[u8; 32]> = crls.iter().map(|crl| revocation_digest(crl)).collect();
    lists.sort_unstable();
    lists.dedup();
    for list in &lists {
        all.update(list);
    }
    let mut context = [0u8; 32];
    context.copy_from_slice(all.finish().as_ref());
    context
}

fn first_file(settings: &ServerTls) -> weir_config::FileRef {
    match settings.certificates.first() {
        Some(CertificateSource::Files { cert, .. }) => cert.clone(),
        Some(CertificateSource::SelfSigned { key, .. }) => weir_config::FileRef {
            path: Default::default(),
            key: key.clone(),
            line: None,
        },
        None => weir_config::FileRef {
            path: Default::default(),
            key: weir_config::KeyPath::root(),
            line: None,
        },
    }
}
