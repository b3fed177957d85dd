//! A virtual server's rules compiled once at load, and their evaluation.
//!
//! Rules are tried in order. Each rule whose condition holds applies its
//! actions: header edits, a path rewrite and limits accumulate, in rule
//! order; a terminal action (pool, redirect, respond, deny) ends evaluation.
//! Conditions see the request as received (path normalised), never the
//! effect of earlier rules.

use bytes::Bytes;
use regex::bytes::{Captures, Regex, RegexSet, RegexSetBuilder};
use weir_config::{HeaderEdits as EditsConfig, PathRewrite, PoolId, Rule, Terminal, Traffic};
use weir_http::RequestHead;

use crate::condition::{Cond, Context};
use crate::decision::{Answer, Decision, HeaderEdits, Outcome};
use crate::facts::Facts;
use crate::index::RuleIndex;
use crate::request;
use crate::template::{Compiled, Sources};

/// Upper bound on the memory of the combined path regex set.
const REGEX_SET_SIZE_LIMIT: usize = 256 << 20;

/// The compiled rules of one virtual server. Immutable; shared by every
/// request of a configuration generation. `Default` is no rules.
#[derive(Debug, Default)]
pub struct RuleSet {
    rules: Box<[CompiledRule]>,
    /// Every path regex of every rule without a literal prefix, matched in one pass.
    regexes: Option<RegexSet>,
    /// Which rules a request needs to try.
    index: RuleIndex,
}

/// The rules could not be compiled (only the combined regex set can fail
/// here: each regex was compiled when the config was validated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildError(pub String);

#[derive(Debug)]
struct CompiledRule {
    name: Box<str>,
    condition: Cond,
    /// The match's own `path_regex`, when an action renders its captures.
    captures: Option<Regex>,
    terminal: Option<Action>,
    rewrite: Option<Rewrite>,
    request_headers: Edits,
    response_headers: Edits,
    rate_limits: Box<[usize]>,
    concurrency_limits: Box<[usize]>,
}

#[derive(Debug)]
enum Action {
    Pool(PoolId),
    Redirect {
        status: u16,
        location: Compiled,
    },
    Respond {
        status: u16,
        headers: Box<[(Bytes, Compiled)]>,
        body: Compiled,
    },
    Deny {
        status: u16,
    },
}

#[derive(Debug)]
enum Rewrite {
    Strip(Bytes),
    Replace { prefix: Bytes, with: Compiled },
    Regex { regex: Regex, with: Compiled },
}

#[derive(Debug, Default)]
struct Edits {
    remove: Box<[Bytes]>,
    set: Box<[(Bytes, Compiled)]>,
    add: Box<[(Bytes, Compiled)]>,
}

impl RuleSet {
    /// Compiles a virtual server's rules.
    pub fn new(traffic: &Traffic) -> Result<RuleSet, BuildError> {
        let mut patterns = Vec::new();
        let rules: Box<[CompiledRule]> = traffic
            .rules
            .iter()
            .map(|rule| CompiledRule::new(rule, &mut patterns))
            .collect();
        let regexes = if patterns.is_empty() {
            None
        } else {
            let set = RegexSetBuilder::new(&patterns)
                .size_limit(REGEX_SET_SIZE_LIMIT)
                .dfa_size_limit(REGEX_SET_SIZE_LIMIT)
                .build()
                .map_err(|error| BuildError(format!("path regexes as a set: {error}")))?;
            Some(set)
        };
        let index = RuleIndex::new(rules.iter().map(|rule| &rule.condition));
        Ok(RuleSet {
            rules,
            regexes,
            index,
        })
    }

    /// Whether there is no rule.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// How many rules there are.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// A rule's name (as configured, or `rules[N]`), for logs and metrics.
    pub fn rule_name(&self, index: usize) -> Option<&str> {
        self.rules.get(index).map(|rule| &*rule.name)
    }

    /// Evaluates the rules for one request into a fresh decision.
    pub fn evaluate(&self, head: &RequestHead, facts: &Facts<'_>) -> Decision {
        let mut decision = Decision::new();
        self.evaluate_into(head, facts, &mut decision);
        decision
    }

    /// Evaluates the rules for one request into `decision`, which is cleared
    /// first and keeps its capacity (keep one per connection).
    pub fn evaluate_into(&self, head: &RequestHead, facts: &Facts<'_>, decision: &mut Decision) {
        decision.clear();
        if self.rules.is_empty() {
            return;
        }
        let mut hits = std::mem::take(&mut decision.scratch.regex_hits);
        let host = request::match_host(head);
        let mut context = Context {
            head,
            facts,
            host: &host,
            path: request::normalized_path(head.path()),
            regexes: self.regexes.as_ref(),
            regex_hits: &mut hits,
            regexes_ran: false,
        };
        // Rules filed under a regex of the set join once the set has run: just
        // before the first of them would be tried.
        let mut by_regex = std::mem::take(&mut decision.scratch.regex_rules);
        by_regex.clear();
        let mut regexes_pending = self.index.first_by_regex();
        let mut next_by_regex = 0;
        let mut candidates = self.index.candidates(context.host, &context.path);
        loop {
            if let Some(first) = regexes_pending
                && candidates.peek().is_none_or(|next| first < next)
            {
                regexes_pending = None;
                context.run_regexes();
                self.index.by_regex(context.regex_hits, &mut by_regex);
            }
            let index = match (candidates.peek(), by_regex.get(next_by_regex)) {
                (next, Some(&filed)) if next.is_none_or(|next| (filed as usize) < next) => {
                    next_by_regex += 1;
                    filed as usize
                }
                (Some(_), _) => match candidates.next() {
                    Some(index) => index,
                    None => break,
                },
                (None, _) => break,
            };
            let rule = &self.rules[index];
            if !rule.condition.matches(&mut context) {
                continue;
            }
            rule.apply(&context, decision);
            if rule.terminal.is_some() {
                decision.rule = Some(index);
                break;
            }
        }
        decision.scratch.regex_hits = hits;
        decision.scratch.regex_rules = by_regex;
    }
}

impl CompiledRule {
    fn new(rule: &Rule, patterns: &mut Vec<String>) -> CompiledRule {
        let actions = &rule.actions;
        let terminal = actions.terminal.as_ref().map(Action::new);
        let rewrite = actions.rewrite_path.as_ref().map(Rewrite::new);
        let request_headers = Edits::new(&actions.request_headers);
        let response_headers = Edits::new(&actions.response_headers);
        let uses_captures = terminal.as_ref().is_some_and(Action::uses_captures)
            || matches!(&rewrite, Some(Rewrite::Replace { with, .. }) if with.uses_captures())
            || request_headers.uses_captures()
            || response_headers.uses_captures();
        CompiledRule {
            name: rule.name.as_str().into(),
            condition: Cond::compile(&rule.condition, patterns),
            captures: rule
                .captures
                .as_ref()
                .filter(|_| uses_captures)
                .map(|pattern| pattern.0.clone()),
            terminal,
            rewrite,
            request_headers,
            response_headers,
            rate_limits: actions.rate_limits.as_slice().into(),
            concurrency_limits: actions.concurrency_limits.as_slice().into(),
        }
    }

    fn apply(&self, context: &Context<'_>, decision: &mut Decision) {
        let captures: Option<Captures<'_>> = self
            .captures
            .as_ref()
            .and_then(|regex| regex.captures(&context.path));
        let sources = Sources {
            head: context.head,
            facts: context.facts,
            captures: captures.as_ref(),
        };
        if let Some(rewrite) = &self.rewrite {
            let current: &[u8] = decision.path.as_deref().unwrap_or(&context.path);
            if let Some(path) = rewrite.apply(current, &sources) {
                decision.path = Some(path);
            }
        }
        self.request_headers
            .apply(&sources, &mut decision.request_headers);
        self.response_headers
            .apply(&sources, &mut decision.response_headers);
        for &limit in self.rate_limits.iter() {
            if !decision.rate_limits.contains(&limit) {
                decision.rate_limits.push(limit);
            }
        }
        for &limit in self.concurrency_limits.iter() {
            if !decision.concurrency_limits.contains(&limit) {
                decision.concurrency_limits.push(limit);
            }
        }
        if let Some(action) = &self.terminal {
            decision.outcome = action.outcome(&sources);
        }
    }
}

impl Action {
    fn new(terminal: &Terminal) -> Action {
        match terminal {
            Terminal::Pool(pool) => Action::Pool(*pool),
            Terminal::Redirect { status, location } => Action::Redirect {
                status: *status,
                location: Compiled::new(location),
            },
            Terminal::Respond {
                status,
                headers,
                body,
            } => Action::Respond {
                status: *status,
                headers: headers
                    .iter()
                    .map(|(name, value)| (name_bytes(name), Compiled::new(value)))
                    .collect(),
                body: Compiled::new(body),
            },
            Terminal::Deny { status } => Action::Deny { status: *status },
        }
    }

    fn uses_captures(&self) -> bool {
        match self {
            Action::Redirect { location, .. } => location.uses_captures(),
            Action::Respond { headers, body, .. } => {
                body.uses_captures() || headers.iter().any(|(_, value)| value.uses_captures())
            }
            Action::Pool(_) | Action::Deny { .. } => false,
        }
    }

    fn outcome(&self, sources: &Sources<'_>) -> Outcome {
        match self {
            Action::Pool(pool) => Outcome::Pool(*pool),
            Action::Redirect { status, location } => Outcome::Answer(Answer {
                status: *status,
                headers: vec![(Bytes::from_static(b"Location"), location.render(sources))],
                body: Bytes::new(),
                written: false,
            }),
            Action::Respond {
                status,
                headers,
                body,
            } => Outcome::Answer(Answer {
                status: *status,
                headers: headers
                    .iter()
                    .map(|(name, value)| (name.clone(), value.render(sources)))
                    .collect(),
                body: body.render(sources),
                written: true,
            }),
            Action::Deny { status } => Outcome::Answer(Answer {
                status: *status,
                headers: Vec::new(),
                body: Bytes::new(),
                written: false,
            }),
        }
    }
}

impl Rewrite {
    fn new(rewrite: &PathRewrite) -> Rewrite {
        match rewrite {
            PathRewrite::StripPrefix(prefix) => Rewrite::Strip(name_bytes(prefix)),
            PathRewrite::ReplacePrefix { prefix, with } => Rewrite::Replace {
                prefix: name_bytes(prefix),
                with: Compiled::new(with),
            },
            PathRewrite::Regex { pattern, with } => Rewrite::Regex {
                regex: pattern.0.clone(),
                with: Compiled::new(with),
            },
        }
    }

    /// The rewritten path, or `None` when this rewrite does not apply to
    /// `path` (which then goes on unchanged).
    fn apply(&self, path: &[u8], sources: &Sources<'_>) -> Option<Bytes> {
        let mut out = Vec::with_capacity(path.len() + 16);
        match self {
            Rewrite::Strip(prefix) => out.extend_from_slice(path.strip_prefix(&prefix[..])?),
            Rewrite::Replace { prefix, with } => {
                let rest = path.strip_prefix(&prefix[..])?;
                with.render_path_into(sources, &mut out);
                out.extend_from_slice(rest);
            }
            Rewrite::Regex { regex, with } => {
                let captures = regex.captures(path)?;
                let own = Sources {
                    captures: Some(&captures),
                    ..*sources
                };
                with.render_path_into(&own, &mut out);
            }
        }
        if out.first() != Some(&b'/') {
            out.insert(0, b'/');
        }
        Some(Bytes::from(out))
    }
}

impl Edits {
    fn new(edits: &EditsConfig) -> Edits {
        let templates = |list: &[(String, weir_config::Template)]| {
            list.iter()
                .map(|(name, value)| (name_bytes(name), Compiled::new(value)))
                .collect()
        };
        Edits {
            remove: edits.remove.iter().map(|name| name_bytes(name)).collect(),
            set: templates(&edits.set),
            add: templates(&edits.add),
        }
    }

    fn uses_captures(&self) -> bool {
        self.set
            .iter()
            .chain(self.add.iter())
            .any(|(_, value)| value.uses_captures())
    }

    /// Applies this rule's edits: remove, then set, then add.
    fn apply(&self, sources: &Sources<'_>, edits: &mut HeaderEdits) {
        for name in self.remove.iter() {
            edits.remove(name);
        }
        for (name, value) in self.set.iter() {
            edits.set(name, value.render(sources));
        }
        for (name, value) in self.add.iter() {
            edits.add(name, value.render(sources));
        }
    }
}

fn name_bytes(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BuildError {}

#[cfg(test)]
mod tests;
