//! A traffic rule's actions (issue 14): terminal actions, path rewrites,
//! header edits and limit references, with templates parsed and their
//! variables checked.

use regex::bytes::Regex;

use super::traffic::Scope;
use super::values::{MANAGED_REQUEST_HEADERS, MANAGED_RESPONSE_HEADERS};
use super::{Checker, template, values};
use crate::defaults;
use crate::error::KeyPath;
use crate::model::{Actions, HeaderEdits, PathRewrite, Template, Terminal};
use crate::schema::{
    HeaderEditsTable, OneOrMany, RedirectTable, RespondTable, RewritePathTable, RuleTable,
};

/// Which side of the exchange a set of header edits applies to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Request,
    Response,
}

impl Checker {
    fn template(&mut self, path: &KeyPath, text: &str, captures: Option<&Regex>) -> Template {
        if text.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
            self.report(path, "must not contain control characters");
            return Template::default();
        }
        template::parse(text, captures).unwrap_or_else(|message| {
            self.report(path, message);
            Template::default()
        })
    }

    pub(super) fn actions(
        &mut self,
        path: &KeyPath,
        table: &RuleTable,
        scope: &Scope<'_>,
        captures: Option<&Regex>,
    ) -> Actions {
        Actions {
            terminal: self.terminal(path, table, scope, captures),
            rewrite_path: table
                .rewrite_path
                .as_ref()
                .and_then(|rewrite| self.rewrite(&path.key("rewrite_path"), rewrite, captures)),
            request_headers: self.header_edits(
                &path.key("request_headers"),
                table.request_headers.as_ref(),
                Side::Request,
                captures,
            ),
            response_headers: self.header_edits(
                &path.key("response_headers"),
                table.response_headers.as_ref(),
                Side::Response,
                captures,
            ),
            rate_limits: self.limit_names(
                &path.key("rate_limit"),
                table.rate_limit.as_ref(),
                &scope.rate_limits,
                "rate_limits",
            ),
            concurrency_limits: self.limit_names(
                &path.key("concurrency_limit"),
                table.concurrency_limit.as_ref(),
                &scope.concurrency_limits,
                "concurrency_limits",
            ),
        }
    }

    fn terminal(
        &mut self,
        path: &KeyPath,
        table: &RuleTable,
        scope: &Scope<'_>,
        captures: Option<&Regex>,
    ) -> Option<Terminal> {
        let deny = match table.deny {
            None | Some(crate::schema::DenyValue::Flag(false)) => None,
            Some(crate::schema::DenyValue::Flag(true)) => Some(defaults::DENY_STATUS),
            Some(crate::schema::DenyValue::Status(status)) => {
                Some(self.status(&path.key("deny"), status, 400..=599))
            }
        };
        let given = [
            table.pool.is_some(),
            table.redirect.is_some(),
            table.respond.is_some(),
            deny.is_some(),
        ];
        if given.iter().filter(|&&set| set).count() > 1 {
            self.report(
                path,
                "a rule takes at most one of pool, redirect, respond and deny: each ends evaluation",
            );
            return None;
        }
        if table.pool.is_some() {
            let pool = self.pool_reference(&path.key("pool"), table.pool.as_deref(), scope.pools);
            return pool.map(Terminal::Pool);
        }
        if let Some(redirect) = &table.redirect {
            return self.redirect(&path.key("redirect"), redirect, captures);
        }
        if let Some(respond) = &table.respond {
            return Some(self.respond(&path.key("respond"), respond, captures));
        }
        deny.map(|status| Terminal::Deny { status })
    }

    fn redirect(
        &mut self,
        path: &KeyPath,
        table: &RedirectTable,
        captures: Option<&Regex>,
    ) -> Option<Terminal> {
        let status = match table.status {
            None => defaults::REDIRECT_STATUS,
            Some(code @ (301 | 302 | 303 | 307 | 308)) => code as u16,
            Some(code) => {
                self.report(
                    &path.key("status"),
                    format!("{code} is not a redirect status; use 301, 302, 303, 307 or 308"),
                );
                defaults::REDIRECT_STATUS
            }
        };
        let Some(location) = &table.location else {
            self.report(
                &path.key("location"),
                "missing required key: where to send the client",
            );
            return None;
        };
        if location.trim().is_empty() {
            self.report(&path.key("location"), "must not be empty");
        }
        let location = self.template(&path.key("location"), location, captures);
        Some(Terminal::Redirect { status, location })
    }

    fn respond(
        &mut self,
        path: &KeyPath,
        table: &RespondTable,
        captures: Option<&Regex>,
    ) -> Terminal {
        let status = table.status.map_or(defaults::RESPOND_STATUS, |code| {
            self.status(&path.key("status"), code, 200..=599)
        });
        let mut headers = Vec::new();
        if let Some(named) = &table.headers {
            for (name, value) in &named.0 {
                let at = path.key("headers").key(name);
                if self.header_name(&at, name, MANAGED_RESPONSE_HEADERS)
                    && self.named_once(&at, name, headers.iter().map(|(n, _)| n))
                {
                    headers.push((name.clone(), self.template(&at, value, captures)));
                }
            }
        }
        let body = match &table.body {
            Some(body) if !body.is_empty() && matches!(status, 204 | 205 | 304) => {
                self.report(
                    &path.key("body"),
                    format!("a {status} answer carries no content (RFC 9110 §15); leave out body"),
                );
                Template::default()
            }
            Some(body) => template::parse(body, captures).unwrap_or_else(|message| {
                self.report(&path.key("body"), message);
                Template::default()
            }),
            None => Template::default(),
        };
        Terminal::Respond {
            status,
            headers,
            body,
        }
    }

    pub(super) fn status(
        &mut self,
        path: &KeyPath,
        code: i64,
        range: std::ops::RangeInclusive<u16>,
    ) -> u16 {
        match u16::try_from(code) {
            Ok(code) if range.contains(&code) => code,
            _ => {
                self.report(
                    path,
                    format!("must be a status from {} to {}", range.start(), range.end()),
                );
                *range.start()
            }
        }
    }

    fn rewrite(
        &mut self,
        path: &KeyPath,
        table: &RewritePathTable,
        captures: Option<&Regex>,
    ) -> Option<PathRewrite> {
        let with = |checker: &mut Checker, regex: Option<&Regex>| -> Option<Template> {
            let Some(text) = &table.with else {
                checker.report(&path.key("with"), "missing required key: the replacement");
                return None;
            };
            if !text.starts_with('/') && !text.starts_with("${") {
                checker.report(
                    &path.key("with"),
                    "the replacement path must start with \"/\"",
                );
            } else if text.contains(['?', '#'])
                || text.contains("${uri}")
                || text.contains("${query}")
            {
                checker.report(
                    &path.key("with"),
                    "a rewrite changes the path only; the query is kept as received \
                     (use ${path}, not ${uri} or ${query})",
                );
            }
            Some(checker.template(&path.key("with"), text, regex))
        };
        match (&table.strip_prefix, &table.replace_prefix, &table.regex) {
            (Some(prefix), None, None) => {
                if table.with.is_some() {
                    self.report(&path.key("with"), "strip_prefix takes no replacement");
                }
                self.rewrite_prefix(&path.key("strip_prefix"), prefix)
                    .map(PathRewrite::StripPrefix)
            }
            (None, Some(prefix), None) => {
                let prefix = self.rewrite_prefix(&path.key("replace_prefix"), prefix);
                let with = with(self, captures)?;
                prefix.map(|prefix| PathRewrite::ReplacePrefix { prefix, with })
            }
            (None, None, Some(source)) => {
                let pattern = self.regex(&path.key("regex"), source)?;
                let with = with(self, Some(&pattern.0))?;
                Some(PathRewrite::Regex { pattern, with })
            }
            _ => {
                self.report(
                    path,
                    "needs exactly one of strip_prefix, replace_prefix or regex",
                );
                None
            }
        }
    }

    fn rewrite_prefix(&mut self, path: &KeyPath, prefix: &str) -> Option<String> {
        match values::request_path(prefix) {
            Ok(()) => Some(prefix.to_owned()),
            Err(message) => {
                self.report(path, message);
                None
            }
        }
    }

    fn header_edits(
        &mut self,
        path: &KeyPath,
        table: Option<&HeaderEditsTable>,
        side: Side,
        captures: Option<&Regex>,
    ) -> HeaderEdits {
        let Some(table) = table else {
            return HeaderEdits::default();
        };
        // Both sides: the fields that frame the message or the connection. `Via` on
        // responses may be removed or replaced (a gateway need not send it, RFC 9110
        // §7.6.3), though weir's own answers and `response_headers` leave it to weir.
        let managed = match side {
            Side::Request | Side::Response => MANAGED_REQUEST_HEADERS,
        };
        let mut edits = HeaderEdits::default();
        if let Some(remove) = &table.remove {
            let at = path.key("remove");
            for name in self.each(&at, remove, |name| Ok(name.to_owned())) {
                let host = side == Side::Request && name.eq_ignore_ascii_case("host");
                if host {
                    self.report(
                        &at,
                        "Host cannot be removed (HTTP/1.1 requires it); set it instead",
                    );
                } else if self.header_name(&at, &name, managed) {
                    edits.remove.push(name);
                }
            }
        }
        for (key, list) in [("set", &table.set), ("add", &table.add)] {
            let Some(named) = list else { continue };
            for (name, value) in &named.0 {
                let at = path.key(key).key(name);
                let host = side == Side::Request && name.eq_ignore_ascii_case("host");
                if host && key == "add" {
                    self.report(&at, "a request has one Host; use set");
                    continue;
                }
                if !self.header_name(&at, name, managed) {
                    continue;
                }
                if key == "set" && !self.named_once(&at, name, edits.set.iter().map(|(n, _)| n)) {
                    continue;
                }
                let template = self.template(&at, value, captures);
                let target = if key == "set" {
                    &mut edits.set
                } else {
                    &mut edits.add
                };
                target.push((name.clone(), template));
            }
        }
        edits
    }

    /// Whether `name` is not among `earlier` in any case (field names are case-insensitive,
    /// RFC 9110 §5.1: `X-A` and `x-a` would be one field set twice); reports it otherwise.
    pub(super) fn named_once<'a>(
        &mut self,
        path: &KeyPath,
        name: &str,
        mut earlier: impl Iterator<Item = &'a String>,
    ) -> bool {
        match earlier.find(|other| other.eq_ignore_ascii_case(name)) {
            Some(other) => {
                self.report(
                    path,
                    format!("\"{other}\" is set already: field names are the same in any case"),
                );
                false
            }
            None => true,
        }
    }

    /// Whether `name` may be edited; reports why not otherwise.
    fn header_name(&mut self, path: &KeyPath, name: &str, managed: &[&str]) -> bool {
        if !values::is_token(name) {
            self.report(path, format!("\"{name}\" is not a valid header name"));
            false
        } else if managed.contains(&name.to_ascii_lowercase().as_str()) {
            self.report(
                path,
                format!("{name} is managed by weir and cannot be changed"),
            );
            false
        } else {
            true
        }
    }

    fn limit_names(
        &mut self,
        path: &KeyPath,
        names: Option<&OneOrMany<String>>,
        defined: &[String],
        table: &str,
    ) -> Vec<usize> {
        let Some(names) = names else {
            return Vec::new();
        };
        self.each(path, names, |name| {
            defined.iter().position(|known| known == name).ok_or_else(|| {
                if defined.is_empty() {
                    format!("unknown limit \"{name}\"; define it as [virtual_servers.NAME.{table}.{name}]")
                } else {
                    format!("unknown limit \"{name}\"; defined in {table}: {}", defined.join(", "))
                }
            })
        })
    }
}
