//! `weir reload`: asks the running weir's admin API to re-read its config file and apply it
//! (`POST /api/v1/reload`), and prints the outcome.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use crate::cli::ReloadArgs;

pub fn run(args: &ReloadArgs) -> ExitCode {
    match reload(args) {
        Ok((true, body)) => {
            print!("{body}");
            ExitCode::SUCCESS
        }
        Ok((false, body)) => {
            eprint!("{body}");
            ExitCode::from(2)
        }
        Err(error) => {
            eprintln!("weir reload: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Whether the reload was applied, and the API's answer (or why the file was refused
/// here). An error is a failure to ask: no admin address, an unreachable listener.
fn reload(args: &ReloadArgs) -> anyhow::Result<(bool, String)> {
    let mut refused_here = None;
    let config = match args.config.as_deref().map(weir_config::load_file) {
        None => None,
        Some(Ok(config)) => Some(config),
        // The running weir re-reads its own file and refuses it the same way, counted in
        // its metrics; it can only be asked when the address does not come from the file.
        Some(Err(error)) if args.admin.is_some() => {
            refused_here = Some(error);
            None
        }
        Some(Err(error)) => {
            return Ok((
                false,
                format!(
                    "{error}\nweir reload: refused here; the running weir was not asked (its \
                     admin address comes from this file; --admin asks it anyway) and keeps \
                     its configuration\n"
                ),
            ));
        }
    };
    let admin = config.as_ref().and_then(|c| c.admin.as_ref());
    let address: SocketAddr = args.admin.or(admin.map(|a| a.listen)).ok_or_else(|| {
        anyhow::anyhow!("no admin listener: give --config (with an [admin] table) or --admin")
    })?;
    let token_file = args.token_file.clone().or_else(|| match &config {
        Some(_) => admin
            .and_then(|a| a.token_file.as_ref())
            .map(|f| f.path.clone()),
        // A file refused here still names the token the running weir wants.
        None => args.config.as_deref().and_then(weir_config::token_file_of),
    });
    let token = match token_file {
        Some(path) => Some(
            std::fs::read_to_string(&path)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?
                .trim()
                .to_owned(),
        ),
        None => None,
    };
    // The API re-reads the file the running weir was started with: asked with another
    // file, it would apply its own and report success for a file it never read.
    if let Some(path) = &args.config
        && let Some(refusal) = other_file(
            address,
            (token.as_deref(), args.token_file.is_none()),
            (path, args.admin.is_none()),
            refused_here.as_ref(),
        )?
    {
        return Ok((false, refusal));
    }
    let (status, body) = request(address, "POST", "/api/v1/reload", token.as_deref())?;
    // Only weir's own answers are believed: a JSON object with what the admin API puts in
    // it for that status (anything could answer 200 on another port).
    let answer = serde_json::from_str::<serde_json::Value>(&body).ok();
    let says = |key: &str| {
        answer
            .as_ref()
            .is_some_and(|answer| answer.get(key).is_some())
    };
    match status {
        200 if says("generation") => Ok((true, body)),
        // The candidate was refused (it does not validate, or conflicts): the running
        // configuration keeps serving.
        409 | 422 if says("error") => Ok((false, body)),
        // Anything else is a failure to ask, not a refused candidate.
        401 => anyhow::bail!(
            "the admin listener at {address} answered 401 ({}): give the token file it wants \
             with --token-file",
            api_error(&body)
        ),
        // weir's own answer that it cannot reload now (503 while it drains, say).
        _ if says("error") => anyhow::bail!(
            "the admin listener at {address} answered {status}: {}",
            api_error(&body)
        ),
        _ => anyhow::bail!(
            "{address} answered {status} ({}), not as weir's admin API answers a reload; is \
             it weir's admin listener (admin.listen)?",
            api_error(&body).chars().take(200).collect::<String>()
        ),
    }
}

/// Why the weir at `address` would not read `path` on a reload (it runs another file, or
/// the embedded default, or wants a token that `path`, `refused_here`, could not give);
/// `None` when it reads that very file. `token_from_file` and `address_from_file`: whether
/// the token and the address were read from `path` (neither `--token-file` nor `--admin`),
/// which may name an `[admin]` table edited since the running weir read it.
fn other_file(
    address: SocketAddr,
    (token, token_from_file): (Option<&str>, bool),
    (path, address_from_file): (&Path, bool),
    refused_here: Option<&weir_config::ConfigError>,
) -> anyhow::Result<Option<String>> {
    let file = path.display();
    // `admin.listen` moves only with a restart; a new `admin.token_file` counts once a
    // reload has applied it. A file edited in either way names what the running weir does
    // not use yet, and only SIGHUP (or the old address and token) can apply it.
    let (status, body) =
        request(address, "GET", "/api/v1/config", token).map_err(
            |error| match address_from_file {
                true => error.context(format!(
                    "the admin address comes from admin.listen in {file}; if that changed since \
                 the running weir started, it still listens on its old one (admin.listen \
                 moves with a restart): give that address with --admin, or send the process \
                 SIGHUP"
                )),
                false => error,
            },
        )?;
    // (A file refused here that names no token is answered below.)
    if status == 401 && token_from_file && (token.is_some() || refused_here.is_none()) {
        let named = match token {
            Some(_) => format!(
                "if admin.token_file in {file} changed since the running weir last read its \
                 file, it still wants the old token until a reload applies the new one"
            ),
            None => format!(
                "{file} names no admin.token_file; if one was removed since the running weir \
                 last read its file, it still wants that token until a reload applies the \
                 change"
            ),
        };
        anyhow::bail!(
            "the admin listener at {address} answered 401 ({}): {named}: give the old token \
             file with --token-file, or send the process SIGHUP",
            api_error(&body)
        );
    }
    // A file that does not load and names no token that could be read (it does not
    // parse): the 401 would hide why the file is refused.
    if let (401, None, Some(error)) = (status, token, refused_here) {
        return Ok(Some(format!(
            "{error}\nweir reload: refused here; the running weir at {address} wants a bearer \
             token, and this file names none that could be read (give --token-file); it was \
             not asked and keeps its configuration\n"
        )));
    }
    if status != 200 {
        anyhow::bail!(
            "the admin listener at {address} answered {status}: {}",
            body.trim()
        );
    }
    let model: serde_json::Value = serde_json::from_str(&body)
        .map_err(|e| anyhow::anyhow!("the admin listener sent no configuration: {e}"))?;
    let running = model.get("source").and_then(serde_json::Value::as_str);
    let asked = path.display();
    let message = match running {
        Some(running) if same_file(Path::new(running), path) => return Ok(None),
        Some(running) => format!(
            "weir reload: the weir at {address} runs {running}, not {asked}; it was not asked \
             (a reload re-reads the file it was started with) and keeps its configuration. \
             Put {asked} in that file's place, or send it with PUT /api/v1/config\n"
        ),
        None => format!(
            "weir reload: the weir at {address} runs the embedded default configuration, not \
             {asked}; it was not asked and keeps its configuration. Start it with --config \
             {asked} to reload that file\n"
        ),
    };
    Ok(Some(message))
}

/// The `error` of an admin API answer (`{"error": "..."}`), or the body as it came.
fn api_error(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|answer| answer.get("error")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| body.trim().to_owned())
}

/// Whether two paths name one file: the same file once links are followed, or, when
/// either cannot be resolved, the same absolute path.
fn same_file(running: &Path, asked: &Path) -> bool {
    match (running.canonicalize(), asked.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => std::path::absolute(asked).is_ok_and(|asked| asked == running),
    }
}

/// One request without a body to the admin listener; returns the status and the body.
pub fn request(
    address: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> anyhow::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5))
        .map_err(|e| anyhow::anyhow!("cannot reach the admin listener at {address}: {e}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let length = match method {
        "POST" | "PUT" => "Content-Length: 0\r\n",
        _ => "",
    };
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\n{auth}{length}Connection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("the admin listener sent no complete response"))?;
    let status = head
        .get(9..12)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("the admin listener sent a malformed status line"))?;
    Ok((status, body.to_owned()))
}
