//! Session persistence: a client keeps going to the node it went to before.
//!
//! - **Inserted cookie**: weir sets a cookie whose value is an HMAC token of
//!   the node (keyed by a secret, so a client cannot forge a token for a node
//!   it was never sent to, and the token does not reveal the node's address).
//! - **Client address**, **application cookie**, **application header**: a
//!   bounded table, learned from responses, maps the address or the
//!   application's session value to the node, forgotten after `timeout` idle.
//!
//! A node that is not available breaks persistence cleanly: `preferred`
//! returns `None`, the balancer picks another node, and the response teaches
//! the new node (a new cookie, or a new table entry). Nodes are identified by
//! address, so persistence survives a reload that reorders or adds nodes.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use aws_lc_rs::{constant_time, hmac};
use bytes::Bytes;
use weir_config::{InsertedCookie, PersistenceMode};
use weir_http::{RequestHead, ResponseHead};

use crate::node::NodeState;

/// Table entries looked at to choose one to evict when the table is full.
const EVICTION_SAMPLE: usize = 32;
const SHARDS: usize = 16;

/// The secret that signs inserted cookies. Generate one at start and pass the
/// same one to every generation, so cookies stay valid across reloads.
#[derive(Clone)]
pub struct PersistenceKey(hmac::Key);

/// A pool's persistence, built per configuration generation.
#[derive(Debug)]
pub struct Persistence {
    config: weir_config::Persistence,
    /// Cookie mode: the token of each node, by node index.
    tokens: Vec<String>,
    /// The other modes: what was learned (shared with later generations).
    table: Option<Arc<StickTable>>,
    /// Each node's identity in the table (a hash of its address), by index.
    tags: Vec<u64>,
}

/// A bounded map from a session key to a node, with idle expiry. `max_entries` is split
/// over at most `SHARDS` shards (fewer for a smaller table), so that the shards' bounds
/// add up to it exactly: the first `max_entries % shards` hold one more.
#[derive(Debug)]
pub struct StickTable {
    shards: Box<[Mutex<Shard>]>,
    /// Entries each shard holds at most: this, or one more for the first `larger`.
    per_shard: usize,
    larger: usize,
    timeout: Duration,
    hasher: RandomState,
    epoch: Instant,
}

/// One shard of a [`StickTable`].
#[derive(Debug, Default)]
struct Shard {
    entries: HashMap<u64, Entry>,
    /// Entries added since its expired ones were last swept out: a full shard sweeps again
    /// only after an eighth of its bound came in, since a sweep reads every entry.
    added_since_sweep: usize,
    /// Sweeps so far (what the tests count).
    #[cfg(test)]
    sweeps: usize,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    node: u64,
    /// Nanoseconds after `epoch`.
    expires: u64,
}

/// See [`PersistenceKey::process_secret`].
static PROCESS_SECRET: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();

impl PersistenceKey {
    /// A fresh random key (256 bits from the system's CSPRNG).
    pub fn generate() -> PersistenceKey {
        let mut secret = [0u8; 32];
        // The thread's CSPRNG, seeded from the operating system.
        rand::Rng::fill(&mut rand::rng(), &mut secret);
        PersistenceKey::from_secret(&secret)
    }

    /// The key of this process: every generation of every pool signs with it (unless
    /// configured otherwise), so cookies stay valid across reloads, and across a binary
    /// upgrade, whose new process adopts the old one's ([`PersistenceKey::adopt_process_secret`]).
    pub fn process() -> &'static PersistenceKey {
        static KEY: std::sync::OnceLock<PersistenceKey> = std::sync::OnceLock::new();
        KEY.get_or_init(|| PersistenceKey::from_secret(PersistenceKey::process_secret()))
    }

    /// The secret of [`PersistenceKey::process`]: 256 random bits made on first use, unless
    /// adopted before.
    pub fn process_secret() -> &'static [u8; 32] {
        PROCESS_SECRET.get_or_init(|| {
            let mut secret = [0u8; 32];
            rand::Rng::fill(&mut rand::rng(), &mut secret);
            secret
        })
    }

    /// Takes `secret` as this process's (a running weir handed it over in a binary
    /// upgrade), before any pool signed with a key of its own; false when it has one
    /// already.
    pub fn adopt_process_secret(secret: [u8; 32]) -> bool {
        PROCESS_SECRET.set(secret).is_ok()
    }

    /// A key from configured secret bytes (`persistence.key`).
    pub fn from_secret(secret: &[u8]) -> PersistenceKey {
        PersistenceKey(hmac::Key::new(hmac::HMAC_SHA256, secret))
    }
}

impl std::fmt::Debug for PersistenceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PersistenceKey(..)")
    }
}

impl Persistence {
    /// Builds a pool's persistence. `generated` signs cookies unless the
    /// config names its own key; `previous` (the last generation of the same
    /// pool) hands over its learned table when the settings are unchanged, and its
    /// entries when only the table's bounds (`max_entries`, `timeout`) changed.
    pub fn new(
        config: &weir_config::Persistence,
        pool: &str,
        nodes: &[Arc<NodeState>],
        generated: &PersistenceKey,
        previous: Option<&Persistence>,
        epoch: Instant,
    ) -> Persistence {
        let key = config
            .key
            .as_deref()
            .map_or_else(|| generated.clone(), PersistenceKey::from_secret);
        let tags = nodes.iter().map(|node| node_tag(node)).collect();
        let (tokens, table) = match &config.mode {
            PersistenceMode::Cookie(_) => {
                let tokens = nodes.iter().map(|node| token(&key, pool, node)).collect();
                (tokens, None)
            }
            _ => {
                let old = previous.and_then(|old| Some((old, old.table.as_ref()?)));
                let table = match old {
                    Some((old, table)) if old.config == *config => Arc::clone(table),
                    // The same sessions, keyed the same way: only the bounds changed.
                    Some((old, table)) if old.config.mode == config.mode => {
                        Arc::new(StickTable::carried(table, config, epoch))
                    }
                    _ => Arc::new(StickTable::new(config, epoch)),
                };
                (Vec::new(), Some(table))
            }
        };
        Persistence {
            config: config.clone(),
            tokens,
            table,
            tags,
        }
    }

    /// At `select`: the node this request sticks to, when there is one and
    /// `available(index)` says it may take the request.
    pub fn preferred(
        &self,
        head: &RequestHead,
        client: IpAddr,
        available: &dyn Fn(usize) -> bool,
        now: Instant,
    ) -> Option<usize> {
        let index = match &self.config.mode {
            PersistenceMode::Cookie(cookie) => {
                let value = weir_rules::cookie(head, &cookie.name)?;
                self.node_of_token(value)?
            }
            PersistenceMode::ClientAddress => self.learned(&address_key(client), now)?,
            PersistenceMode::AppCookie(name) => {
                self.learned(weir_rules::cookie(head, name)?, now)?
            }
            PersistenceMode::AppHeader(name) => self.learned(head.header(name)?, now)?,
        };
        available(index).then_some(index)
    }

    /// At `filter_response`, once the request went to `node`: learns what
    /// the response teaches, and returns the `Set-Cookie` value to add to
    /// the response (cookie mode, when the client's cookie names another
    /// node or none). `https` decides `Secure` unless the config does.
    pub fn on_response(
        &self,
        request: &RequestHead,
        response: &ResponseHead,
        node: usize,
        client: IpAddr,
        https: bool,
        now: Instant,
    ) -> Option<Bytes> {
        let tag = *self.tags.get(node)?;
        match &self.config.mode {
            PersistenceMode::Cookie(cookie) => {
                let current = weir_rules::cookie(request, &cookie.name);
                if current.and_then(|value| self.node_of_token(value)) == Some(node) {
                    return None;
                }
                Some(set_cookie(cookie, &self.tokens[node], https))
            }
            PersistenceMode::ClientAddress => {
                self.learn(&address_key(client), tag, now);
                None
            }
            PersistenceMode::AppCookie(name) => {
                let set = response
                    .headers()
                    .filter(|(field, _)| field.eq_ignore_ascii_case(b"set-cookie"))
                    .find_map(|(_, value)| set_cookie_value(value, name));
                if let Some(value) = set.or_else(|| weir_rules::cookie(request, name)) {
                    self.learn(value, tag, now);
                }
                None
            }
            PersistenceMode::AppHeader(name) => {
                if let Some(value) = response.header(name).or_else(|| request.header(name)) {
                    self.learn(value, tag, now);
                }
                None
            }
        }
    }

    /// Session keys remembered now (0 in cookie mode).
    pub fn remembered(&self) -> usize {
        self.table.as_ref().map_or(0, |table| table.len())
    }

    fn node_of_token(&self, value: &[u8]) -> Option<usize> {
        // Compared in constant time: timing must not tell how much of a guess was right.
        self.tokens.iter().position(|token| {
            constant_time::verify_slices_are_equal(token.as_bytes(), value).is_ok()
        })
    }

    fn learned(&self, session: &[u8], now: Instant) -> Option<usize> {
        let tag = self.table.as_ref()?.lookup(session, now)?;
        self.tags.iter().position(|&known| known == tag)
    }

    fn learn(&self, session: &[u8], tag: u64, now: Instant) {
        if let Some(table) = &self.table
            && !session.is_empty()
        {
            table.insert(session, tag, now);
        }
    }
}

impl StickTable {
    fn new(config: &weir_config::Persistence, epoch: Instant) -> StickTable {
        let max = config.max_entries.get() as usize;
        let count = max.clamp(1, SHARDS);
        StickTable {
            shards: (0..count).map(|_| Mutex::new(Shard::default())).collect(),
            per_shard: max / count,
            larger: max % count,
            timeout: config.timeout,
            hasher: RandomState::new(),
            epoch,
        }
    }

    /// A table with `config`'s bounds holding `old`'s live entries: the most recently used
    /// first when they do not all fit, none living longer than the new `timeout` from `now`.
    fn carried(old: &StickTable, config: &weir_config::Persistence, now: Instant) -> StickTable {
        let mut table = StickTable::new(config, old.epoch);
        // The same hasher: an entry is keyed by its session's hash.
        table.hasher = old.hasher.clone();
        let now = old.nanos(now);
        let mut live: Vec<(u64, Entry)> = old
            .shards
            .iter()
            .flat_map(|shard| {
                let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
                shard
                    .entries
                    .iter()
                    .filter(|(_, entry)| entry.expires > now)
                    .map(|(&hash, &entry)| (hash, entry))
                    .collect::<Vec<_>>()
            })
            .collect();
        // An entry's expiry is its last use plus the old timeout: latest first is most
        // recently used first.
        live.sort_unstable_by_key(|(_, entry)| std::cmp::Reverse(entry.expires));
        let latest = now.saturating_add(table.timeout.as_nanos() as u64);
        for (hash, mut entry) in live {
            let index = (hash >> 40) as usize % table.shards.len();
            let bound = table.per_shard + usize::from(index < table.larger);
            let shard = table.shards[index]
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner);
            if shard.entries.len() < bound {
                entry.expires = entry.expires.min(latest);
                shard.entries.insert(hash, entry);
            }
        }
        table
    }

    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
                shard.entries.len()
            })
            .sum()
    }

    /// The node tag for `session`, refreshing its expiry; `None` when unknown or expired.
    fn lookup(&self, session: &[u8], now: Instant) -> Option<u64> {
        let (hash, shard) = self.locate(session);
        let now = self.nanos(now);
        let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = shard.entries.get_mut(&hash)?;
        if entry.expires <= now {
            shard.entries.remove(&hash);
            return None;
        }
        entry.expires = now + self.timeout.as_nanos() as u64;
        Some(entry.node)
    }

    fn insert(&self, session: &[u8], node: u64, now: Instant) {
        let (hash, index) = self.locate_index(session);
        let bound = self.per_shard + usize::from(index < self.larger);
        let now = self.nanos(now);
        let expires = now + self.timeout.as_nanos() as u64;
        let mut shard = self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let shard = &mut *shard;
        if !shard.entries.contains_key(&hash) && shard.entries.len() >= bound {
            if shard.added_since_sweep >= (bound / 8).max(1) {
                shard.entries.retain(|_, entry| entry.expires > now);
                shard.added_since_sweep = 0;
                #[cfg(test)]
                {
                    shard.sweeps += 1;
                }
            }
            while shard.entries.len() >= bound {
                let stalest = shard
                    .entries
                    .iter()
                    .take(EVICTION_SAMPLE)
                    .min_by_key(|&(_, entry)| entry.expires)
                    .map(|(&hash, _)| hash);
                match stalest {
                    Some(hash) => shard.entries.remove(&hash),
                    None => break,
                };
            }
        }
        if shard
            .entries
            .insert(hash, Entry { node, expires })
            .is_none()
        {
            shard.added_since_sweep += 1;
        }
    }

    fn locate(&self, session: &[u8]) -> (u64, &Mutex<Shard>) {
        let (hash, index) = self.locate_index(session);
        (hash, &self.shards[index])
    }

    /// The session's hash and the index of its shard (the hash's bits 40 and up, as
    /// [`StickTable::carried`] also places them).
    fn locate_index(&self, session: &[u8]) -> (u64, usize) {
        let hash = self.hasher.hash_one(session);
        (hash, (hash >> 40) as usize % self.shards.len())
    }

    fn nanos(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_nanos() as u64
    }
}

/// A node's identity: its address, hashed (stable across processes).
fn node_tag(node: &NodeState) -> u64 {
    weir_rules::stable_hash(node.address.to_string().as_bytes(), 0x7065_7273)
}

/// The cookie value that names `node` of `pool`: 128 bits of HMAC-SHA256, in hex.
fn token(key: &PersistenceKey, pool: &str, node: &NodeState) -> String {
    let message = format!("weir persistence\0{pool}\0{}", node.address);
    let tag = hmac::sign(&key.0, message.as_bytes());
    tag.as_ref()[..16]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

fn address_key(client: IpAddr) -> [u8; 16] {
    match weir_config::canonical(client) {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The `Set-Cookie` value for an inserted cookie.
fn set_cookie(cookie: &InsertedCookie, token: &str, https: bool) -> Bytes {
    let mut value = format!("{}={token}; Path={}", cookie.name, cookie.path);
    if let Some(domain) = &cookie.domain {
        value.push_str(&format!("; Domain={domain}"));
    }
    if let Some(max_age) = cookie.max_age {
        value.push_str(&format!("; Max-Age={}", max_age.as_secs()));
    }
    // `SameSite=None` is `Secure` always (browsers drop it otherwise), behind an http
    // virtual server too, where `secure` left unset would otherwise leave it out.
    if cookie.secure.unwrap_or(https) || cookie.same_site == Some("None") {
        value.push_str("; Secure");
    }
    if cookie.http_only {
        value.push_str("; HttpOnly");
    }
    if let Some(same_site) = cookie.same_site {
        value.push_str("; SameSite=");
        value.push_str(same_site);
    }
    Bytes::from(value)
}

/// The value a `Set-Cookie` header gives cookie `name`, if it is that cookie.
fn set_cookie_value<'v>(header: &'v [u8], name: &str) -> Option<&'v [u8]> {
    let pair = header.split(|&b| b == b';').next()?.trim_ascii();
    let eq = pair.iter().position(|&b| b == b'=')?;
    (pair[..eq].trim_ascii() == name.as_bytes()).then(|| pair[eq + 1..].trim_ascii())
}

#[cfg(test)]
mod tests;
