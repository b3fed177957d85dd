//! Traffic rules (issue 14): a rule's match becomes a [`Condition`] tree, its
//! actions typed values, its templates parsed with their variables checked.
//! Limits, the request id, the client address, hashing and persistence are
//! in `traffic_settings.rs`.

use std::collections::HashMap;

use regex::bytes::Regex;

use super::{Checker, template, values};
use crate::defaults;
use crate::error::KeyPath;
use crate::model::{
    Actions, Condition, FieldCondition, HeaderEdits, PathRewrite, Pattern, PoolId, Rule, Template,
    Terminal, Traffic, ValueTest,
};
use crate::schema::{
    FieldMatchTable, HeaderEditsTable, MatchTable, OneOrMany, RedirectTable, RespondTable,
    RewritePathTable, RuleTable, VirtualServerTable,
};

/// Fields weir manages itself on requests: they frame the message or the connection.
const MANAGED_REQUEST_HEADERS: &[&str] = &[
    "connection",
    "content-length",
    "transfer-encoding",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
];

/// Fields weir manages itself on responses.
const MANAGED_RESPONSE_HEADERS: &[&str] = &[
    "connection",
    "content-length",
    "transfer-encoding",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "via",
];

/// Which side of the exchange a set of header edits applies to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Request,
    Response,
}

/// Names a rule may refer to.
pub(super) struct Scope<'a> {
    pub(super) pools: &'a HashMap<&'a str, PoolId>,
    pub(super) rate_limits: Vec<String>,
    pub(super) concurrency_limits: Vec<String>,
}

impl Checker {
    /// Everything issue 14 adds to a virtual server.
    pub(super) fn traffic(
        &mut self,
        path: &KeyPath,
        table: &VirtualServerTable,
        pools: &HashMap<&str, PoolId>,
    ) -> Traffic {
        let rate_limits = self.rate_limits(&path.key("rate_limits"), table.rate_limits.as_ref());
        let concurrency_limits = self.concurrency_limits(
            &path.key("concurrency_limits"),
            table.concurrency_limits.as_ref(),
        );
        let scope = Scope {
            pools,
            rate_limits: rate_limits.iter().map(|limit| limit.name.clone()).collect(),
            concurrency_limits: concurrency_limits
                .iter()
                .map(|limit| limit.name.clone())
                .collect(),
        };
        let rules = self.rules(&path.key("rules"), &table.rules, &scope);
        Traffic {
            rules,
            request_id: self.request_id(&path.key("request_id"), table.request_id.as_ref()),
            client_address: self
                .client_address(&path.key("client_address"), table.client_address.as_ref()),
            rate_limits,
            concurrency_limits,
            client_connections: table
                .client_connections
                .as_ref()
                .map(|limit| self.client_connections(&path.key("client_connections"), limit)),
        }
    }

    fn rules(&mut self, path: &KeyPath, tables: &[RuleTable], scope: &Scope<'_>) -> Vec<Rule> {
        let mut rules: Vec<Rule> = Vec::new();
        let mut ends_all: Option<usize> = None;
        for (index, table) in tables.iter().enumerate() {
            let at = path.index(index);
            let rule = self.rule(&at, index, table, scope);
            if let Some(earlier) = rules.iter().position(|other| other.name == rule.name) {
                self.report(
                    &at.key("name"),
                    format!(
                        "duplicate rule name: rules[{earlier}] is also \"{}\"",
                        rule.name
                    ),
                );
            }
            if let Some(earlier) = ends_all {
                self.report(
                    &at,
                    format!(
                        "this rule can never be reached: rules[{earlier}] matches every request \
                         and ends evaluation"
                    ),
                );
            } else if rule.condition == Condition::Always && rule.actions.terminal.is_some() {
                ends_all = Some(index);
            }
            rules.push(rule);
        }
        rules
    }

    fn rule(&mut self, path: &KeyPath, index: usize, table: &RuleTable, scope: &Scope<'_>) -> Rule {
        let name = match &table.name {
            Some(name) => {
                self.name(&path.key("name"), name);
                name.clone()
            }
            None => format!("rules[{index}]"),
        };
        let mut captures = None;
        let condition = match &table.condition {
            None => Condition::Always,
            Some(condition) => self.match_table(&path.key("match"), condition, Some(&mut captures)),
        };
        let regex = captures.as_ref().map(|pattern: &Pattern| &pattern.0);
        let actions = self.actions(path, table, scope, regex);
        let does_nothing = table.pool.is_none()
            && table.redirect.is_none()
            && table.respond.is_none()
            && table.deny.is_none()
            && table.rewrite_path.is_none()
            && table.request_headers.is_none()
            && table.response_headers.is_none()
            && table.rate_limit.is_none()
            && table.concurrency_limit.is_none();
        if does_nothing {
            self.report(
                path,
                "a rule needs an action: pool, redirect, respond, deny, rewrite_path, \
                 request_headers, response_headers, rate_limit or concurrency_limit",
            );
        }
        Rule {
            name,
            condition,
            captures,
            actions,
        }
    }

    /// A match table: every key present must hold. `captures` is `Some` for
    /// the rule's own table, whose `path_regex` provides `${1}`...
    fn match_table(
        &mut self,
        path: &KeyPath,
        table: &MatchTable,
        captures: Option<&mut Option<Pattern>>,
    ) -> Condition {
        let mut all = Vec::new();
        self.target_conditions(path, table, captures, &mut all);
        self.field_conditions(path, table, &mut all);
        self.connection_conditions(path, table, &mut all);
        if let Some(tables) = &table.all {
            let conditions = self.match_list(&path.key("all"), tables);
            all.push(Condition::All(conditions));
        }
        if let Some(tables) = &table.any {
            let conditions = self.match_list(&path.key("any"), tables);
            all.push(Condition::Any(conditions));
        }
        if let Some(inner) = &table.not {
            let inner = self.match_table(&path.key("not"), inner, None);
            all.push(Condition::Not(Box::new(inner)));
        }
        if table.is_empty() {
            self.report(
                path,
                "an empty match; leave `match` out to match every request",
            );
        }
        match all.len() {
            // A key whose value was refused leaves nothing; the config is rejected anyway.
            0 => Condition::Always,
            1 => all.pop().unwrap_or(Condition::Always),
            _ => Condition::All(all),
        }
    }

    fn match_list(&mut self, path: &KeyPath, tables: &[MatchTable]) -> Vec<Condition> {
        if tables.is_empty() {
            self.report(path, "must list at least one match table");
        }
        tables
            .iter()
            .enumerate()
            .map(|(index, table)| self.match_table(&path.index(index), table, None))
            .collect()
    }

    fn target_conditions(
        &mut self,
        path: &KeyPath,
        table: &MatchTable,
        captures: Option<&mut Option<Pattern>>,
        all: &mut Vec<Condition>,
    ) {
        if let Some(hosts) = &table.host {
            let hosts = self.each(&path.key("host"), hosts, values::route_host);
            all.push(Condition::Host(hosts));
        }
        let as_path = |text: &str| values::request_path(text).map(|()| text.to_owned());
        if let Some(paths) = &table.path {
            all.push(Condition::Path(self.each(
                &path.key("path"),
                paths,
                as_path,
            )));
        }
        if let Some(prefixes) = &table.path_prefix {
            let prefixes = self.each(&path.key("path_prefix"), prefixes, as_path);
            all.push(Condition::PathPrefix(prefixes));
        }
        if let Some(source) = &table.path_regex
            && let Some(pattern) = self.regex(&path.key("path_regex"), source)
        {
            if let Some(captures) = captures {
                *captures = Some(pattern.clone());
            }
            all.push(Condition::PathRegex(pattern));
        }
        if let Some(methods) = &table.method {
            let as_method = |text: &str| values::method(text).map(|()| text.to_owned());
            all.push(Condition::Method(self.each(
                &path.key("method"),
                methods,
                as_method,
            )));
        }
    }

    fn field_conditions(&mut self, path: &KeyPath, table: &MatchTable, all: &mut Vec<Condition>) {
        type Make = fn(FieldCondition) -> Condition;
        let kinds: [(&str, &Option<OneOrMany<FieldMatchTable>>, Make); 3] = [
            ("header", &table.header, Condition::Header),
            ("query", &table.query, Condition::Query),
            ("cookie", &table.cookie, Condition::Cookie),
        ];
        for (key, tests, make) in kinds {
            let Some(tests) = tests else { continue };
            let at = path.key(key);
            for (index, test) in tests.values.iter().enumerate() {
                let element = if tests.array {
                    at.index(index)
                } else {
                    at.clone()
                };
                if let Some(condition) = self.field_condition(&element, key == "header", test) {
                    all.push(make(condition));
                }
            }
        }
    }

    fn field_condition(
        &mut self,
        path: &KeyPath,
        header: bool,
        table: &FieldMatchTable,
    ) -> Option<FieldCondition> {
        let name = match table.name.as_deref() {
            None | Some("") => {
                self.report(&path.key("name"), "missing required key: the name to test");
                return None;
            }
            Some(name) if header && !values::is_token(name) => {
                self.report(
                    &path.key("name"),
                    format!("\"{name}\" is not a valid header name"),
                );
                return None;
            }
            Some(name) if header => name.to_ascii_lowercase(),
            Some(name) => name.to_owned(),
        };
        let test = match (table.present, &table.equals, &table.regex) {
            (Some(true), None, None) => ValueTest::Present,
            (Some(false), None, None) => ValueTest::Absent,
            (None, Some(values), None) => ValueTest::Equals(values.values.clone()),
            (None, None, Some(source)) => ValueTest::Regex(self.regex(&path.key("regex"), source)?),
            _ => {
                self.report(path, "needs exactly one of present, equals or regex");
                return None;
            }
        };
        Some(FieldCondition { name, test })
    }

    fn connection_conditions(
        &mut self,
        path: &KeyPath,
        table: &MatchTable,
        all: &mut Vec<Condition>,
    ) {
        if let Some(networks) = &table.client_address {
            let networks = self.each(&path.key("client_address"), networks, values::cidr);
            all.push(Condition::ClientAddress(networks));
        }
        if let Some(names) = &table.sni {
            all.push(Condition::Sni(self.each(
                &path.key("sni"),
                names,
                values::route_host,
            )));
        }
        if let Some(subjects) = &table.client_subject {
            all.push(Condition::ClientSubject(subjects.values.clone()));
        }
        if let Some(source) = &table.client_subject_regex
            && let Some(pattern) = self.regex(&path.key("client_subject_regex"), source)
        {
            all.push(Condition::ClientSubjectRegex(pattern));
        }
    }

    /// Converts each value of a one-or-many key, reporting the bad ones.
    pub(super) fn each<T>(
        &mut self,
        path: &KeyPath,
        list: &OneOrMany<String>,
        convert: impl Fn(&str) -> Result<T, String>,
    ) -> Vec<T> {
        if list.values.is_empty() {
            self.report(path, "must list at least one value");
        }
        let mut converted = Vec::new();
        for (index, text) in list.values.iter().enumerate() {
            let at = if list.array {
                path.index(index)
            } else {
                path.clone()
            };
            match convert(text) {
                Ok(value) => converted.push(value),
                Err(message) => self.report(&at, message),
            }
        }
        converted
    }

    pub(super) fn regex(&mut self, path: &KeyPath, source: &str) -> Option<Pattern> {
        match regex::bytes::RegexBuilder::new(source).build() {
            Ok(regex) => Some(Pattern(regex)),
            Err(error) => {
                // The regex crate's message spans lines (pattern, caret, error); the last says what.
                let text = error.to_string();
                let reason = text.lines().last().unwrap_or_default().trim();
                let reason = reason.strip_prefix("error: ").unwrap_or(reason);
                self.report(path, format!("invalid regex \"{source}\": {reason}"));
                None
            }
        }
    }

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

    fn actions(
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
                if self.header_name(&at, name, MANAGED_RESPONSE_HEADERS) {
                    headers.push((name.clone(), self.template(&at, value, captures)));
                }
            }
        }
        let body = match &table.body {
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
            } else if text.contains(['?', '#']) {
                checker.report(
                    &path.key("with"),
                    "a rewrite changes the path only; the query is kept as received",
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
        let managed = match side {
            Side::Request => MANAGED_REQUEST_HEADERS,
            Side::Response => MANAGED_RESPONSE_HEADERS,
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
