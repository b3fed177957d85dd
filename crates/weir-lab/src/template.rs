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

/// `template` with every `@NAME@` in code replaced by its value. Every value must be used and
/// every placeholder filled, so a template and its caller cannot drift apart unnoticed.
/// Comments (from a `#` to the end of the line) are left as they are: they may name
/// placeholders in prose, and a value of several lines put into a comment would leave all
/// but its first line uncommented.
pub fn render(template: &str, values: &[(&str, String)]) -> Result<String, TemplateError> {
    let mut used = vec![false; values.len()];
    let mut text = String::with_capacity(template.len());
    for line in template.split_inclusive('\n') {
        let (code, comment) = line.find('#').map_or((line, ""), |at| line.split_at(at));
        if let Some(name) =
            placeholders(code).find(|name| !values.iter().any(|(known, _)| known == name))
        {
            return Err(TemplateError::Unfilled(name.to_owned()));
        }
        let mut code = code.to_owned();
        for ((name, value), used) in values.iter().zip(&mut used) {
            let placeholder = format!("@{name}@");
            if code.contains(&placeholder) {
                *used = true;
                code = code.replace(&placeholder, value);
            }
        }
        text.push_str(&code);
        text.push_str(comment);
    }
    if let Some(((name, _), _)) = values.iter().zip(&used).find(|(_, used)| !**used) {
        return Err(TemplateError::Unused((*name).to_owned()));
    }
    Ok(text)
}

/// The `@NAME@` placeholders (upper case and `_`) in `code`, in order.
fn placeholders(code: &str) -> impl Iterator<Item = &str> {
    let mut rest = code;
    std::iter::from_fn(move || {
        while let Some(start) = rest.find('@') {
            let after = &rest[start + 1..];
            let end = after.find('@')?;
            let name = &after[..end];
            if !name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                rest = &after[end + 1..];
                return Some(name);
            }
            rest = after;
        }
        None
    })
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
                    "H2C_PORT",
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
                    "H2C_PORT",
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
                    "H2C_PORT",
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
            let code = text
                .lines()
                .map(|line| line.split('#').next().unwrap_or(""));
            assert!(code.flat_map(placeholders).next().is_none());
            assert!(text.contains("127.0.0.1:"));
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
            Ok("# @PORT@ is filled in\nlisten = \"127.0.0.1:8080\"\nthreads = 1\n".to_owned())
        );
        assert_eq!(
            render(text, &[("PORT", "8080".to_owned())]),
            Err(TemplateError::Unfilled("THREADS".to_owned()))
        );
        assert_eq!(
            render(
                text,
                &[
                    ("PORT", "8080".to_owned()),
                    ("THREADS", "1".to_owned()),
                    ("NOPE", "1".to_owned())
                ]
            ),
            Err(TemplateError::Unused("NOPE".to_owned()))
        );
        // Only a comment names it: not a use.
        assert_eq!(
            render("# @BLOCK@\n", &[("BLOCK", "x".to_owned())]),
            Err(TemplateError::Unused("BLOCK".to_owned()))
        );
        // A value of several lines goes where the code names it, never into a comment.
        assert_eq!(
            render(
                "# the block: @BLOCK@\n@BLOCK@\n",
                &[("BLOCK", "a {\n    b;\n}".to_owned())]
            ),
            Ok("# the block: @BLOCK@\na {\n    b;\n}\n".to_owned())
        );
        // An e-mail-like `@` in code is not a placeholder.
        assert!(render("a = \"x@y\"\n", &[]).is_ok());
    }
}
