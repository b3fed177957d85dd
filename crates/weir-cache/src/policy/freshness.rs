//! Freshness (RFC 9111 §4.2): the lifetime a response is given, its age, and
//! whether a stored response may answer a request as it stands.

use crate::date::{UnixTime, parse_http_date};
use crate::directives::{MaxStale, RequestDirectives, ResponseDirectives};
use crate::policy::CachePolicy;
use crate::view::ResponseView;

/// The times §4.2.3 needs, recorded when a response is stored or refreshed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// When the request that produced the response was sent.
    pub request_time: UnixTime,
    /// When the response was received.
    pub response_time: UnixTime,
    /// Its `Date` (the response time when missing or invalid, §6.6.1 of RFC 9110).
    pub date: UnixTime,
    /// Its `Age` (0 when missing or invalid).
    pub age_value: u64,
}

/// The freshness facts of a stored response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freshness {
    /// The times the response's age is computed from.
    pub timing: Timing,
    /// Freshness lifetime in seconds (§4.2.1).
    pub lifetime: u64,
    /// How long after going stale it may still be served while a refresh runs
    /// (its `stale-while-revalidate`, else the policy's default where allowed).
    pub stale_while_revalidate: u64,
    /// How long after going stale it may be served when the node fails.
    pub stale_if_error: u64,
    /// `no-cache`: validate before every use (§5.2.2.4).
    pub no_cache: bool,
    /// `must-revalidate`, `proxy-revalidate` or `s-maxage`: never stale without validation.
    pub forbids_stale: bool,
}

/// What a stored response can do for a request now (§4.2.4, RFC 5861).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usability {
    /// Fresh for this request: serve it.
    Fresh,
    /// Stale but the client accepts it (`max-stale`): serve it.
    StaleAccepted,
    /// Stale within `stale-while-revalidate`: serve it and refresh in the background.
    StaleWhileRevalidate,
    /// Validate with the node first (stale, `no-cache`, or the client asked).
    Revalidate,
}

impl Timing {
    /// Reads `Date` and `Age` from a response received at `response_time`
    /// for a request sent at `request_time`.
    pub fn new(
        response: &impl ResponseView,
        request_time: UnixTime,
        response_time: UnixTime,
    ) -> Timing {
        let date = response
            .header("date")
            .and_then(parse_http_date)
            .unwrap_or(response_time);
        // A list (`Age: 7200, 0`, or two fields): its first member (RFC 9111 §5.1).
        let age_value = response
            .header("age")
            .and_then(|value| value.split(|&byte| byte == b',').next())
            .map(<[u8]>::trim_ascii)
            .and_then(crate::directives::delta_seconds)
            .unwrap_or(0);
        Timing {
            request_time,
            response_time,
            date,
            age_value,
        }
    }

    /// `current_age` of §4.2.3.
    pub fn current_age(&self, now: UnixTime) -> u64 {
        let apparent_age = self.response_time.since(self.date);
        let response_delay = self.response_time.since(self.request_time);
        let corrected_age_value = self.age_value.saturating_add(response_delay);
        let corrected_initial_age = apparent_age.max(corrected_age_value);
        let resident_time = now.since(self.response_time);
        corrected_initial_age.saturating_add(resident_time)
    }
}

impl Freshness {
    /// The freshness of `response` under `policy`.
    pub fn new(
        policy: &CachePolicy,
        response: &impl ResponseView,
        directives: &ResponseDirectives,
        timing: Timing,
    ) -> Freshness {
        let forbids_stale = directives.forbids_stale();
        // Defaults never loosen an explicit must-revalidate; the node's own
        // RFC 5861 directives are its explicit permission and always apply.
        let default = |value: u64| if forbids_stale { 0 } else { value };
        Freshness {
            timing,
            lifetime: lifetime(policy, response, directives, timing.date),
            stale_while_revalidate: directives
                .stale_while_revalidate
                .unwrap_or(default(policy.stale_while_revalidate)),
            stale_if_error: directives
                .stale_if_error
                .unwrap_or(default(policy.stale_if_error)),
            no_cache: directives.no_cache,
            forbids_stale,
        }
    }

    /// Seconds left before it goes stale (0 once stale).
    pub fn remaining(&self, now: UnixTime) -> u64 {
        self.lifetime.saturating_sub(self.timing.current_age(now))
    }

    /// Seconds past its lifetime (0 while fresh).
    pub fn staleness(&self, now: UnixTime) -> u64 {
        self.timing.current_age(now).saturating_sub(self.lifetime)
    }

    /// Whether it may answer `request` now, or must be validated first.
    pub fn usability(&self, request: &RequestDirectives, now: UnixTime) -> Usability {
        let age = self.timing.current_age(now);
        if self.no_cache || request.no_cache {
            return Usability::Revalidate;
        }
        if request.max_age.is_some_and(|max_age| age > max_age) {
            return Usability::Revalidate;
        }
        let remaining = self.lifetime.saturating_sub(age);
        if request
            .min_fresh
            .is_some_and(|min_fresh| remaining < min_fresh)
        {
            return Usability::Revalidate;
        }
        if age < self.lifetime {
            return Usability::Fresh;
        }
        let staleness = age - self.lifetime;
        if !self.forbids_stale {
            match request.max_stale {
                Some(MaxStale::Any) => return Usability::StaleAccepted,
                Some(MaxStale::Seconds(limit)) if staleness <= limit => {
                    return Usability::StaleAccepted;
                }
                _ => {}
            }
        }
        // "Up to" the window's seconds of staleness (RFC 5861 §3), its last second
        // included, as for `stale-if-error` and a request's `max-stale`.
        if self.stale_while_revalidate > 0 && staleness <= self.stale_while_revalidate {
            return Usability::StaleWhileRevalidate;
        }
        Usability::Revalidate
    }

    /// Whether it may be served because the node failed (RFC 5861 §4): within
    /// its own window, or within the client's `stale-if-error` where stale
    /// responses are allowed at all. Never a `no-cache` response: it is used only after
    /// a validation that succeeded (RFC 9111 §5.2.2.4), fresh or not. Nor, without a
    /// window, one still fresh: its validation was the request's own demand (`no-cache`,
    /// `max-age`, `min-fresh`, RFC 9111 §5.2.1), which the failure leaves unmet, and no
    /// one allowed it to be served on an error.
    pub fn usable_on_error(&self, request: &RequestDirectives, now: UnixTime) -> bool {
        if self.no_cache {
            return false;
        }
        let client = if self.forbids_stale {
            0
        } else {
            request.stale_if_error.unwrap_or(0)
        };
        let window = self.stale_if_error.max(client);
        if window == 0 {
            return false;
        }
        let age = self.timing.current_age(now);
        age < self.lifetime || age - self.lifetime <= window
    }
}

/// §4.2.1: `s-maxage`, else `max-age`, else `Expires` − `Date` (unless the
/// directives came from a targeted field, RFC 9213 §2.1), else a heuristic where
/// configured and allowed (§4.2.2).
fn lifetime(
    policy: &CachePolicy,
    response: &impl ResponseView,
    directives: &ResponseDirectives,
    date: UnixTime,
) -> u64 {
    if let Some(seconds) = directives.s_maxage.or(directives.max_age) {
        return seconds;
    }
    let mut expires = response.header_values("expires");
    if let Some(value) = expires.next().filter(|_| !directives.targeted) {
        // An invalid Expires (such as "0"), or several, means already expired.
        return match (parse_http_date(value), expires.next()) {
            (Some(expires), None) => expires.since(date),
            _ => 0,
        };
    }
    heuristic_lifetime(policy, response, directives, date)
}

/// A fraction of the time since `Last-Modified`, capped; only for statuses
/// that are heuristically cacheable or responses marked `public`.
fn heuristic_lifetime(
    policy: &CachePolicy,
    response: &impl ResponseView,
    directives: &ResponseDirectives,
    date: UnixTime,
) -> u64 {
    if policy.heuristic_percent == 0
        || !(directives.public || super::storable::heuristically_cacheable(response.status()))
    {
        return 0;
    }
    let Some(last_modified) = response.header("last-modified").and_then(parse_http_date) else {
        return 0;
    };
    let since = date.since(last_modified);
    (since.saturating_mul(u64::from(policy.heuristic_percent)) / 100).min(policy.heuristic_max)
}

#[cfg(test)]
mod tests;
