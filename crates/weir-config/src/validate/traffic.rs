//! Traffic rules (issue 14): a rule's match becomes a [`Condition`] tree.
//! Its actions are checked in `traffic_actions.rs`; limits, the request id,
//! the client address, hashing and persistence in `traffic_settings.rs`.

use std::collections::HashMap;

use super::{Checker, values};
use crate::error::KeyPath;
use crate::model::{Condition, FieldCondition, Pattern, PoolId, Rule, Traffic, ValueTest};
use crate::schema::{FieldMatchTable, MatchTable, OneOrMany, RuleTable, VirtualServerTable};

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
            let problems_before = self.problems.len();
            let rule = self.rule(&at, index, table, scope);
            // A rule with errors of its own stands in as "always" and hides nothing.
            let sound = self.problems.len() == problems_before;
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
                self.report_because(
                    &at,
                    &path.index(earlier),
                    format!(
                        "this rule can never be reached: rules[{earlier}] matches every request \
                         and ends evaluation"
                    ),
                );
            } else if sound
                && rule.condition == Condition::Always
                && rule.actions.terminal.is_some()
            {
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
            && matches!(
                table.deny,
                None | Some(crate::schema::DenyValue::Flag(false))
            )
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
        let as_path = |text: &str| values::rule_path(text, false).map(|()| text.to_owned());
        let as_prefix = |text: &str| values::rule_path(text, true).map(|()| text.to_owned());
        if let Some(paths) = &table.path {
            all.push(Condition::Path(self.each(
                &path.key("path"),
                paths,
                as_path,
            )));
        }
        if let Some(prefixes) = &table.path_prefix {
            let prefixes = self.each(&path.key("path_prefix"), prefixes, as_prefix);
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
            if tests.values.is_empty() {
                // No test would be no condition: the rule would match every request.
                self.report(&at, "must list at least one test");
                continue;
            }
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
}
