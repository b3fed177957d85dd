//! The configs the lab starts weir, HAProxy and nginx with. They live in the repo's
//! `bench/lab/` (so a reader sees exactly how each peer is set up) and are compiled into the
//! binary; `@NAME@` placeholders are filled per run.

/// weir in front of the capped origin (`weir lab offload`).
pub const WEIR_OFFLOAD: &str = include_str!("../../../bench/lab/weir-offload.toml");
/// weir's TCP virtual server in front of a connection-capped TCP service (`weir lab l4`).
pub const WEIR_L4: &str = include_str!("../../../bench/lab/weir-l4.toml");
/// HAProxy in front of the capped origin (`weir lab offload --peers haproxy`).
pub const HAPROXY_OFFLOAD: &str = include_str!("../../../bench/lab/haproxy-offload.cfg");
/// nginx in front of the capped origin (`weir lab offload --peers nginx`).
pub const NGINX_OFFLOAD: &str = include_str!("../../../bench/lab/nginx-offload.conf");
/// weir terminating TLS in front of the plain origin (`weir lab tls`).
pub const WEIR_TLS: &str = include_str!("../../../bench/lab/weir-tls.toml");
/// weir for the Zeus table (`weir lab suite`): HTTP and HTTPS listeners.
pub const WEIR_SUITE: &str = include_str!("../../../bench/lab/weir-suite.toml");
/// HAProxy for the Zeus table.
pub const HAPROXY_SUITE: &str = include_str!("../../../bench/lab/haproxy-suite.cfg");
/// nginx as a proxy for the Zeus table.
pub const NGINX_SUITE: &str = include_str!("../../../bench/lab/nginx-suite.conf");
/// nginx as the connection-capped origin (`weir lab offload --origin nginx`).
pub const NGINX_ORIGIN: &str = include_str!("../../../bench/lab/nginx-origin.conf");

/// A placeholder the values did not fill, or a value given for none.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("placeholder @{0}@ has no value")]
    Unfilled(String),
    #[error("no placeholder @{0}@ in the template")]
    Unused(String),
}

/// `template` with every `@NAME@` replaced by its value. Every value must be used and every
/// placeholder filled, so a template and its caller cannot drift apart unnoticed.
pub fn render(template: &str, values: &[(&str, String)]) -> Result<String, TemplateError> {
    let mut text = template.to_owned();
    for (name, value) in values {
        let placeholder = format!("@{name}@");
        if !text.contains(&placeholder) {
            return Err(TemplateError::Unused((*name).to_owned()));
        }
        text = text.replace(&placeholder, value);
    }
    // Comments may mention placeholders in prose; only code lines must be filled.
    for line in text.lines() {
        let code = line.split('#').next().unwrap_or("");
        if let Some(start) = code.find('@') {
            let rest = &code[start + 1..];
            if let Some(end) = rest.find('@') {
                let name = &rest[..end];
                if !name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                    return Err(TemplateError::Unfilled(name.to_owned()));
                }
            }
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(names: &[&'static str]) -> Vec<(&'static str, String)> {
        names
            .iter()
            .enumerate()
            .map(|(index, name)| {
                let value = match *name {
                    "CERT" | "KEY" | "PEM" => format!("/tmp/weir-lab-test/{name}.pem"),
                    "CLIENT_TIMEOUT" | "QUEUE_TIMEOUT" => "60s".to_owned(),
                    "SESSION_TICKETS" => "false".to_owned(),
                    "SESSION_CACHE" | "THREADS" => "1".to_owned(),
                    _ => (20_000 + index).to_string(),
                };
                (*name, value)
            })
            .collect()
    }

    #[test]
    fn every_weir_lab_config_renders_and_validates() {
        let weir_configs = [
            (
                "weir-offload.toml",
                WEIR_OFFLOAD,
                values(&[
                    "PROXY_PORT",
                    "ADMIN_PORT",
                    "ORIGIN_PORT",
                    "THREADS",
                    "CLIENT_LIMIT",
                    "POOL_CAP",
                    "CLIENT_TIMEOUT",
                ]),
            ),
            (
                "weir-l4.toml",
                WEIR_L4,
                values(&[
                    "PROXY_PORT",
                    "ADMIN_PORT",
                    "ORIGIN_PORT",
                    "THREADS",
                    "CLIENT_LIMIT",
                    "POOL_CAP",
                    "QUEUE_TIMEOUT",
                ]),
            ),
            (
                "weir-tls.toml",
                WEIR_TLS,
                values(&[
                    "PROXY_PORT",
                    "ADMIN_PORT",
                    "ORIGIN_PORT",
                    "THREADS",
                    "CERT",
                    "KEY",
                    "SESSION_TICKETS",
                    "SESSION_CACHE",
                ]),
            ),
            (
                "weir-suite.toml",
                WEIR_SUITE,
                values(&[
                    "HTTP_PORT",
                    "HTTPS_PORT",
                    "CACHE_PORT",
                    "ORIGIN_PORT",
                    "L4_PORT",
                    "ECHO_PORT",
                    "THREADS",
                    "CERT",
                    "KEY",
                ]),
            ),
        ];
        for (name, template, values) in weir_configs {
            let text = render(template, &values).unwrap_or_else(|e| panic!("{name}: {e}"));
            if let Err(error) = weir_config::parse_str(&text, name) {
                panic!("{name} does not validate:\n{error}");
            }
        }
    }

    #[test]
    fn every_peer_config_renders() {
        let peer_configs = [
            (
                HAPROXY_SUITE,
                values(&[
                    "HTTP_PORT",
                    "HTTPS_PORT",
                    "CACHE_PORT",
                    "ORIGIN_PORT",
                    "L4_PORT",
                    "ECHO_PORT",
                    "THREADS",
                    "PEM",
                ]),
            ),
            (
                NGINX_SUITE,
                values(&[
                    "HTTP_PORT",
                    "HTTPS_PORT",
                    "CACHE_PORT",
                    "ORIGIN_PORT",
                    "THREADS",
                    "CERT",
                    "KEY",
                    "LOAD_STREAM",
                    "STREAM",
                ]),
            ),
            (NGINX_ORIGIN, values(&["PORT", "WORKER_CONNECTIONS"])),
            (
                HAPROXY_OFFLOAD,
                values(&[
                    "PROXY_PORT",
                    "ORIGIN_PORT",
                    "THREADS",
                    "CLIENT_LIMIT",
                    "POOL_CAP",
                    "CLIENT_TIMEOUT",
                ]),
            ),
            (
                NGINX_OFFLOAD,
                values(&[
                    "PROXY_PORT",
                    "ORIGIN_PORT",
                    "THREADS",
                    "WORKER_CONNECTIONS",
                    "POOL_CAP",
                    "CLIENT_TIMEOUT",
                ]),
            ),
        ];
        for (template, values) in peer_configs {
            let text = render(template, &values).expect("every placeholder filled");
            assert!(!text.contains("@PORT@") && text.contains("127.0.0.1:"));
        }
    }

    #[test]
    fn fills_every_placeholder_and_refuses_gaps() {
        let text = "# @PORT@ is filled in\nlisten = \"127.0.0.1:@PORT@\"\nthreads = @THREADS@\n";
        assert_eq!(
            render(
                text,
                &[("PORT", "8080".to_owned()), ("THREADS", "1".to_owned())]
            ),
            Ok("# 8080 is filled in\nlisten = \"127.0.0.1:8080\"\nthreads = 1\n".to_owned())
        );
        assert_eq!(
            render(text, &[("PORT", "8080".to_owned())]),
            Err(TemplateError::Unfilled("THREADS".to_owned()))
        );
        assert_eq!(
            render(text, &[("NOPE", "1".to_owned())]),
            Err(TemplateError::Unused("NOPE".to_owned()))
        );
        // An e-mail-like `@` in code is not a placeholder.
        assert!(render("a = \"x@y\"\n", &[]).is_ok());
    }
}
