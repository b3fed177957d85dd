//! `weir reload`: asks the running weir's admin API to re-read its config file and apply it
//! (`POST /api/v1/reload`), and prints the outcome.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
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
    let config = match args.config.as_deref().map(weir_config::load_file) {
        None => None,
        Some(Ok(config)) => Some(config),
        // The running weir re-reads its own file and refuses it the same way, counted in
        // its metrics; it can only be asked when the address does not come from the file.
        Some(Err(_)) if args.admin.is_some() => None,
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
    let token_file = args.token_file.clone().or_else(|| {
        admin
            .and_then(|a| a.token_file.as_ref())
            .map(|f| f.path.clone())
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
    let (status, body) = post(address, "/api/v1/reload", token.as_deref())?;
    Ok((status == 200, body))
}

/// One `POST` to the admin listener; returns the status and the body.
pub fn post(address: SocketAddr, path: &str, token: Option<&str>) -> anyhow::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5))
        .map_err(|e| anyhow::anyhow!("cannot reach the admin listener at {address}: {e}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {address}\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n"
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
