//! `[virtual_servers.NAME.http]`: which methods, protocol switches and header
//! names a virtual server lets through.

use crate::defaults;
use crate::error::KeyPath;
use crate::model::{HttpPolicy, UnderscoreHeaders};
use crate::schema::HttpPolicyTable;

use super::{Checker, values};

impl Checker {
    pub(super) fn http_policy(
        &mut self,
        path: &KeyPath,
        table: Option<&HttpPolicyTable>,
    ) -> HttpPolicy {
        let Some(table) = table else {
            return HttpPolicy::default();
        };
        let upgrades = match &table.upgrades {
            None => HttpPolicy::default().upgrades,
            Some(names) => self.upgrades(&path.key("upgrades"), names),
        };
        HttpPolicy {
            connect: table.connect.unwrap_or(defaults::ALLOW_CONNECT),
            trace: table.trace.unwrap_or(defaults::ALLOW_TRACE),
            upgrades,
            underscore_headers: self.choice(
                &path.key("underscore_headers"),
                table.underscore_headers.as_deref(),
                defaults::UNDERSCORE_HEADERS,
                &[
                    ("reject", UnderscoreHeaders::Reject),
                    ("drop", UnderscoreHeaders::Drop),
                    ("forward", UnderscoreHeaders::Forward),
                ],
            ),
        }
    }

    /// Upgrade tokens (RFC 9110 §7.8), compared case-insensitively; `h2c` is
    /// refused because weir speaks HTTP/1 to nodes and would pass an h2c
    /// switch through unseen (a known route around a proxy's access rules).
    fn upgrades(&mut self, path: &KeyPath, names: &[String]) -> Vec<String> {
        let mut upgrades: Vec<String> = Vec::new();
        for (index, name) in names.iter().enumerate() {
            let at = path.index(index);
            let lower = name.trim().to_ascii_lowercase();
            // `name` or `name/version`.
            if !lower.split('/').all(values::is_token) || lower.matches('/').count() > 1 {
                self.report(&at, format!("\"{name}\" is not a protocol name"));
            } else if lower == "h2c" || lower.starts_with("h2c/") {
                self.report(
                    &at,
                    "h2c cannot be passed through: weir would no longer see the requests",
                );
            } else if upgrades.contains(&lower) {
                self.report(&at, format!("\"{name}\" is listed twice"));
            } else {
                upgrades.push(lower);
            }
        }
        upgrades
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::model::{HttpPolicy, UnderscoreHeaders};
    use crate::parse_str;

    fn server(vs: &str, pool: &str) -> Result<crate::Config, String> {
        let text = format!(
            "[virtual_servers.web]\nlisten = \"127.0.0.1:8080\"\npool = \"web\"\n{vs}\n\
             [pools.web]\nnodes = [{{ address = \"127.0.0.1:8081\" }}]\n{pool}\n"
        );
        parse_str(&text, "t.toml").map_err(|error| error.to_string())
    }

    #[test]
    fn careful_defaults() {
        let config = server("", "").unwrap();
        let vs = &config.virtual_servers[0];
        assert_eq!(vs.http, HttpPolicy::default());
        assert!(!vs.http.connect && !vs.http.trace);
        assert_eq!(vs.http.upgrades, vec!["websocket".to_owned()]);
        assert_eq!(vs.http.underscore_headers, UnderscoreHeaders::Drop);
        assert_eq!(vs.limits.min_body_rate, 1024);
        assert_eq!(vs.timeouts.body_total, Duration::from_secs(300));
        assert_eq!(vs.timeouts.tunnel_idle, Duration::from_secs(300));
        assert_eq!(vs.timeouts.park_idle, Duration::from_secs(10));
        assert_eq!(vs.timeouts.rest_idle, Duration::from_secs(1));
        let pool = &config.pools[0];
        assert_eq!(pool.connections.max_tunnels, 64);
        assert_eq!(pool.timeouts.write, Duration::from_secs(30));
    }

    #[test]
    fn every_key_is_read() {
        let config = server(
            "[virtual_servers.web.http]\nconnect = true\ntrace = true\n\
             upgrades = [\"WebSocket\", \"foo/2\"]\nunderscore_headers = \"reject\"\n\
             [virtual_servers.web.limits]\nmin_body_rate = 0\n\
             [virtual_servers.web.timeouts]\nbody_total = \"1m\"\ntunnel_idle = \"30s\"\n\
             park_idle = \"0s\"\nrest_idle = \"250ms\"\n",
            "[pools.web.connections]\nmax_tunnels = 0\n[pools.web.timeouts]\nwrite = \"5s\"\n",
        )
        .unwrap();
        let vs = &config.virtual_servers[0];
        assert!(vs.http.connect && vs.http.trace);
        assert_eq!(
            vs.http.upgrades,
            vec!["websocket".to_owned(), "foo/2".to_owned()]
        );
        assert_eq!(vs.http.underscore_headers, UnderscoreHeaders::Reject);
        assert_eq!(vs.limits.min_body_rate, 0);
        assert_eq!(vs.timeouts.body_total, Duration::from_secs(60));
        assert_eq!(vs.timeouts.tunnel_idle, Duration::from_secs(30));
        assert_eq!(vs.timeouts.park_idle, Duration::ZERO, "zero: never parked");
        assert_eq!(vs.timeouts.rest_idle, Duration::from_millis(250));
        assert_eq!(config.pools[0].connections.max_tunnels, 0);
        assert_eq!(config.pools[0].timeouts.write, Duration::from_secs(5));
    }

    #[test]
    fn bad_values_name_file_line_and_key() {
        let error = server(
            "[virtual_servers.web.http]\nupgrades = [\"websocket\", \"h2c\", \"a b\"]\n\
             underscore_headers = \"maybe\"\n[virtual_servers.web.timeouts]\ntunnel_idle = \"0s\"\n",
            "",
        )
        .unwrap_err();
        for expected in [
            "t.toml:5: virtual_servers.web.http.upgrades[1]: h2c cannot be passed through",
            "virtual_servers.web.http.upgrades[2]: \"a b\" is not a protocol name",
            "t.toml:6: virtual_servers.web.http.underscore_headers: invalid value \"maybe\"",
            "t.toml:8: virtual_servers.web.timeouts.tunnel_idle: must be longer than zero",
        ] {
            assert!(error.contains(expected), "{expected}\nnot in\n{error}");
        }
    }
}
