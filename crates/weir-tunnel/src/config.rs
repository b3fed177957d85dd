//! The tunnel's configuration file: a serde schema that mirrors the TOML
//! (`deny_unknown_fields`), validated into a [`TunnelConfig`] the drivers read without ever
//! seeing a string from the file. Loading goes through [`weir_config::parse_toml`], so every
//! problem is reported with the file, the line and the key path, all at once.
//!
//! One file may configure both sides (`[client]` and `[server]`); each command checks the
//! keys its side needs. `examples/tunnel/` in the repository documents every key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use weir_config::Named;
use weir_config::error::Problem;
use weir_config::validate::listeners_clash;
use weir_config::{ConfigError, FileRef, KeyPath};

use crate::sans_io::codec::MAX_AVERAGE_CHUNK;
use crate::sans_io::dedup::ChunkParams;
use crate::sans_io::fec::FecSettings;

mod fec;
mod schema;

use schema::{
    FileClient, FileCompression, FileDedup, FileLink, FileServer, FileService, FileTunnel,
};

/// Which side a command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The near side: accepts TCP for the services and opens the tunnel.
    Client,
    /// The far side: accepts the tunnel and connects to the real servers.
    Server,
}

/// A validated tunnel configuration for one side.
#[derive(Debug, Clone)]
pub struct TunnelConfig {
    /// The file as the user named it (for errors about files it names).
    pub file_name: String,
    /// Which side of the tunnel this instance is; the matching `client` or `server` section is set.
    pub role: Role,
    /// `[client]`: present when the role is the near side.
    pub client: Option<ClientSide>,
    /// `[server]`: present when the role is the far side.
    pub server: Option<ServerSide>,
    /// `[link]`: the configured link the congestion controller is sized from.
    pub link: LinkParams,
    /// zstd level, or `None` for no compression.
    pub compression: Option<i32>,
    /// `[dedup]`: content-defined deduplication of flow data.
    pub dedup: DedupSettings,
    /// `[fec]`: forward error correction on what this side sends.
    pub fec: FecSettings,
    /// Where the admin listener serves `/metrics` and `/healthz`, if anywhere.
    pub metrics: Option<SocketAddr>,
    /// The TCP services the tunnel carries, each a name and its addresses.
    pub services: Vec<Service>,
}

/// `drain_timeout` when the file does not say.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// `[client]`: how the near side reaches and verifies the far side.
#[derive(Debug, Clone)]
pub struct ClientSide {
    pub server: String,
    /// The name verified in the far side's certificate (DNS name or IP address).
    pub server_name: String,
    pub ca: FileRef,
    pub cert: FileRef,
    pub key: FileRef,
    /// How long a new flow waits for the tunnel to (re)connect before it is closed.
    pub connect_timeout: Duration,
    /// On SIGINT or SIGTERM, how long open flows may take to finish before the
    /// connection closes under them.
    pub drain_timeout: Duration,
}

/// `[server]`: where the far side listens and whom it lets in.
#[derive(Debug, Clone)]
pub struct ServerSide {
    pub listen: SocketAddr,
    pub cert: FileRef,
    pub key: FileRef,
    /// Near sides must present a certificate that verifies against this CA.
    pub ca: FileRef,
    /// How long connecting to a service's real server may take.
    pub connect_timeout: Duration,
    /// On SIGINT or SIGTERM, how long open flows may take to finish before the
    /// connection closes under them.
    pub drain_timeout: Duration,
    /// Authenticated tunnel connections served at once; past it a new one is closed (each
    /// may hold `[dedup] store` bytes of what it received).
    pub max_connections: u32,
}

/// `max_connections` when the file does not say: a far side serves a few near sides, one
/// connection each (and a reconnecting one's old connection until its idle timeout).
pub const DEFAULT_MAX_CONNECTIONS: u32 = 16;

/// `[link]`: what the operator knows of the WAN path, which sizes windows and pacing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkParams {
    /// The bottleneck rate in bits per second.
    pub bandwidth: u64,
    /// The round-trip time without queueing.
    pub rtt: Duration,
    /// The path MTU in bytes (IP packets).
    pub mtu: u16,
    pub congestion: Congestion,
    pub transport: Transport,
    pub idle_timeout: Duration,
    pub keep_alive: Duration,
}

/// The congestion controller of the QUIC connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Congestion {
    /// weir's loss-tolerant controller (`crate::sans_io::congestion`).
    Wan,
    /// quinn's BBR.
    Bbr,
    /// quinn's CUBIC (loss-based, the reference).
    Cubic,
}

/// What carries the QUIC connection's packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// UDP datagrams (with the FEC layer).
    Quic,
    /// Frames on TCP connections with BBR, for paths that block UDP (`crate::driver::tcp`).
    Tcp,
}

/// `[dedup]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DedupSettings {
    /// Deduplicate what this side sends.
    pub enabled: bool,
    /// Bytes of chunks this side keeps of what it receives (0: the peer cannot deduplicate).
    pub store: u64,
    pub chunks: ChunkParams,
}

/// `[services.NAME]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    pub name: String,
    /// Near side: where it accepts the service's clients.
    pub listen: Option<SocketAddr>,
    /// Far side: the real server, `host:port`.
    pub connect: Option<String>,
}

impl Default for LinkParams {
    fn default() -> Self {
        LinkParams {
            bandwidth: 100_000_000,
            rtt: Duration::from_millis(100),
            mtu: 1500,
            congestion: Congestion::Wan,
            transport: Transport::Quic,
            idle_timeout: Duration::from_secs(30),
            keep_alive: Duration::from_secs(2),
        }
    }
}

impl Default for DedupSettings {
    fn default() -> Self {
        DedupSettings {
            enabled: true,
            store: 256 << 20,
            chunks: ChunkParams::DEFAULT,
        }
    }
}

/// The default zstd level: fast enough for hundreds of MB/s per core.
pub const DEFAULT_LEVEL: i32 = 1;

/// Reads and validates a tunnel config for `role`. Relative file paths are resolved against
/// the file's directory, and files it names carry their line for later errors.
pub fn load_file(path: &Path, role: Role) -> Result<TunnelConfig, ConfigError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|error| {
        ConfigError::single(
            &name,
            None,
            String::new(),
            format!("cannot read file: {error}"),
        )
    })?;
    let mut config = parse_str(&text, &name, role)?;
    let directory = path.parent().unwrap_or(Path::new("."));
    for file in config.file_refs_mut() {
        if file.path.is_relative() {
            file.path = directory.join(&file.path);
        }
    }
    Ok(config)
}

/// Parses and validates tunnel config text for `role`; `file_name` is used in errors.
pub fn parse_str(text: &str, file_name: &str, role: Role) -> Result<TunnelConfig, ConfigError> {
    let mut config = weir_config::parse_toml(text, file_name, |file: &FileTunnel| {
        let mut checker = Checker::default();
        let config = checker.tunnel(file, role, file_name);
        match config {
            Some(config) if checker.problems.is_empty() => Ok(config),
            _ => Err(checker.problems),
        }
    })?;
    for file in config.file_refs_mut() {
        file.line = weir_config::line_of_key(text, &file.key);
    }
    Ok(config)
}

impl TunnelConfig {
    fn file_refs_mut(&mut self) -> impl Iterator<Item = &mut FileRef> {
        let client = self
            .client
            .iter_mut()
            .flat_map(|client| [&mut client.ca, &mut client.cert, &mut client.key]);
        let server = self
            .server
            .iter_mut()
            .flat_map(|server| [&mut server.ca, &mut server.cert, &mut server.key]);
        client.chain(server)
    }

    /// The bandwidth-delay product of the configured link in bytes.
    pub fn bdp(&self) -> u64 {
        self.link.bdp()
    }
}

impl LinkParams {
    /// The bandwidth-delay product in bytes.
    pub fn bdp(&self) -> u64 {
        (self.bandwidth as f64 / 8.0 * self.rtt.as_secs_f64()) as u64
    }
}

#[derive(Default)]
struct Checker {
    problems: Vec<Problem>,
}

impl Checker {
    fn report(&mut self, path: &KeyPath, message: impl Into<String>) {
        self.problems.push(Problem {
            path: path.clone(),
            message: message.into(),
            because: None,
        });
    }

    fn tunnel(&mut self, file: &FileTunnel, role: Role, file_name: &str) -> Option<TunnelConfig> {
        let root = KeyPath::root();
        let client = match (&file.client, role) {
            (Some(client), _) => self.client(&root.key("client"), client),
            (None, Role::Client) => {
                self.report(&root.key("client"), "the near side needs a [client] table");
                None
            }
            (None, Role::Server) => None,
        };
        let server = match (&file.server, role) {
            (Some(server), _) => self.server(&root.key("server"), server),
            (None, Role::Server) => {
                self.report(&root.key("server"), "the far side needs a [server] table");
                None
            }
            (None, Role::Client) => None,
        };
        let link = self.link(&root.key("link"), file.link.as_ref());
        let compression = self.compression(&root.key("compression"), file.compression.as_ref());
        let dedup = self.dedup(&root.key("dedup"), file.dedup.as_ref());
        let fec = self.fec(&root.key("fec"), file.fec.as_ref());
        let metrics = file.metrics.as_ref().and_then(|metrics| {
            let path = root.key("metrics").key("listen");
            let text = metrics.listen.as_deref()?;
            self.address(&path, text)
        });
        let services = self.services(&root.key("services"), &file.services, role);
        // The metrics listener is bound beside the services' (TCP) ones: both cannot have
        // one address, nor one port where one of them is the wildcard.
        if let Some(metrics) = metrics
            && let Some(service) = services.iter().find(|service| {
                service
                    .listen
                    .is_some_and(|listen| listeners_clash(listen, metrics))
            })
        {
            self.report(
                &root.key("metrics").key("listen"),
                format!(
                    "{metrics} is where service \"{}\" listens ([services.{}] listen)",
                    service.name, service.name
                ),
            );
        }
        Some(TunnelConfig {
            file_name: file_name.to_owned(),
            role,
            client: if role == Role::Client { client } else { None },
            server: if role == Role::Server { server } else { None },
            link,
            compression,
            dedup,
            fec,
            metrics,
            services,
        })
    }

    fn client(&mut self, path: &KeyPath, file: &FileClient) -> Option<ClientSide> {
        let server = self.required(path, "server", file.server.as_ref());
        if let Some(server) = &server
            && !is_host_port(server)
        {
            self.report(
                &path.key("server"),
                format!("invalid address \"{server}\": write host:port, such as 198.51.100.7:4433"),
            );
        }
        let server_name = file.server_name.clone().or_else(|| {
            server
                .as_deref()
                .and_then(|server| server.rsplit_once(':'))
                .map(|(host, _)| host.trim_matches(['[', ']']).to_owned())
        });
        let ca = self.file(path, "ca", file.ca.as_ref());
        let cert = self.file(path, "cert", file.cert.as_ref());
        let key = self.file(path, "key", file.key.as_ref());
        let (connect_timeout, drain_timeout) = self.side_timeouts(
            path,
            file.connect_timeout.as_deref(),
            file.drain_timeout.as_deref(),
        );
        Some(ClientSide {
            server: server?,
            server_name: server_name?,
            ca: ca?,
            cert: cert?,
            key: key?,
            connect_timeout,
            drain_timeout,
        })
    }

    /// `connect_timeout` and `drain_timeout` of `[client]` or `[server]`, defaults filled in.
    fn side_timeouts(
        &mut self,
        path: &KeyPath,
        connect: Option<&str>,
        drain: Option<&str>,
    ) -> (Duration, Duration) {
        let connect = self.duration(
            &path.key("connect_timeout"),
            connect,
            Duration::from_secs(10),
        );
        let drain = self.duration(&path.key("drain_timeout"), drain, DEFAULT_DRAIN_TIMEOUT);
        (connect, drain)
    }

    fn server(&mut self, path: &KeyPath, file: &FileServer) -> Option<ServerSide> {
        let listen = self
            .required(path, "listen", file.listen.as_ref())
            .and_then(|text| self.address(&path.key("listen"), &text));
        let cert = self.file(path, "cert", file.cert.as_ref());
        let key = self.file(path, "key", file.key.as_ref());
        let ca = self.file(path, "ca", file.ca.as_ref());
        let (connect_timeout, drain_timeout) = self.side_timeouts(
            path,
            file.connect_timeout.as_deref(),
            file.drain_timeout.as_deref(),
        );
        let max_connections = match file.max_connections {
            None => DEFAULT_MAX_CONNECTIONS,
            Some(count @ 1..=10_000) => count as u32,
            Some(_) => {
                self.report(&path.key("max_connections"), "must be between 1 and 10000");
                DEFAULT_MAX_CONNECTIONS
            }
        };
        Some(ServerSide {
            listen: listen?,
            cert: cert?,
            key: key?,
            ca: ca?,
            connect_timeout,
            drain_timeout,
            max_connections,
        })
    }

    fn link(&mut self, path: &KeyPath, file: Option<&FileLink>) -> LinkParams {
        let defaults = LinkParams::default();
        let Some(file) = file else {
            return defaults;
        };
        let bandwidth = match file.bandwidth.as_deref() {
            None => defaults.bandwidth,
            Some(text) => match weir_config::units::parse_rate(text) {
                Ok(bits_per_second) if bits_per_second >= 64_000 => bits_per_second,
                Ok(_) => {
                    self.report(&path.key("bandwidth"), "must be at least 64kbit");
                    defaults.bandwidth
                }
                Err(error) => {
                    self.report(&path.key("bandwidth"), error);
                    defaults.bandwidth
                }
            },
        };
        let rtt = self.duration(&path.key("rtt"), file.rtt.as_deref(), defaults.rtt);
        if rtt > Duration::from_secs(5) {
            self.report(&path.key("rtt"), "must be at most 5s");
        }
        let mtu = match file.mtu {
            None => defaults.mtu,
            Some(mtu @ 1280..=9000) => mtu as u16,
            Some(_) => {
                self.report(&path.key("mtu"), "must be between 1280 and 9000");
                defaults.mtu
            }
        };
        let congestion = self.choice(
            &path.key("congestion"),
            file.congestion.as_deref(),
            defaults.congestion,
            &[
                ("wan", Congestion::Wan),
                ("bbr", Congestion::Bbr),
                ("cubic", Congestion::Cubic),
            ],
            "controller",
        );
        let transport = self.choice(
            &path.key("transport"),
            file.transport.as_deref(),
            defaults.transport,
            &[("quic", Transport::Quic), ("tcp", Transport::Tcp)],
            "transport",
        );
        let idle_timeout = self.duration(
            &path.key("idle_timeout"),
            file.idle_timeout.as_deref(),
            defaults.idle_timeout,
        );
        let keep_alive = self.duration(
            &path.key("keep_alive"),
            file.keep_alive.as_deref(),
            defaults.keep_alive,
        );
        if keep_alive >= idle_timeout {
            self.report(&path.key("keep_alive"), "must be shorter than idle_timeout");
        }
        LinkParams {
            bandwidth,
            rtt,
            mtu,
            congestion,
            transport,
            idle_timeout,
            keep_alive,
        }
    }

    fn compression(&mut self, path: &KeyPath, file: Option<&FileCompression>) -> Option<i32> {
        let Some(file) = file else {
            return Some(DEFAULT_LEVEL);
        };
        let level = match file.level {
            None => DEFAULT_LEVEL,
            Some(level @ -7..=19) => level as i32,
            Some(_) => {
                self.report(
                    &path.key("level"),
                    "must be between -7 and 19 (zstd levels)",
                );
                DEFAULT_LEVEL
            }
        };
        file.enabled.unwrap_or(true).then_some(level)
    }

    fn dedup(&mut self, path: &KeyPath, file: Option<&FileDedup>) -> DedupSettings {
        let defaults = DedupSettings::default();
        let Some(file) = file else {
            return defaults;
        };
        let store = match file.store.as_deref() {
            None => defaults.store,
            Some(text) => match weir_config::units::parse_size(text) {
                Ok(size) if size <= 64 << 30 => size,
                Ok(_) => {
                    self.report(&path.key("store"), "must be at most 64GiB");
                    defaults.store
                }
                Err(message) => {
                    self.report(&path.key("store"), message);
                    defaults.store
                }
            },
        };
        let chunks = match file.chunk_size.as_deref() {
            None => defaults.chunks,
            Some(text) => match weir_config::units::parse_size(text) {
                Ok(size) if (1024..=u64::from(MAX_AVERAGE_CHUNK)).contains(&size) => {
                    ChunkParams::with_average(size as u32)
                }
                Ok(_) => {
                    // A chunk runs to four times the average and must fit one block.
                    self.report(&path.key("chunk_size"), "must be between 1KiB and 64KiB");
                    defaults.chunks
                }
                Err(message) => {
                    self.report(&path.key("chunk_size"), message);
                    defaults.chunks
                }
            },
        };
        DedupSettings {
            enabled: file.enabled.unwrap_or(true),
            store,
            chunks,
        }
    }

    fn services(&mut self, path: &KeyPath, file: &Named<FileService>, role: Role) -> Vec<Service> {
        if file.0.is_empty() {
            self.report(
                path,
                "at least one service is required, such as [services.files]",
            );
        }
        let mut services = Vec::with_capacity(file.0.len());
        let mut listens: Vec<SocketAddr> = Vec::new();
        for (name, service) in &file.0 {
            let path = path.key(name);
            if name.is_empty() || name.len() > crate::sans_io::wire::MAX_SERVICE_NAME {
                self.report(&path, "a service name must have 1 to 255 bytes");
            }
            let listen = service
                .listen
                .as_deref()
                .and_then(|text| self.address(&path.key("listen"), text));
            if let Some(listen) = listen.filter(|listen| listen.port() != 0) {
                if listens.iter().any(|other| listeners_clash(*other, listen)) {
                    self.report(
                        &path.key("listen"),
                        format!("{listen} is used by another service"),
                    );
                }
                listens.push(listen);
            }
            if let Some(connect) = &service.connect
                && !is_host_port(connect)
            {
                self.report(
                    &path.key("connect"),
                    format!("invalid address \"{connect}\": write host:port"),
                );
            }
            match role {
                Role::Client if service.listen.is_none() => self.report(
                    &path.key("listen"),
                    "the near side needs listen for each service",
                ),
                Role::Server if service.connect.is_none() => self.report(
                    &path.key("connect"),
                    "the far side needs connect for each service",
                ),
                _ => {}
            }
            services.push(Service {
                name: name.clone(),
                listen,
                connect: service.connect.clone(),
            });
        }
        services
    }

    /// One of the named `options`, or `default` when the key is absent.
    fn choice<T: Copy>(
        &mut self,
        path: &KeyPath,
        text: Option<&str>,
        default: T,
        options: &[(&str, T)],
        what: &str,
    ) -> T {
        let Some(text) = text else {
            return default;
        };
        if let Some((_, value)) = options.iter().find(|(name, _)| *name == text) {
            return *value;
        }
        let names: Vec<&str> = options.iter().map(|(name, _)| *name).collect();
        let expected = match names.split_last() {
            Some((last, [])) => (*last).to_owned(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        };
        self.report(
            path,
            format!("unknown {what} \"{text}\"; expected {expected}"),
        );
        default
    }

    fn required(&mut self, path: &KeyPath, key: &str, value: Option<&String>) -> Option<String> {
        if value.is_none() {
            self.report(&path.key(key), "missing required key");
        }
        value.cloned()
    }

    fn file(&mut self, path: &KeyPath, key: &str, value: Option<&PathBuf>) -> Option<FileRef> {
        match value {
            Some(file) => Some(FileRef {
                path: file.clone(),
                key: path.key(key),
                line: None,
            }),
            None => {
                self.report(&path.key(key), "missing required key");
                None
            }
        }
    }

    fn address(&mut self, path: &KeyPath, text: &str) -> Option<SocketAddr> {
        match text.parse() {
            Ok(address) => Some(address),
            Err(_) => {
                self.report(
                    path,
                    format!(
                        "invalid socket address \"{text}\" (write ip:port, such as 127.0.0.1:8445)"
                    ),
                );
                None
            }
        }
    }

    fn duration(&mut self, path: &KeyPath, text: Option<&str>, default: Duration) -> Duration {
        let Some(text) = text else {
            return default;
        };
        // As for `weir serve`'s timeouts: past a day is a mistake, and far past it the
        // timers' arithmetic (an instant plus the duration) overflows.
        match weir_config::units::parse_duration(text) {
            Ok(duration) if duration > weir_config::units::MAX_DURATION => {
                self.report(
                    path,
                    format!(
                        "\"{text}\" is longer than a day; write it like \"30s\", \"5m\" or \"1h\""
                    ),
                );
                default
            }
            Ok(duration) if !duration.is_zero() => duration,
            Ok(_) => {
                self.report(path, "must be more than zero");
                default
            }
            Err(message) => {
                self.report(path, message);
                default
            }
        }
    }
}

/// `host:port` with a non-empty host and a valid port.
fn is_host_port(text: &str) -> bool {
    text.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty() && !host.contains(char::is_whitespace) && port.parse::<u16>().is_ok()
    })
}

#[cfg(test)]
mod tests;
