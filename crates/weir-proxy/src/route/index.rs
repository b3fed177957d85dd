//! The route index: a virtual server's routes filed by host and first path segment.

use std::collections::HashMap;

/// The routes of a virtual server filed by what they can match, so that a request tries
/// only the routes of its host (exact, and each wildcard suffix of it) and the routes
/// without a host, and among those only the ones whose prefix names its first path
/// segment or names none: thousands of host routes cost a request what a few do (as the
/// rules' index does, `docs/design/rules.md`). File order decides between candidates.
#[derive(Debug, Default)]
pub(crate) struct RouteIndex {
    /// Routes by their exact host, lower case.
    exact: HashMap<Box<[u8]>, PathIndex>,
    /// Routes by the suffix of their `*.` wildcard host, lower case.
    wildcard: HashMap<Box<[u8]>, PathIndex>,
    /// Routes without a host.
    any_host: PathIndex,
}

/// Routes of one host bucket, by the first path segment their prefix names in full.
#[derive(Debug, Default)]
struct PathIndex {
    /// A prefix `/SEGMENT/...`: only a path whose first segment is SEGMENT can match it.
    by_segment: HashMap<Box<[u8]>, Vec<Filed>>,
    /// No prefix, or one that ends inside its first segment (`/`, `/ap`).
    other: Vec<Filed>,
}

/// A route's place in the file and its path prefix (empty: none).
#[derive(Debug)]
struct Filed {
    position: usize,
    prefix: Box<[u8]>,
}

impl RouteIndex {
    pub(crate) fn new<'a>(routes: impl IntoIterator<Item = &'a weir_config::Route>) -> RouteIndex {
        let mut index = RouteIndex::default();
        for (position, route) in routes.into_iter().enumerate() {
            let bucket = match route.host.as_deref().map(str::to_ascii_lowercase) {
                None => &mut index.any_host,
                Some(host) => match host.strip_prefix("*.") {
                    Some(suffix) => index.wildcard.entry(suffix.as_bytes().into()).or_default(),
                    None => index.exact.entry(host.as_bytes().into()).or_default(),
                },
            };
            let prefix = route.path_prefix.as_deref().unwrap_or("").as_bytes();
            let filed = Filed {
                position,
                prefix: prefix.into(),
            };
            match whole_first_segment(prefix) {
                Some(segment) => bucket
                    .by_segment
                    .entry(segment.into())
                    .or_default()
                    .push(filed),
                None => bucket.other.push(filed),
            }
        }
        index
    }

    /// The first route, in file order, that matches `host` (as rules read it) and `path`
    /// (normalised).
    pub(crate) fn first_match(&self, host: &[u8], path: &[u8]) -> Option<usize> {
        // Host names are at most 253 bytes: lower-cased on the stack.
        let mut stack = [0u8; 256];
        let heap;
        let lower: &[u8] = match stack.get_mut(..host.len()) {
            Some(slot) => {
                slot.copy_from_slice(host);
                slot.make_ascii_lowercase();
                slot
            }
            None => {
                heap = host.to_ascii_lowercase();
                &heap
            }
        };
        let segment = first_segment(path);
        let mut best: Option<usize> = None;
        let mut consider = |bucket: &PathIndex| {
            let segment_routes = segment
                .and_then(|segment| bucket.by_segment.get(segment))
                .map_or(&[][..], Vec::as_slice);
            for list in [segment_routes, &bucket.other] {
                // Each list is in file order: its first match is its best.
                let found = list
                    .iter()
                    .take_while(|filed| best.is_none_or(|best| filed.position < best))
                    .find(|filed| path.starts_with(&filed.prefix))
                    .map(|filed| filed.position);
                if found.is_some() {
                    best = found;
                }
            }
        };
        if let Some(bucket) = self.exact.get(lower) {
            consider(bucket);
        }
        // `*.example.com` matches a host with at least one label before `example.com`.
        if !self.wildcard.is_empty() {
            for (dot, _) in lower.iter().enumerate().filter(|(_, byte)| **byte == b'.') {
                if dot > 0
                    && let Some(bucket) = self.wildcard.get(&lower[dot + 1..])
                {
                    consider(bucket);
                }
            }
        }
        consider(&self.any_host);
        best
    }
}

/// A prefix's first segment when the prefix names all of it (`/app/`, `/app/x`): a path
/// that starts with the prefix has exactly that first segment.
fn whole_first_segment(prefix: &[u8]) -> Option<&[u8]> {
    let rest = prefix.strip_prefix(b"/")?;
    let end = rest.iter().position(|&byte| byte == b'/')?;
    Some(&rest[..end])
}

/// A path's first segment (`/app/x` and `/app`: `app`).
fn first_segment(path: &[u8]) -> Option<&[u8]> {
    let rest = path.strip_prefix(b"/")?;
    let end = rest
        .iter()
        .position(|&byte| byte == b'/')
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(host: Option<&str>, prefix: Option<&str>) -> weir_config::Route {
        weir_config::Route {
            host: host.map(str::to_owned),
            path_prefix: prefix.map(str::to_owned),
            pool: weir_config::PoolId(0),
            content: weir_config::ContentPolicy::default(),
        }
    }

    /// The index finds what a scan of the routes in file order finds: hosts exactly or by
    /// wildcard (a subdomain, not the name itself), without regard to case; prefixes that
    /// name a whole first segment, part of one, or none; the first in file order winning
    /// across buckets.
    #[test]
    fn the_index_finds_the_first_route_in_file_order() {
        let table = [
            (Some("api.example.com"), Some("/v2/")),
            (Some("*.example.com"), Some("/v")),
            (None, Some("/static/")),
            (Some("API.example.com"), None),
            (Some("*.b.example.com"), None),
            (None, Some("/st")),
            (None, None),
        ];
        let routes: Vec<_> = table
            .iter()
            .map(|(host, prefix)| route(*host, *prefix))
            .collect();
        let index = RouteIndex::new(&routes);
        let scan = |host: &[u8], path: &[u8]| {
            routes.iter().position(|route| {
                let host_ok = route.host.as_deref().is_none_or(|want| {
                    let want = want.to_ascii_lowercase();
                    match want.strip_prefix("*.") {
                        Some(suffix) => {
                            let host = host.to_ascii_lowercase();
                            host.len() > suffix.len() + 1
                                && host.ends_with(suffix.as_bytes())
                                && host[host.len() - suffix.len() - 1] == b'.'
                        }
                        None => host.eq_ignore_ascii_case(want.as_bytes()),
                    }
                });
                let prefix = route.path_prefix.as_deref().unwrap_or("");
                host_ok && path.starts_with(prefix.as_bytes())
            })
        };
        let hosts: [&[u8]; 7] = [
            b"api.example.com",
            b"Api.Example.Com",
            b"x.example.com",
            b"example.com",
            b"a.b.example.com",
            b"b.example.com",
            b"other.test",
        ];
        let paths: [&[u8]; 8] = [
            b"/",
            b"/v2/x",
            b"/v2",
            b"/v",
            b"/static/a",
            b"/stat",
            b"/x",
            b"",
        ];
        for host in hosts {
            for path in paths {
                assert_eq!(
                    index.first_match(host, path),
                    scan(host, path),
                    "{} {}",
                    String::from_utf8_lossy(host),
                    String::from_utf8_lossy(path)
                );
            }
        }
        assert_eq!(index.first_match(b"api.example.com", b"/v2/x"), Some(0));
        assert_eq!(index.first_match(b"x.example.com", b"/v2/x"), Some(1));
        assert_eq!(index.first_match(b"example.com", b"/v2/x"), Some(6));
        assert_eq!(index.first_match(b"other.test", b"/static/a"), Some(2));
    }
}
