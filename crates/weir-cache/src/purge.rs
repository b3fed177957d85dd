//! Purging: by URL, by prefix, by tag (see [`crate::Cache`]), and bans.
//!
//! A ban is a regular expression over primary keys
//! (`scheme://authority/path?query`), applied to every object stored before
//! it. Bans are checked lazily: a lookup that finds an object tests it
//! against the bans added since the object was last tested, and removes it
//! on a match. [`crate::Cache::maintain`] walks the store in the background
//! doing the same, after which every object has been tested against every
//! current ban; bans are then dropped, since every remaining object is newer
//! than them or has been tested already.
//!
//! The `PURGE` method is allowed from configured client networks only; see
//! [`purge_method`].

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError, RwLock};

use regex::bytes::Regex;
use weir_config::Cidr;

use crate::date::UnixTime;
use crate::object::Object;

/// A purge request that cannot be carried out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PurgeError {
    /// The purge target is not an absolute `http` or `https` URL.
    #[error("not an absolute http or https URL: {0:?}")]
    Url(String),
    /// The ban pattern is not a valid regex.
    #[error("invalid ban pattern: {0}")]
    Pattern(String),
    /// The ban table is full; holds how many bans there are.
    #[error("too many bans at once ({0}); wait for the background check to clear some")]
    TooManyBans(usize),
}

/// What one purge reached, kept a while for the fills whose requests were out when it
/// was made ([`PurgeLog`]).
#[derive(Debug)]
pub(crate) enum Purged {
    /// Every variant of one URL: its primary key.
    Key(Box<[u8]>),
    /// Every object whose primary key starts with this.
    Prefix(Box<[u8]>),
    /// Every object with this tag.
    Tag(Box<[u8]>),
    /// Everything.
    All,
}

impl Purged {
    fn reaches(&self, primary: &[u8], tags: &[Box<[u8]>]) -> bool {
        match self {
            Purged::Key(key) => primary == &key[..],
            Purged::Prefix(prefix) => primary.starts_with(prefix),
            Purged::Tag(tag) => tags.iter().any(|t| t == tag),
            Purged::All => true,
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Purged::Key(bytes) | Purged::Prefix(bytes) | Purged::Tag(bytes) => bytes.len(),
            Purged::All => 0,
        }
    }
}

/// Purges remembered at most ([`PurgeLog`]).
const PURGE_LOG_ENTRIES: usize = 4096;
/// Bytes of purged keys, prefixes and tags remembered at most ([`PurgeLog`]).
const PURGE_LOG_BYTES: usize = 1 << 20;

/// The purges made lately, numbered in the order they were made. A response whose
/// request went to the node before a purge was made may be what the purge was meant to
/// remove (the node's content changed, then the purge was sent, while that request was
/// being answered): it is not stored when the purge reaches its object. The record is
/// bounded (the newest [`PURGE_LOG_ENTRIES`] purges within [`PURGE_LOG_BYTES`]): a response
/// to a request older than what is remembered is not stored.
#[derive(Debug, Default)]
pub(crate) struct PurgeLog {
    /// Purges made so far: the number the next one gets.
    made: AtomicU64,
    kept: Mutex<KeptPurges>,
}

#[derive(Debug, Default)]
struct KeptPurges {
    purges: VecDeque<(u64, Purged)>,
    bytes: usize,
}

impl PurgeLog {
    /// Purges made so far: a mark to ask [`PurgeLog::reaches`] about later.
    pub(crate) fn made(&self) -> u64 {
        self.made.load(Ordering::Acquire)
    }

    /// Records a purge, before it removes what it reaches from the store.
    pub(crate) fn record(&self, purged: Purged) {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        // Numbered under the lock, so that numbers and the record's order agree.
        let number = self.made.load(Ordering::Acquire);
        kept.bytes += purged.bytes();
        kept.purges.push_back((number, purged));
        while kept.purges.len() > PURGE_LOG_ENTRIES || kept.bytes > PURGE_LOG_BYTES {
            let Some((_, forgotten)) = kept.purges.pop_front() else {
                break;
            };
            kept.bytes -= forgotten.bytes();
        }
        self.made.store(number + 1, Ordering::Release);
    }

    /// Whether a purge made from mark `from` up to mark `to` (both [`PurgeLog::made`])
    /// reaches an object of `primary` with `tags`; `true` when some of those purges are
    /// no longer remembered.
    pub(crate) fn reaches(&self, from: u64, to: u64, primary: &[u8], tags: &[Box<[u8]>]) -> bool {
        if to <= from {
            return false;
        }
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let oldest = match kept.purges.front() {
            Some((oldest, _)) if *oldest <= from => *oldest,
            _ => return true,
        };
        // Numbers are consecutive in the record: purge `from` is at `from - oldest`, and
        // only the purges made since are tested, not the whole record.
        let skip = usize::try_from(from - oldest).unwrap_or(usize::MAX);
        kept.purges
            .iter()
            .skip(skip)
            .take_while(|(number, _)| *number < to)
            .any(|(_, purged)| purged.reaches(primary, tags))
    }
}

/// At most this many bans are kept; each lookup may test the new ones.
pub const MAX_BANS: usize = 1024;
/// Longest ban pattern accepted.
const MAX_PATTERN: usize = 4096;

/// The ban list.
#[derive(Debug, Default)]
pub struct Bans {
    list: RwLock<Vec<Ban>>,
    /// Sequence of the newest ban (0: none ever).
    latest: AtomicU64,
    /// Bans up to this sequence have been dropped ([`Bans::expire_through`]).
    expired: AtomicU64,
}

/// One ban.
#[derive(Debug, Clone)]
pub struct Ban {
    pub sequence: u64,
    pub pattern: Regex,
    pub added: UnixTime,
}

/// A summary of one ban, for the admin API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BanInfo {
    /// The ban's number, in the order bans were added.
    pub sequence: u64,
    /// The regex, as given.
    pub pattern: String,
    /// When the ban was added.
    pub added: UnixTime,
}

impl Bans {
    /// The sequence new objects start from: they are newer than every ban.
    pub fn latest(&self) -> u64 {
        self.latest.load(Ordering::Acquire)
    }

    /// Adds a ban; returns its sequence number.
    pub fn add(&self, pattern: &str, now: UnixTime) -> Result<u64, PurgeError> {
        if pattern.len() > MAX_PATTERN {
            return Err(PurgeError::Pattern(format!(
                "longer than {MAX_PATTERN} bytes"
            )));
        }
        let pattern = regex::bytes::RegexBuilder::new(pattern)
            .size_limit(1 << 20)
            .build()
            .map_err(|error| PurgeError::Pattern(error.to_string()))?;
        let mut list = self.list.write().unwrap_or_else(PoisonError::into_inner);
        if list.len() >= MAX_BANS {
            return Err(PurgeError::TooManyBans(list.len()));
        }
        let sequence = self.latest.load(Ordering::Acquire) + 1;
        list.push(Ban {
            sequence,
            pattern,
            added: now,
        });
        self.latest.store(sequence, Ordering::Release);
        Ok(sequence)
    }

    /// Whether a ban added after the object was last tested matches it;
    /// records the test otherwise. Costs one atomic load when there is nothing new.
    pub fn is_banned(&self, object: &Object) -> bool {
        let latest = self.latest();
        let checked = object.ban_checked.load(Ordering::Acquire);
        if checked >= latest {
            return false;
        }
        let list = self.list.read().unwrap_or_else(PoisonError::into_inner);
        let banned = list
            .iter()
            .filter(|ban| ban.sequence > checked)
            .any(|ban| ban.pattern.is_match(object.primary_key()));
        if !banned {
            object.ban_checked.fetch_max(latest, Ordering::AcqRel);
        }
        banned
    }

    /// Whether a ban added after sequence `since` and up to `through` matches
    /// `primary` (a primary key), for an object that was out of the store since then
    /// (a body stored once complete). `None` when some of those bans were dropped
    /// meanwhile, so that no answer can be given.
    pub fn banned_between(&self, primary: &[u8], since: u64, through: u64) -> Option<bool> {
        if through <= since {
            return Some(false);
        }
        let list = self.list.read().unwrap_or_else(PoisonError::into_inner);
        if self.expired.load(Ordering::Acquire) > since {
            return None;
        }
        Some(
            list.iter()
                .filter(|ban| ban.sequence > since && ban.sequence <= through)
                .any(|ban| ban.pattern.is_match(primary)),
        )
    }

    /// Drops bans with a sequence up to `tested`: every stored object has
    /// been tested against them or is newer.
    pub fn expire_through(&self, tested: u64) -> usize {
        let mut list = self.list.write().unwrap_or_else(PoisonError::into_inner);
        let before = list.len();
        list.retain(|ban| ban.sequence > tested);
        self.expired.fetch_max(tested, Ordering::AcqRel);
        before - list.len()
    }

    pub fn list(&self) -> Vec<BanInfo> {
        self.list
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|ban| BanInfo {
                sequence: ban.sequence,
                pattern: ban.pattern.as_str().to_owned(),
                added: ban.added,
            })
            .collect()
    }
}

/// What to do with a request whose method may be `PURGE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PurgeMethod {
    /// Not a `PURGE` request, or `PURGE` handling is off (no networks allowed): forward it.
    NotPurge,
    /// `PURGE` from an address outside the allowed networks: answer 403.
    Forbidden,
    /// Purge the request's URL (every variant) and answer 200, or 404 when nothing was stored.
    Purge,
}

/// Decides a request's fate under the `PURGE` policy `allowed` (client networks).
pub fn purge_method(method: &[u8], client: IpAddr, allowed: &[Cidr]) -> PurgeMethod {
    if method != b"PURGE" || allowed.is_empty() {
        return PurgeMethod::NotPurge;
    }
    if allowed.iter().any(|network| network.contains(client)) {
        PurgeMethod::Purge
    } else {
        PurgeMethod::Forbidden
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_log_tells_which_purges_reach_an_object() {
        let log = PurgeLog::default();
        let tags: Vec<Box<[u8]>> = vec![b"red".as_slice().into()];
        let (primary, other) = (b"http://h/a".as_slice(), b"http://h/b".as_slice());
        let start = log.made();
        assert!(!log.reaches(start, log.made(), primary, &tags));
        log.record(Purged::Key(other.into()));
        log.record(Purged::Tag(b"blue".as_slice().into()));
        log.record(Purged::Prefix(b"http://g/".as_slice().into()));
        let later = log.made();
        assert_eq!(later, start + 3);
        assert!(
            !log.reaches(start, later, primary, &tags),
            "none reaches it"
        );
        log.record(Purged::Tag(b"red".as_slice().into()));
        assert!(log.reaches(start, log.made(), primary, &tags), "by tag");
        assert!(
            !log.reaches(later, log.made(), other, &[]),
            "tagged, b is not"
        );
        assert!(
            log.reaches(start, later, other, &[]),
            "by key, in its range"
        );
        let mark = log.made();
        log.record(Purged::Prefix(b"http://h/".as_slice().into()));
        assert!(log.reaches(mark, log.made(), other, &[]), "by prefix");
        let mark = log.made();
        log.record(Purged::All);
        assert!(log.reaches(mark, log.made(), b"http://z/", &[]), "all");
        // Past what it keeps, it cannot tell: it says a purge may have reached it.
        let mark = log.made();
        for _ in 0..=PURGE_LOG_ENTRIES {
            log.record(Purged::Key(other.into()));
        }
        assert!(log.reaches(mark, log.made(), primary, &tags), "forgotten");
        let recent = log.made();
        log.record(Purged::Key(other.into()));
        assert!(
            !log.reaches(recent, log.made(), primary, &tags),
            "still kept"
        );
        let big = vec![b'x'; PURGE_LOG_BYTES];
        let mark = log.made();
        log.record(Purged::Key(big.into()));
        log.record(Purged::Key(other.into()));
        assert!(
            log.reaches(mark, log.made(), primary, &tags),
            "bounded in bytes"
        );
    }

    #[test]
    fn purge_method_policy() {
        let allowed: Vec<Cidr> = ["127.0.0.0/8", "::1/128", "10.1.0.0/16"]
            .iter()
            .map(|text| text.parse().unwrap())
            .collect();
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        assert_eq!(
            purge_method(b"GET", ip("127.0.0.1"), &allowed),
            PurgeMethod::NotPurge
        );
        assert_eq!(
            purge_method(b"PURGE", ip("127.0.0.1"), &allowed),
            PurgeMethod::Purge
        );
        assert_eq!(
            purge_method(b"PURGE", ip("::1"), &allowed),
            PurgeMethod::Purge
        );
        assert_eq!(
            purge_method(b"PURGE", ip("10.1.200.3"), &allowed),
            PurgeMethod::Purge
        );
        assert_eq!(
            purge_method(b"PURGE", ip("10.2.0.1"), &allowed),
            PurgeMethod::Forbidden
        );
        assert_eq!(
            purge_method(b"PURGE", ip("::ffff:127.0.0.1"), &allowed),
            PurgeMethod::Purge
        );
        assert_eq!(
            purge_method(b"purge", ip("127.0.0.1"), &allowed),
            PurgeMethod::NotPurge
        );
        assert_eq!(
            purge_method(b"PURGE", ip("127.0.0.1"), &[]),
            PurgeMethod::NotPurge
        );
    }

    #[test]
    fn bans_reject_bad_patterns() {
        let bans = Bans::default();
        assert!(matches!(
            bans.add("(", UnixTime(0)),
            Err(PurgeError::Pattern(_))
        ));
        assert_eq!(bans.add("^http://a/", UnixTime(5)), Ok(1));
        assert_eq!(bans.add("\\.css$", UnixTime(6)), Ok(2));
        assert_eq!(bans.list().len(), 2);
        assert_eq!(bans.expire_through(1), 1);
        assert_eq!(bans.list()[0].pattern, "\\.css$");
        assert_eq!(bans.latest(), 2);
    }
}
