//! The tunnel config file as written: serde structs that mirror the TOML key for key
//! (`deny_unknown_fields`), every value in its written form so that validation can check them
//! all and report every problem with its key path.

use std::path::PathBuf;

use serde::Deserialize;
use weir_config::Named;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileTunnel {
    pub(super) client: Option<FileClient>,
    pub(super) server: Option<FileServer>,
    pub(super) link: Option<FileLink>,
    pub(super) compression: Option<FileCompression>,
    pub(super) dedup: Option<FileDedup>,
    pub(super) fec: Option<FileFec>,
    pub(super) metrics: Option<FileMetrics>,
    #[serde(default)]
    pub(super) services: Named<FileService>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileClient {
    pub(super) server: Option<String>,
    pub(super) server_name: Option<String>,
    pub(super) ca: Option<PathBuf>,
    pub(super) cert: Option<PathBuf>,
    pub(super) key: Option<PathBuf>,
    pub(super) connect_timeout: Option<String>,
    pub(super) drain_timeout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileServer {
    pub(super) listen: Option<String>,
    pub(super) cert: Option<PathBuf>,
    pub(super) key: Option<PathBuf>,
    pub(super) ca: Option<PathBuf>,
    pub(super) connect_timeout: Option<String>,
    pub(super) drain_timeout: Option<String>,
    pub(super) max_connections: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileLink {
    pub(super) bandwidth: Option<String>,
    pub(super) rtt: Option<String>,
    pub(super) mtu: Option<i64>,
    pub(super) congestion: Option<String>,
    pub(super) transport: Option<String>,
    pub(super) idle_timeout: Option<String>,
    pub(super) keep_alive: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileCompression {
    pub(super) enabled: Option<bool>,
    pub(super) level: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileDedup {
    pub(super) enabled: Option<bool>,
    pub(super) store: Option<String>,
    pub(super) chunk_size: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileFec {
    pub(super) mode: Option<String>,
    pub(super) block: Option<i64>,
    pub(super) max_overhead: Option<String>,
    pub(super) min_loss: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileMetrics {
    pub(super) listen: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileService {
    pub(super) listen: Option<String>,
    pub(super) connect: Option<String>,
}
