//! Which rules a request needs to try. A rule that can only match certain
//! exact hosts is filed under those hosts; else a rule that can only match
//! paths under a first segment (`/app/...`, from its `path`, `path_prefix`
//! or anchored `path_regex`) is filed under that segment; else a rule that
//! needs one of the path regexes run as a set (no literal start) is filed
//! under that regex; the rest are tried for every request. A request tries its
//! host's rules, its first segment's rules, the rules of the set's regexes that
//! matched (the set runs once, when the first rule filed under a regex is
//! reached) and the rest, merged back into rule order, so 1,000 routes cost a
//! couple of lookups rather than 1,000 comparisons.

use std::collections::HashMap;

use crate::condition::{Cond, HostMatch};

/// Longest host looked up (longer ones find no host rules; they could not match one).
const MAX_HOST: usize = 256;

#[derive(Debug, Default)]
pub(crate) struct RuleIndex {
    by_host: HashMap<Box<[u8]>, Box<[u32]>>,
    by_segment: HashMap<Box<[u8]>, Box<[u32]>>,
    /// By index in the path regex set: the rules that need that regex.
    by_regex: Box<[Box<[u32]>]>,
    /// The first rule filed under a regex.
    first_by_regex: Option<u32>,
    rest: Box<[u32]>,
}

impl RuleIndex {
    pub(crate) fn new<'a>(conditions: impl Iterator<Item = &'a Cond>) -> RuleIndex {
        let mut by_host: HashMap<Box<[u8]>, Vec<u32>> = HashMap::new();
        let mut by_segment: HashMap<Box<[u8]>, Vec<u32>> = HashMap::new();
        let mut by_regex: Vec<Vec<u32>> = Vec::new();
        let mut first_by_regex = None;
        let mut rest = Vec::new();
        for (index, condition) in conditions.enumerate() {
            let index = index as u32;
            if let Some(hosts) = exact_hosts(condition) {
                file(
                    &mut by_host,
                    hosts.iter().map(|h| h.to_ascii_lowercase()),
                    index,
                );
            } else if let Some(segments) = path_segments(condition) {
                file(&mut by_segment, segments.iter().map(|s| s.to_vec()), index);
            } else if let Some(regex) = set_regex(condition) {
                if by_regex.len() <= regex {
                    by_regex.resize_with(regex + 1, Vec::new);
                }
                by_regex[regex].push(index);
                first_by_regex.get_or_insert(index);
            } else {
                rest.push(index);
            }
        }
        let freeze = |map: HashMap<Box<[u8]>, Vec<u32>>| {
            map.into_iter()
                .map(|(key, list)| (key, list.into_boxed_slice()))
                .collect()
        };
        RuleIndex {
            by_host: freeze(by_host),
            by_segment: freeze(by_segment),
            by_regex: by_regex.into_iter().map(Vec::into_boxed_slice).collect(),
            first_by_regex,
            rest: rest.into_boxed_slice(),
        }
    }

    /// The first rule filed under a regex of the set: the set must have run
    /// before it is tried.
    pub(crate) fn first_by_regex(&self) -> Option<usize> {
        self.first_by_regex.map(|index| index as usize)
    }

    /// Appends to `out`, in rule order, the rules filed under the regexes that
    /// matched (`hits`, by index in the set).
    pub(crate) fn by_regex(&self, hits: &[bool], out: &mut Vec<u32>) {
        for (rules, _) in self.by_regex.iter().zip(hits).filter(|(_, hit)| **hit) {
            out.extend_from_slice(rules);
        }
        out.sort_unstable();
    }

    /// The rules to try for a request to `host` (without port) and `path`
    /// (normalised), in rule order.
    pub(crate) fn candidates(&self, host: &[u8], path: &[u8]) -> Merge<'_> {
        let mut lower = [0u8; MAX_HOST];
        let host_rules: &[u32] = match host.len() {
            _ if self.by_host.is_empty() => &[],
            length if length <= MAX_HOST => {
                lower[..length].copy_from_slice(host);
                lower[..length].make_ascii_lowercase();
                self.by_host
                    .get(&lower[..length])
                    .map_or(&[], |rules| rules)
            }
            _ => &[],
        };
        let segment_rules: &[u32] = if self.by_segment.is_empty() {
            &[]
        } else {
            self.by_segment
                .get(first_segment(path))
                .map_or(&[], |rules| rules)
        };
        Merge {
            lists: [host_rules, segment_rules, &self.rest],
        }
    }
}

/// `/app/` of `/app/users/1`; the whole path when it has one segment.
fn first_segment(path: &[u8]) -> &[u8] {
    match path.iter().skip(1).position(|&b| b == b'/') {
        Some(slash) => &path[..slash + 2],
        None => path,
    }
}

fn file(map: &mut HashMap<Box<[u8]>, Vec<u32>>, keys: impl Iterator<Item = Vec<u8>>, index: u32) {
    for key in keys {
        let list = map.entry(key.into_boxed_slice()).or_default();
        if list.last() != Some(&index) {
            list.push(index);
        }
    }
}

/// The hosts a condition requires, when it can only hold for exact hosts:
/// a host condition without wildcards, alone or among an `all`.
fn exact_hosts(condition: &Cond) -> Option<Vec<&[u8]>> {
    match condition {
        Cond::Host(hosts) => exact(hosts),
        Cond::All(all) => all.iter().find_map(|inner| match inner {
            Cond::Host(hosts) => exact(hosts),
            _ => None,
        }),
        _ => None,
    }
}

fn exact(hosts: &[HostMatch]) -> Option<Vec<&[u8]>> {
    hosts.iter().map(HostMatch::exact).collect()
}

/// A prefix's first segment, when it is complete (`/app/` pins the
/// request's first segment; `/ap` does not).
fn whole_segment(prefix: &[u8]) -> Option<&[u8]> {
    let segment = first_segment(prefix);
    (segment.len() > 2 && segment.ends_with(b"/")).then_some(segment)
}

/// The first segments a condition's paths must start with, when every path
/// it can match lies under one of them.
fn path_segments(condition: &Cond) -> Option<Vec<&[u8]>> {
    match condition {
        Cond::All(all) => all.iter().find_map(segments_of),
        other => segments_of(other),
    }
}

fn segments_of(condition: &Cond) -> Option<Vec<&[u8]>> {
    match condition {
        Cond::Path(paths) => paths.iter().map(|p| whole_segment(p)).collect(),
        Cond::PathPrefix(prefixes) => prefixes.iter().map(|p| whole_segment(p)).collect(),
        Cond::PathRegexWithPrefix { prefix, .. } => whole_segment(prefix).map(|s| vec![s]),
        _ => None,
    }
}

/// The regex of the set a condition requires, alone or among an `all`.
fn set_regex(condition: &Cond) -> Option<usize> {
    match condition {
        Cond::PathRegex(index) => Some(*index),
        Cond::All(all) => all.iter().find_map(|inner| match inner {
            Cond::PathRegex(index) => Some(*index),
            _ => None,
        }),
        _ => None,
    }
}

/// Three ascending lists of rule indexes, merged in ascending order.
pub(crate) struct Merge<'a> {
    lists: [&'a [u32]; 3],
}

impl Merge<'_> {
    /// The rule `next` gives, without taking it.
    pub(crate) fn peek(&self) -> Option<usize> {
        (self.lists.iter())
            .filter_map(|list| list.first())
            .min()
            .map(|&first| first as usize)
    }
}

impl Iterator for Merge<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        let (which, &first) = self
            .lists
            .iter()
            .enumerate()
            .filter_map(|(which, list)| list.first().map(|first| (which, first)))
            .min_by_key(|&(_, first)| *first)?;
        self.lists[which] = &self.lists[which][1..];
        Some(first as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_segments() {
        assert_eq!(first_segment(b"/app/users/1"), b"/app/");
        assert_eq!(first_segment(b"/app"), b"/app");
        assert_eq!(first_segment(b"/"), b"/");
        let merged: Vec<usize> = Merge {
            lists: [&[2, 9], &[0, 5], &[1, 3, 10]],
        }
        .collect();
        assert_eq!(merged, vec![0, 1, 2, 3, 5, 9, 10]);
    }
}
