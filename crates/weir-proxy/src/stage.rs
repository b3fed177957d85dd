//! A reload's first step: everything that can fail, done before anything that serves
//! changes — files read, TLS configs built, the access log opened, new listeners bound.

use std::collections::HashMap;
use std::sync::Arc;

use weir_config::{Config, ConfigError, Diagnostic, KeyPath};
use weir_observe::{AccessLog, Metrics};
use weir_tls::StagedReload;

use crate::listener::{Bound, Listeners, bind_tcp};
use crate::model::Model;
use crate::tls::TlsTermination;

/// Everything a candidate needs that can fail, done before anything changes.
pub(crate) struct Staged {
    pub connectors: HashMap<String, weir_tls::Connector>,
    pub tls: Vec<(String, StagedTls)>,
    pub bound: Vec<Bound>,
    pub access_log: Option<Arc<AccessLog>>,
    /// Each virtual server's compiled rules, by name.
    pub rules: HashMap<String, weir_rules::RuleSet>,
}

pub(crate) enum StagedTls {
    /// Same TLS settings: the same termination, with its certificates re-read.
    Reload(Arc<TlsTermination>, StagedReload),
    /// A new termination (new settings carry the ticket keys and session cache over).
    New(Arc<TlsTermination>),
}

/// What a candidate is staged for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// It will serve: files are opened (and an access log file created) for it.
    Serve,
    /// Only checked (`weir check`, a validated candidate): nothing is left behind.
    DryRun,
}

/// Reads every file `candidate` names and builds its TLS configs, carrying over what the
/// running model's virtual servers of the same names hold. Every problem is reported.
pub(crate) fn stage(
    current: &Model,
    candidate: &Config,
    metrics: &Metrics,
    access_log: Option<&Arc<AccessLog>>,
    purpose: Purpose,
) -> Result<Staged, ConfigError> {
    let file_name = candidate.file_name();
    let mut errors: Vec<Diagnostic> = Vec::new();
    // The admin listener reads its token itself; a token it could not read would leave the
    // API refusing every request, so the candidate is refused instead.
    if let Some(admin) = &candidate.admin
        && let Some(file) = &admin.token_file
        && let Err(why) = admin.read_token()
    {
        errors.extend(candidate.file_error(file, why).errors);
    }
    // The upgrade socket is bound at start: a directory that is not there would stop the
    // start after the file was declared sound, with no line to look at.
    if let Some(socket) = &candidate.runtime.upgrade_socket
        && let Some(directory) = socket.parent()
        && !directory.is_dir()
    {
        let key = KeyPath::root().key("runtime").key("upgrade_socket");
        let why = format!("{} is not a directory", directory.display());
        errors.extend(candidate.key_error(&key, why).errors);
    }
    let mut connectors = HashMap::new();
    for pool in &candidate.pools {
        if let Some(tls) = &pool.tls {
            match weir_tls::Connector::new(tls, &file_name) {
                Ok(connector) => {
                    connectors.insert(pool.name.clone(), connector);
                }
                Err(error) => errors.extend(error.errors),
            }
        }
    }
    let mut staged_tls = Vec::new();
    for vs in &candidate.virtual_servers {
        let Some(settings) = &vs.tls else { continue };
        let previous = current.virtual_server(&vs.name).and_then(|v| v.tls.clone());
        let result = match previous {
            Some(termination) if termination.settings() == settings => termination
                .stage()
                .map(|staged| StagedTls::Reload(termination, staged)),
            Some(termination) => termination
                .successor(settings, &file_name)
                .map(|next| StagedTls::New(Arc::new(next))),
            None => TlsTermination::new(&vs.name, settings, &file_name, metrics)
                .map(|next| StagedTls::New(Arc::new(next))),
        };
        match result {
            Ok(staged) => staged_tls.push((vs.name.clone(), staged)),
            Err(error) => errors.extend(error.errors),
        }
    }
    let mut rules = HashMap::new();
    for vs in &candidate.virtual_servers {
        match weir_rules::RuleSet::new(&vs.traffic) {
            Ok(compiled) => {
                rules.insert(vs.name.clone(), compiled);
            }
            Err(error) => {
                let key = KeyPath::root()
                    .key("virtual_servers")
                    .key(&vs.name)
                    .key("rules");
                errors
                    .extend(ConfigError::single(&file_name, None, key.to_string(), error.0).errors);
            }
        }
    }
    let access_log = match access_log_for(candidate, access_log, purpose) {
        Ok(log) => log,
        Err(error) => {
            errors.extend(error.errors);
            None
        }
    };
    if !errors.is_empty() {
        return Err(ConfigError {
            file: file_name,
            errors,
        });
    }
    Ok(Staged {
        connectors,
        tls: staged_tls,
        bound: Vec::new(),
        access_log,
        rules,
    })
}

/// The access log `candidate` asks for: the running one when its format and file stay,
/// else a new one (the file opened now, so a bad path refuses the candidate).
/// A dry run only checks that the file can be opened, and creates none (`None` then).
fn access_log_for(
    candidate: &Config,
    running: Option<&Arc<AccessLog>>,
    purpose: Purpose,
) -> Result<Option<Arc<AccessLog>>, ConfigError> {
    if !candidate.log.access_log {
        return Ok(None);
    }
    let settings = &candidate.access_log;
    let path = settings.file.as_ref().map(|file| file.path.as_path());
    if let Some(running) = running.filter(|log| log.is(settings.format, path)) {
        return Ok(Some(Arc::clone(running)));
    }
    let cannot_open = |file: &weir_config::FileRef, error: std::io::Error| {
        candidate.file_error(
            file,
            format!("cannot open {}: {error}", file.path.display()),
        )
    };
    match (&settings.file, purpose) {
        (None, Purpose::Serve) => AccessLog::stdout(settings.format)
            .map(|log| Some(Arc::new(log)))
            .map_err(|error| {
                let key = KeyPath::root().key("log").key("access_log");
                candidate.key_error(&key, format!("cannot start its writer: {error}"))
            }),
        (None, Purpose::DryRun) => Ok(None),
        (Some(file), Purpose::Serve) => AccessLog::file(settings.format, &file.path)
            .map(|log| Some(Arc::new(log)))
            .map_err(|error| cannot_open(file, error)),
        (Some(file), Purpose::DryRun) => AccessLog::probe(&file.path)
            .map(|()| None)
            .map_err(|error| cannot_open(file, error)),
    }
}

/// The dry run's file checks: the same as [`stage`], results dropped, no file created.
pub(crate) fn check_files(
    current: &Model,
    candidate: &Config,
    metrics: &Metrics,
    access_log: Option<&Arc<AccessLog>>,
) -> Result<(), ConfigError> {
    stage(current, candidate, metrics, access_log, Purpose::DryRun).map(drop)
}

/// The error of a listen address of virtual server `name` that cannot be bound, placed at
/// its key (and line, when the file can be read again).
pub(crate) fn listen_error(
    config: &Config,
    name: &str,
    address: std::net::SocketAddr,
    error: &std::io::Error,
) -> ConfigError {
    let mut key = KeyPath::root()
        .key("virtual_servers")
        .key(name)
        .key("listen");
    if let Some(vs) = config.virtual_servers.iter().find(|vs| vs.name == name)
        && vs.listen.len() > 1
        && let Some(index) = vs.listen.iter().position(|&a| a == address)
    {
        key = key.index(index);
    }
    config.listen_error(&key, address, error)
}

/// Binds the listen addresses `candidate` adds. On error, those bound are closed again.
pub(crate) fn bind_added(
    candidate: &Config,
    listeners: &Listeners,
) -> Result<Vec<Bound>, ConfigError> {
    let mut bound = Vec::new();
    for vs in &candidate.virtual_servers {
        for &address in &vs.listen {
            if listeners.serves(address, &vs.name) {
                continue;
            }
            let socket = bind_tcp(address, vs.backlog)
                .map_err(|error| listen_error(candidate, &vs.name, address, &error))?;
            bound.push(Bound {
                address,
                virtual_server: vs.name.clone(),
                options: weir_config::diff::ListenOptions::of(vs),
                socket,
            });
        }
    }
    Ok(bound)
}
