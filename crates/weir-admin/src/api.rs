//! The REST API, `/api/v1/...`: the running model, dry run and apply of a candidate, status,
//! node operations, certificate reload and stats (`docs/admin-api.md`).
//!
//! The config file is the one source of truth: every change the API makes is written to the
//! file first (node operations edit just the node's keys, keeping the rest of the file as
//! written) and then applied through the same reload as SIGHUP. When there is no file (the
//! embedded default), or the file on disk no longer matches what runs (edited but not
//! reloaded), a change is refused with 409 rather than lose either side.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;
use weir_config::diff::ConfigDiff;
use weir_config::edit::{EditError, NodeEdit, NodeRef, edit_node, same_label};
use weir_config::{Config, ConfigError, NodeMode};
use weir_observe::Metrics;
use weir_proxy::{Live, ReloadError};

use crate::auth::{TokenCache, Verdict};
use crate::http::{Method, Request, Response};
use crate::views;

/// What the API controls: the running proxy, and the admin token.
#[derive(Debug)]
pub struct Control {
    live: Arc<Live>,
    token: TokenCache,
    /// One change at a time: read the file, write it, reload.
    writes: tokio::sync::Mutex<()>,
}

/// Why a change was not made: the response to send.
type Refusal = Box<Response>;

impl Control {
    /// Control over `live`. Fails when the configured token file cannot be read (weir
    /// refuses to start then).
    pub fn new(live: Arc<Live>) -> Result<Control, String> {
        let model = live.current();
        let token = TokenCache::read(&model.config)?;
        if let Some(token) = &token {
            crate::auth::warn_if_short(token);
        }
        Ok(Control {
            token: TokenCache::started(model.generation, token),
            live,
            writes: tokio::sync::Mutex::new(()),
        })
    }

    /// Whether the running configuration names no token (the API then trusts whoever
    /// reaches its loopback address).
    pub(crate) fn tokenless(&self) -> bool {
        self.live
            .current()
            .config
            .admin
            .as_ref()
            .is_none_or(|admin| admin.token_file.is_none())
    }

    pub(crate) fn authorize(&self, authorization: Option<&[u8]>) -> Verdict {
        let model = self.live.current();
        self.token
            .check(model.generation, &model.config, authorization)
    }
}

/// What an `/api/...` request asks for, told from its method and path alone: a request
/// that names nothing (an unknown path, a method the resource does not take, a pool or
/// node the running config does not have) is refused from its head, before its body is
/// read ([`crate::routes::refusal`]).
enum Endpoint<'a> {
    Model,
    ConfigText,
    Validate,
    Replace,
    Reload,
    LastReload,
    Status,
    Stats,
    Certificates,
    NodeState {
        pool: &'a str,
        node: &'a str,
        mode: NodeMode,
    },
    NodeWeight {
        pool: &'a str,
        node: &'a str,
    },
    Cache(crate::cache_api::Endpoint<'a>),
}

/// The path's segments, percent-decoded; a trailing `/` names the same resource.
fn segments_of(path: &str) -> Vec<String> {
    path.trim_end_matches('/')
        .split('/')
        .map(percent_decode)
        .collect()
}

fn endpoint<'a>(
    live: &Live,
    method: Method,
    segments: &[&'a str],
) -> Result<Endpoint<'a>, Refusal> {
    if let Some(found) = crate::cache_api::endpoint(live, method, segments) {
        return found.map(Endpoint::Cache);
    }
    let endpoint = match (method, segments) {
        (Method::Get | Method::Head, ["", "api", "v1", "config"]) => Endpoint::Model,
        (Method::Get | Method::Head, ["", "api", "v1", "config", "toml"]) => Endpoint::ConfigText,
        (Method::Post, ["", "api", "v1", "config", "validate"]) => Endpoint::Validate,
        (Method::Put, ["", "api", "v1", "config"]) => Endpoint::Replace,
        (Method::Post, ["", "api", "v1", "reload"]) => Endpoint::Reload,
        (Method::Get | Method::Head, ["", "api", "v1", "reload"]) => Endpoint::LastReload,
        (Method::Get | Method::Head, ["", "api", "v1", "status"]) => Endpoint::Status,
        (Method::Get | Method::Head, ["", "api", "v1", "stats"]) => Endpoint::Stats,
        (Method::Post, ["", "api", "v1", "certificates", "reload"]) => Endpoint::Certificates,
        (Method::Post, ["", "api", "v1", "pools", pool, "nodes", node, operation])
            if *operation != "weight" =>
        {
            let mode = match *operation {
                "drain" => NodeMode::Draining,
                "disable" => NodeMode::Disabled,
                "enable" => NodeMode::Active,
                _ => {
                    return Err(Box::new(Response::error(
                        404,
                        format!(
                            "unknown node operation \"{operation}\"; expected drain, disable or enable"
                        ),
                    )));
                }
            };
            known_node(live, pool, node)?;
            Endpoint::NodeState { pool, node, mode }
        }
        (Method::Put, ["", "api", "v1", "pools", pool, "nodes", node, "weight"]) => {
            known_node(live, pool, node)?;
            Endpoint::NodeWeight { pool, node }
        }
        _ => return Err(Box::new(not_found_or_method(live, segments))),
    };
    Ok(endpoint)
}

/// Refuses a node operation on a pool or node the running config does not have. Checked
/// again under the write lock: a reload may come between the head and the operation.
fn known_node(live: &Live, pool: &str, node: &str) -> Result<(), Refusal> {
    let model = live.current();
    let Some(running) = model.pool(pool) else {
        return Err(Box::new(Response::error(
            404,
            format!("no pool \"{pool}\""),
        )));
    };
    running_node(running, node).map(drop)
}

/// The answer an authorised `/api/...` request gets from its head alone, when it names
/// no resource: 404 or 405 (with `Allow`). `None`: its body, if any, is read next.
pub(crate) fn refusal(request: &Request, control: &Control) -> Option<Response> {
    let decoded = segments_of(&request.path);
    let segments: Vec<&str> = decoded.iter().map(String::as_str).collect();
    endpoint(&control.live, request.method, &segments)
        .err()
        .map(|refusal| *refusal)
}

/// Answers an authorised `/api/...` request.
pub(crate) async fn respond(request: &Request, control: &Control, metrics: &Metrics) -> Response {
    let live = &control.live;
    let decoded = segments_of(&request.path);
    let segments: Vec<&str> = decoded.iter().map(String::as_str).collect();
    // On the config file's text and on everything that edits or applies it, `If-Match`
    // is the ETag of `GET /api/v1/config/toml`.
    let if_match = request.if_match.as_deref();
    let endpoint = match endpoint(live, request.method, &segments) {
        Ok(endpoint) => endpoint,
        Err(refusal) => return *refusal,
    };
    let result = match endpoint {
        Endpoint::Cache(endpoint) => Ok(crate::cache_api::respond(live, endpoint, &request.body)),
        Endpoint::Model => Ok(Response::json(
            200,
            &views::model(&live.current(), live.last_reload().as_ref()),
        )),
        Endpoint::ConfigText => config_text(live, if_match),
        Endpoint::Validate => validate(live, &request.body).await,
        Endpoint::Replace => replace(control, &request.body, if_match).await,
        Endpoint::Reload => reload(control, if_match).await,
        Endpoint::LastReload => Ok(Response::json(
            200,
            &json!({ "generation": live.generation(), "last_reload": live.last_reload().as_ref().map(views::reload) }),
        )),
        Endpoint::Status => Ok(Response::json(200, &views::status(live))),
        Endpoint::Stats => Ok(Response::json(200, &views::stats(live, metrics))),
        Endpoint::Certificates => certificates(live).await,
        Endpoint::NodeState { pool, node, mode } => {
            node_operation(control, (pool, node), NodeEdit::State(mode), if_match).await
        }
        Endpoint::NodeWeight { pool, node } => match weight_body(&request.body) {
            Ok(weight) => {
                let edit = NodeEdit::Weight(weight);
                node_operation(control, (pool, node), edit, if_match).await
            }
            Err(message) => Err(Box::new(Response::error(400, message))),
        },
    };
    result.unwrap_or_else(|refusal| *refusal)
}

fn not_found_or_method(live: &Live, segments: &[&str]) -> Response {
    // A node operation on a pool the running config does not have names no resource.
    if let ["", "api", "v1", "pools", pool, ..] = segments
        && live.current().pool(pool).is_none()
    {
        return Response::error(404, format!("no pool \"{pool}\""));
    }
    let allow = match segments {
        ["", "api", "v1", "config"] => Some("GET, HEAD, PUT"),
        ["", "api", "v1", "reload"] => Some("GET, HEAD, POST"),
        ["", "api", "v1", "status" | "stats"] | ["", "api", "v1", "config", "toml"] => {
            Some("GET, HEAD")
        }
        ["", "api", "v1", "config", "validate"] | ["", "api", "v1", "certificates", "reload"] => {
            Some("POST")
        }
        ["", "api", "v1", "pools", _, "nodes", _, "weight"] => Some("PUT"),
        [
            "",
            "api",
            "v1",
            "pools",
            _,
            "nodes",
            _,
            "drain" | "disable" | "enable",
        ] => Some("POST"),
        _ => None,
    };
    match allow {
        Some(allow) => Response::method_not_allowed(allow),
        None => Response::error(404, "no such resource (see docs/admin-api.md)"),
    }
}

fn config_text(live: &Live, if_match: Option<&str>) -> Result<Response, Refusal> {
    let model = live.current();
    let text = match &model.config.source {
        Some(path) => read_config_for(path, if_match)?,
        None => weir_config::EMBEDDED_DEFAULT.to_owned(),
    };
    if_match_holds(&text, if_match)?;
    let mut response = Response {
        content_type: "application/toml; charset=utf-8",
        ..Response::text(200, &text)
    };
    response.headers.push(("ETag", etag(text.as_bytes())));
    Ok(response)
}

/// The strong entity tag of a config file's bytes: a `PUT /api/v1/config` with this tag in
/// `If-Match` replaces only what it was made from.
fn etag(bytes: &[u8]) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, bytes);
    let hex: String = digest.as_ref()[..16]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("\"{hex}\"")
}

/// `Ok` when the config file's `text` meets `if_match` (or there is none), else the `412`
/// with its current ETag (RFC 9110 §13.1.1: `*` for any file, else one of the listed tags
/// by strong comparison; a weak tag never matches).
fn if_match_holds(text: &str, if_match: Option<&str>) -> Result<(), Refusal> {
    let Some(condition) = if_match else {
        return Ok(());
    };
    let current = etag(text.as_bytes());
    if condition
        .split(',')
        .map(str::trim)
        .any(|tag| tag == "*" || tag == current)
    {
        return Ok(());
    }
    let mut refusal = Response::error(
        412,
        format!(
            "the config file changed since it was read (its ETag is now {current}); \
             GET /api/v1/config/toml again and make the change on what it returns"
        ),
    );
    refusal.headers.push(("ETag", current));
    Err(Box::new(refusal))
}

/// The config file's text, read now (a `500` when it cannot be).
fn read_config(path: &Path) -> Result<String, Refusal> {
    let cannot = |error: &dyn std::fmt::Display| {
        Box::new(Response::error(
            500,
            format!("cannot read {}: {error}", path.display()),
        ))
    };
    // Bounded as a reload's read is: a file grown huge by mistake is refused unread.
    let bytes = weir_config::read_bounded(path).map_err(|error| cannot(&error))?;
    String::from_utf8(bytes).map_err(|error| cannot(&error))
}

/// The config file, read for a request with `if_match` (or without: then as
/// [`read_config`]). Under an `If-Match`, no file is no current representation, which no
/// tag matches, not even `*` (RFC 9110 §13.1.1): 412.
fn read_config_for(path: &Path, if_match: Option<&str>) -> Result<String, Refusal> {
    if if_match.is_some()
        && let Err(error) = std::fs::metadata(path)
        && error.kind() == std::io::ErrorKind::NotFound
    {
        return Err(Box::new(Response::error(
            412,
            format!("{} does not exist: no If-Match holds", path.display()),
        )));
    }
    read_config(path)
}

/// The dry run: the candidate validated like a reload would (files read too), and the diff.
async fn validate(live: &Arc<Live>, body: &[u8]) -> Result<Response, Refusal> {
    let candidate = parse_candidate(live, body, false)?;
    match check(live, candidate).await {
        Ok(diff) => Ok(Response::json(
            200,
            &json!({ "valid": true, "summary": diff.summary(), "diff": views::diff(&diff) }),
        )),
        Err(error) => Err(Box::new(Response::json(422, &views::config_errors(&error)))),
    }
}

/// The candidate in `body`, validated as the content of the running config's file; one
/// that does not parse is recorded as a refused change when `record` (not a dry run).
fn parse_candidate(live: &Live, body: &[u8], record: bool) -> Result<Config, Refusal> {
    let model = live.current();
    let text = std::str::from_utf8(body).map_err(|error| {
        const NOT_TEXT: &str = "the body must be the config file's TOML text, in UTF-8";
        if record {
            let file = match &model.config.source {
                Some(path) => path.display().to_string(),
                None => "<candidate>".to_owned(),
            };
            let line = weir_config::line_at(body, error.valid_up_to());
            let problem = ConfigError::single(&file, Some(line), String::new(), NOT_TEXT.into());
            live.refused(problem);
        }
        Box::new(Response::error(400, NOT_TEXT))
    })?;
    let parsed = match &model.config.source {
        Some(path) => weir_config::parse_file_text(text, path),
        None => weir_config::parse_str(text, "<candidate>"),
    };
    parsed.map_err(|error| refuse(live, error, record))
}

/// A candidate that failed validation: 422 with its errors, recorded as a refused change
/// when `record`.
fn refuse(live: &Live, error: ConfigError, record: bool) -> Refusal {
    let refusal = Box::new(Response::json(422, &views::config_errors(&error)));
    if record {
        live.refused(error);
    }
    refusal
}

/// `PUT /api/v1/config`: the candidate replaces the file, then is applied. With
/// `If-Match` (the ETag of `GET /api/v1/config/toml`), only the file it was made from is
/// replaced: 412 when it changed meanwhile (a node drained through the API, an edit),
/// rather than undo that change.
async fn replace(
    control: &Control,
    body: &[u8],
    if_match: Option<&str>,
) -> Result<Response, Refusal> {
    let _write = control.writes.lock().await;
    let live = &control.live;
    let path = file_of(live)?;
    let read = match if_match {
        Some(_) => {
            let now = read_config_for(&path, if_match)?;
            if_match_holds(&now, if_match)?;
            Some(now)
        }
        None => None,
    };
    let candidate = parse_candidate(live, body, true)?;
    check(live, candidate)
        .await
        .map_err(|error| refuse(live, error, true))?;
    let text = String::from_utf8_lossy(body).into_owned();
    write_and_apply(live, &path, &text, read.as_deref()).await
}

/// `POST /api/v1/reload`: re-read the file and apply it (what `weir reload` calls); with
/// `If-Match`, only the file it names.
async fn reload(control: &Control, if_match: Option<&str>) -> Result<Response, Refusal> {
    let _write = control.writes.lock().await;
    if if_match.is_some() {
        if_match_holds(
            &read_config_for(&file_of(&control.live)?, if_match)?,
            if_match,
        )?;
    }
    let live = Arc::clone(&control.live);
    applied(blocking(move || live.reload_file()).await)
}

async fn certificates(live: &Arc<Live>) -> Result<Response, Refusal> {
    let live = Arc::clone(live);
    match blocking(move || live.reload_certificates()).await {
        Ok(count) => Ok(Response::json(200, &json!({ "reloaded": count }))),
        Err(error) => Err(Box::new(Response::json(422, &views::config_errors(&error)))),
    }
}

/// Drain, disable, enable or weight: edit the node in the file, then apply the file.
async fn node_operation(
    control: &Control,
    (pool, node): (&str, &str),
    edit: NodeEdit,
    if_match: Option<&str>,
) -> Result<Response, Refusal> {
    let _write = control.writes.lock().await;
    let live = &control.live;
    let model = live.current();
    let Some(running) = model.pool(pool) else {
        return Err(Box::new(Response::error(
            404,
            format!("no pool \"{pool}\""),
        )));
    };
    let target = running_node(running, node)?;
    let path = file_of(live)?;
    let text = read_config_for(&path, if_match)?;
    // The edit is written only over this text: the condition holds for what is replaced.
    if_match_holds(&text, if_match)?;
    let on_disk = weir_config::parse_file_text(&text, &path);
    let unchanged = on_disk
        .as_ref()
        .is_ok_and(|config| weir_config::diff::diff(&model.config, config).is_empty());
    if !unchanged {
        return Err(Box::new(Response::error(
            409,
            format!(
                "{} no longer matches the running configuration (generation {}): reload it \
                 (POST /api/v1/reload) or replace it (PUT /api/v1/config) first",
                path.display(),
                model.generation
            ),
        )));
    }
    let edited = edit_node(&text, pool, target, edit).map_err(|error| {
        let status = match error {
            EditError::Syntax(_) => 500,
            // The running model has the node, but the file writes it some other way.
            EditError::NoPool(_) | EditError::NoNode { .. } => 409,
        };
        Box::new(Response::error(status, error.to_string()))
    })?;
    let candidate =
        weir_config::parse_file_text(&edited, &path).map_err(|error| refuse(live, error, true))?;
    check(live, candidate)
        .await
        .map_err(|error| refuse(live, error, true))?;
    write_and_apply(live, &path, &edited, Some(&text)).await
}

/// The running node `node` names: `IP:port` for a node given by address, or the label of a
/// node given by DNS name (`host:port`, `srv:NAME`, as `/api/v1/status` lists it), whose
/// entry's `weight` and `state` apply to every address it resolves to. An address one of
/// those names resolved to is refused with a pointer to the name: the file has no entry
/// of its own for it.
fn running_node<'a>(running: &weir_upstream::Pool, node: &'a str) -> Result<NodeRef<'a>, Refusal> {
    let pool = &running.name;
    if let Ok(address) = node.parse::<SocketAddr>() {
        let Some(index) = running.node_index(address) else {
            return Err(Box::new(Response::error(
                404,
                format!("pool \"{pool}\" has no node {address}"),
            )));
        };
        if let Some(name) = running
            .config
            .nodes
            .get(index)
            .and_then(|n| n.name.as_deref())
        {
            return Err(Box::new(Response::error(
                409,
                format!(
                    "node {address} is an address of the DNS name {name}, whose weight and \
                     state are those of its entry for every address it resolves to: use \
                     /api/v1/pools/{pool}/nodes/{name}/..."
                ),
            )));
        }
        return Ok(NodeRef::Address(address));
    }
    if !node.contains(':') {
        return Err(Box::new(Response::error(
            400,
            format!(
                "\"{node}\" is not a node: IP:port, or host:port or srv:NAME for one given by \
                 DNS name"
            ),
        )));
    }
    let listed = running
        .config
        .names
        .iter()
        .any(|named| same_label(&named.label(), node));
    if !listed {
        return Err(Box::new(Response::error(
            404,
            format!(
                "pool \"{pool}\" has no node {node} (a node is IP:port, or host:port or \
                 srv:NAME for one given by DNS name)"
            ),
        )));
    }
    Ok(NodeRef::Name(node))
}

/// Writes `text` over the config file (atomically: a sibling file renamed over it), then
/// reloads it. A refused reload puts the previous content back. With `read`, the file must
/// still hold what the change was made from: an edit made meanwhile (by an operator's
/// editor, say) is refused with 409 rather than overwritten.
async fn write_and_apply(
    live: &Arc<Live>,
    path: &Path,
    text: &str,
    read: Option<&str>,
) -> Result<Response, Refusal> {
    // What a refused reload puts back. A file that cannot be read (past the size a config
    // may have, say) is not written over: it could not be put back.
    let previous = match weir_config::read_bounded(path) {
        Ok(bytes) => Some(bytes),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(error) => {
            return Err(Box::new(Response::error(
                500,
                format!("cannot read {} to keep it: {error}", path.display()),
            )));
        }
    };
    write_file(path, text.as_bytes(), read.map(str::as_bytes)).map_err(|error| {
        let status = match error {
            WriteError::Changed => 409,
            WriteError::Io(_) => 500,
        };
        Box::new(Response::error(
            status,
            format!("cannot write {}: {error}", path.display()),
        ))
    })?;
    let reloading = Arc::clone(live);
    let result = blocking(move || reloading.reload_file()).await;
    if result.is_err() {
        // What was there before: the previous content, or no file (the candidate goes,
        // unless an edit replaced it meanwhile), so that no later reload or restart reads
        // the refused candidate.
        let restored = match previous {
            Some(previous) => write_file(path, &previous, Some(text.as_bytes())),
            None => match weir_config::read_bounded(path) {
                Ok(now) if now == text.as_bytes() => {
                    std::fs::remove_file(path).map_err(WriteError::Io)
                }
                _ => Ok(()),
            },
        };
        if let Err(error) = restored {
            tracing::error!(file = %path.display(), %error, "cannot restore the config file after a refused change");
        }
    }
    applied(result)
}

fn applied(result: Result<weir_proxy::Applied, ReloadError>) -> Result<Response, Refusal> {
    match result {
        Ok(applied) => Ok(Response::json(
            200,
            &json!({
                "generation": applied.generation,
                "duration_ms": applied.duration.as_secs_f64() * 1000.0,
                "summary": applied.summary(),
                "diff": views::diff(&applied.diff),
            }),
        )),
        Err(ReloadError::Config(error)) => {
            Err(Box::new(Response::json(422, &views::config_errors(&error))))
        }
        Err(error @ ReloadError::NoFile) => Err(Box::new(Response::error(409, error.to_string()))),
        Err(error @ ReloadError::NotRunning) => {
            Err(Box::new(Response::error(503, error.to_string())))
        }
    }
}

fn file_of(live: &Live) -> Result<PathBuf, Refusal> {
    let model = live.current();
    if !views::writable(&model.config) {
        return Err(Box::new(Response::error(
            409,
            "weir runs the embedded default configuration: there is no file to write the \
             change to (start weir with --config FILE)",
        )));
    }
    Ok(model.config.source.clone().unwrap_or_default())
}

/// Why the config file was not written.
#[derive(Debug)]
enum WriteError {
    Io(std::io::Error),
    /// The file no longer holds what the change was made from.
    Changed,
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::Io(error) => error.fmt(f),
            WriteError::Changed => f.write_str(
                "the file changed on disk while the change was being made; nothing was \
                 written (reload it, then try again)",
            ),
        }
    }
}

impl From<std::io::Error> for WriteError {
    fn from(error: std::io::Error) -> WriteError {
        WriteError::Io(error)
    }
}

/// Replaces the config file at `path` with `bytes`, as one rename:
///
/// - through a symbolic link, the file it points to is replaced (the link stays, so a
///   config kept in a checkout and linked from elsewhere keeps being the one edited);
/// - the new file is created with the old one's permissions (never readable by more
///   users, even for a moment) and, where weir may, its owner and group, exclusively (a name planted beforehand is not followed),
///   and flushed to disk before the rename;
/// - with `expected`, the file replaced must be the one that holds those bytes: the two
///   files are exchanged in one step (`renameat2(RENAME_EXCHANGE)`), and exchanged back
///   if what came out is not what the change was made from (an edit saved meanwhile is
///   then in place again, untouched). Where the file system cannot exchange, the file is
///   read again just before a plain rename.
fn write_file(path: &Path, bytes: &[u8], expected: Option<&[u8]>) -> Result<(), WriteError> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};

    let target = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = target.with_file_name(format!(".{name}.weir-{}", std::process::id()));
    let old = std::fs::metadata(&target).ok();
    let mode = old
        .as_ref()
        .map_or(0o600, |m| m.permissions().mode() & 0o7777);
    let create = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&temporary)
    };
    let mut file = match create() {
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            // Left by a write this process did not finish (a crash with the same PID), or
            // planted: removed (a link is removed, not followed), then made anew.
            std::fs::remove_file(&temporary)?;
            create()?
        }
        other => other?,
    };
    // The old file's owner and group where weir may give them (as root; a group it is in),
    // so a deploy user or group keeps its access; best effort, before the mode (a chown
    // clears set-id bits).
    if let Some(old) = &old {
        use std::os::unix::fs::MetadataExt;
        let _ = std::os::unix::fs::fchown(&file, Some(old.uid()), Some(old.gid()));
    }
    // The umask may have narrowed the mode; the old file's is what the new one gets.
    let written = file
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .and_then(|()| file.write_all(bytes))
        .and_then(|()| file.sync_all());
    drop(file);
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(error.into());
    }
    match expected {
        None => std::fs::rename(&temporary, &target)?,
        Some(expected) => replace_if_unchanged(&temporary, &target, expected)?,
    }
    // The rename itself, on disk: best effort (some file systems refuse a directory sync).
    if let Some(directory) = target.parent()
        && let Ok(directory) = std::fs::File::open(directory)
    {
        let _ = directory.sync_all();
    }
    Ok(())
}

/// Puts `temporary` in the place of `target` if `target` holds `expected`; else leaves
/// `target` as it is. Either way `temporary` is gone afterwards.
fn replace_if_unchanged(
    temporary: &Path,
    target: &Path,
    expected: &[u8],
) -> Result<(), WriteError> {
    use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
    let exchange = || {
        renameat2(
            AT_FDCWD,
            temporary,
            AT_FDCWD,
            target,
            RenameFlags::RENAME_EXCHANGE,
        )
    };
    match exchange() {
        Ok(()) => {
            // `temporary` now names what `target` held (read within the bound on config
            // files: one grown past it is not what the change was made from).
            let replaced = weir_config::read_bounded(temporary);
            if replaced.as_deref().ok() == Some(expected) {
                std::fs::remove_file(temporary)?;
                return Ok(());
            }
            let back = exchange();
            let _ = std::fs::remove_file(temporary);
            back.map_err(std::io::Error::from)?;
            Err(WriteError::Changed)
        }
        // A file system without the exchange (or an old kernel): check, then rename.
        Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOSYS) => {
            if weir_config::read_bounded(target).is_ok_and(|now| now == expected) {
                std::fs::rename(temporary, target)?;
                Ok(())
            } else {
                let _ = std::fs::remove_file(temporary);
                Err(WriteError::Changed)
            }
        }
        Err(errno) => {
            let _ = std::fs::remove_file(temporary);
            Err(std::io::Error::from(errno).into())
        }
    }
}

/// Validates `candidate` as a reload would (files read, names resolved), off the serving
/// threads: it waits for a reload in progress, and may wait on the files and the resolver.
async fn check(live: &Arc<Live>, candidate: Config) -> Result<ConfigDiff, ConfigError> {
    let live = Arc::clone(live);
    blocking(move || live.check(&candidate)).await
}

/// Runs blocking work (file reads, model builds) off the serving threads.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => value,
        Err(error) => std::panic::resume_unwind(error.into_panic()),
    }
}

/// A path segment with its `%XX` escapes decoded (a node address is `127.0.0.1%3A80` when
/// a client escapes it); invalid escapes are kept as written.
fn percent_decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let escaped = (bytes[index] == b'%')
            .then(|| bytes.get(index + 1..index + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                index += 3;
            }
            None => {
                out.push(bytes[index]);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The weight in a `{"weight": N}` body; the message names the field that is wrong.
fn weight_body(body: &[u8]) -> Result<u32, String> {
    // Read with every name as written: a map keeps the last of a name given twice, and
    // `{"weight": 1, "weight": 900}` would be 900.
    let fields: crate::cache_api::Fields = serde_json::from_slice(body).map_err(|error| {
        if error.classify() == serde_json::error::Category::Data {
            return "the body must be a JSON object like {\"weight\": 3}".to_owned();
        }
        let near = field_near(body, error.line(), error.column());
        format!(
            "malformed JSON{}: {error}",
            near.map(|field| format!(" in field \"{field}\""))
                .unwrap_or_default()
        )
    })?;
    // The first unknown name in sorted order, as a map would list them.
    let names = fields.0.iter().map(|(name, _)| name);
    if let Some(unknown) = names.filter(|name| *name != "weight").min() {
        return Err(format!("unknown field \"{unknown}\"; expected \"weight\""));
    }
    let weight = match fields.0.as_slice() {
        [] => return Err("missing field \"weight\"".to_owned()),
        [(_, weight)] => weight,
        _ => return Err("field \"weight\" given more than once".to_owned()),
    };
    weight
        .as_u64()
        .filter(|w| (1..=10_000).contains(w))
        .map(|w| w as u32)
        .ok_or_else(|| {
            format!("field \"weight\": {weight} is not a whole number between 1 and 10000")
        })
}

/// The name of the last object key before `line:column` in a JSON text, if any.
fn field_near(body: &[u8], line: usize, column: usize) -> Option<String> {
    let text = String::from_utf8_lossy(body);
    let offset: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum::<usize>()
        + column.saturating_sub(1);
    let before = text.get(..offset.min(text.len()))?;
    let colon = before.rfind(':')?;
    let key_end = before[..colon].trim_end().strip_suffix('"')?;
    let key_start = key_end.rfind('"')?;
    Some(key_end[key_start + 1..].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of its own under the system's temporary one, removed at the end.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let path =
                std::env::temp_dir().join(format!("weir-api-write-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            Scratch(path)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_file_changed_since_it_was_read_is_not_overwritten() {
        let scratch = Scratch::new("changed");
        let file = scratch.0.join("weir.toml");
        std::fs::write(&file, "edited by the operator\n").unwrap();
        let written = write_file(&file, b"the API's change\n", Some(b"as read\n"));
        assert!(matches!(written, Err(WriteError::Changed)), "{written:?}");
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "edited by the operator\n"
        );
        // Nothing is left beside it.
        assert_eq!(std::fs::read_dir(&scratch.0).unwrap().count(), 1);
        write_file(
            &file,
            b"the API's change\n",
            Some(b"edited by the operator\n"),
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "the API's change\n"
        );
    }

    #[test]
    fn the_new_file_keeps_the_old_mode_and_a_planted_name_is_not_followed() {
        use std::os::unix::fs::PermissionsExt;
        let scratch = Scratch::new("planted");
        let file = scratch.0.join("weir.toml");
        std::fs::write(&file, "old\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let victim = scratch.0.join("victim");
        std::fs::write(&victim, "not weir's\n").unwrap();
        let temporary = scratch
            .0
            .join(format!(".weir.toml.weir-{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &temporary).unwrap();
        write_file(&file, b"new\n", None).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "new\n");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "not weir's\n");
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(!temporary.exists());
    }

    #[test]
    fn path_segments_are_percent_decoded() {
        assert_eq!(percent_decode("127.0.0.1%3A80"), "127.0.0.1:80");
        assert_eq!(percent_decode("%5B%3A%3A1%5D%3a80"), "[::1]:80");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }

    #[test]
    fn weight_bodies_name_the_field() {
        assert_eq!(weight_body(br#"{"weight": 3}"#), Ok(3));
        assert_eq!(
            weight_body(br#"{"weight": "heavy"}"#),
            Err("field \"weight\": \"heavy\" is not a whole number between 1 and 10000".into())
        );
        assert_eq!(
            weight_body(br#"{"wieght": 3}"#),
            Err("unknown field \"wieght\"; expected \"weight\"".into())
        );
        assert_eq!(weight_body(b"{}"), Err("missing field \"weight\"".into()));
        let error = weight_body(br#"{"weight": }"#).unwrap_err();
        assert!(
            error.starts_with("malformed JSON in field \"weight\": "),
            "{error}"
        );
        assert!(weight_body(b"[3]").is_err());
        assert_eq!(
            weight_body(b"[3]"),
            Err("the body must be a JSON object like {\"weight\": 3}".into())
        );
        assert_eq!(
            weight_body(br#"{"zeta": 1, "alpha": 2}"#),
            Err("unknown field \"alpha\"; expected \"weight\"".into())
        );
    }
}
