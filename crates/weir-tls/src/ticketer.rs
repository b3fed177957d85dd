//! Session tickets: AES-256-GCM under a random key, rotated on a schedule.
//!
//! A ticket is accepted for two rotation periods from when it was made, as its
//! lifetime hint tells clients. A key seals tickets for one period, so the last
//! ones it sealed must open until two periods after it stopped sealing:
//! [`Rotating`] keeps each retired key that long, then erases it (rustls'
//! `TicketRotator` keeps only the key before the current one, so a ticket made
//! late in a key's period was refused soon after one period). Each ticket carries
//! when it was made ([`Ticketer`]), and one older than two periods is refused whatever
//! key sealed it. The key itself is made here because the aws-lc-rs ticketer
//! rustls ships has a fixed six-hour rotation.
//!
//! Ticket layout: key name (16 random bytes) ‖ nonce (12) ‖ ciphertext ‖ tag (16);
//! the plaintext is the issue time (8 bytes, seconds on this process's clock) ‖
//! the session context (32 bytes, [`in_context`]) ‖ rustls' session state.
//!
//! A binary upgrade hands the keys, and this clock, to the new process (`crate::carry`),
//! so tickets issued before it still resume after it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use rustls::crypto::GetRandomFailed;
use rustls::server::ProducesTickets;
use tokio_rustls::rustls;

use aws_lc_rs::aead::{AES_256_GCM, Aad, NONCE_LEN, Nonce, RandomizedNonceKey};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};

pub(crate) const KEY_NAME_LEN: usize = 16;
pub(crate) const SECRET_LEN: usize = 32;
const TAG_LEN: usize = 16;

/// One ticket key.
struct TicketKey {
    name: [u8; KEY_NAME_LEN],
    /// Kept to hand the key to a successor process ([`Ticketer::export`]).
    secret: [u8; SECRET_LEN],
    key: RandomizedNonceKey,
}

impl std::fmt::Debug for TicketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("TicketKey").finish_non_exhaustive()
    }
}

impl TicketKey {
    fn generate() -> Result<TicketKey, GetRandomFailed> {
        let random = SystemRandom::new();
        let mut name = [0u8; KEY_NAME_LEN];
        let mut secret = [0u8; SECRET_LEN];
        random.fill(&mut name).map_err(|_| GetRandomFailed)?;
        random.fill(&mut secret).map_err(|_| GetRandomFailed)?;
        TicketKey::from_parts(name, secret).ok_or(GetRandomFailed)
    }

    fn from_parts(name: [u8; KEY_NAME_LEN], secret: [u8; SECRET_LEN]) -> Option<TicketKey> {
        let key = RandomizedNonceKey::new(&AES_256_GCM, &secret).ok()?;
        Some(TicketKey { name, secret, key })
    }

    fn record(&self, retired: bool, age: Duration) -> KeyRecord {
        KeyRecord {
            name: self.name,
            secret: self.secret,
            retired,
            age,
        }
    }
}

/// A ticket key as one process hands it to its successor: how long ago it began sealing
/// (the current key) or stopped (a retired one).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct KeyRecord {
    pub name: [u8; KEY_NAME_LEN],
    pub secret: [u8; SECRET_LEN],
    pub retired: bool,
    pub age: Duration,
}

impl std::fmt::Debug for KeyRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("KeyRecord")
            .field("retired", &self.retired)
            .field("age", &self.age)
            .finish_non_exhaustive()
    }
}

impl ProducesTickets for TicketKey {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        // The rotator reports the real lifetime; this one is never asked.
        0
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let mut sealed = plain.to_vec();
        let nonce = self
            .key
            .seal_in_place_append_tag(Aad::from(&self.name), &mut sealed)
            .ok()?;
        let mut ticket = Vec::with_capacity(KEY_NAME_LEN + NONCE_LEN + sealed.len());
        ticket.extend_from_slice(&self.name);
        ticket.extend_from_slice(nonce.as_ref());
        ticket.extend_from_slice(&sealed);
        Some(ticket)
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        if ticket.len() < KEY_NAME_LEN + NONCE_LEN + TAG_LEN {
            return None;
        }
        let (name, rest) = ticket.split_at(KEY_NAME_LEN);
        if name != self.name {
            return None;
        }
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut buffer = sealed.to_vec();
        let plain_len = self
            .key
            .open_in_place(nonce, Aad::from(&self.name), &mut buffer)
            .ok()?
            .len();
        buffer.truncate(plain_len);
        Some(buffer)
    }
}

/// A ticketer whose key changes every `rotation`; a ticket is accepted for two periods.
pub(crate) fn ticketer(rotation: Duration) -> Result<Arc<Ticketer>, rustls::Error> {
    let seconds = u32::try_from(rotation.as_secs().max(1)).unwrap_or(u32::MAX);
    Ok(Arc::new(Ticketer {
        rotator: Rotating::new(Duration::from_secs(u64::from(seconds)), Instant::now())
            .map_err(|_| rustls::Error::FailedToGetRandomBytes)?,
        max_age: 2 * u64::from(seconds),
    }))
}

/// Ticket keys: the current one seals, it and the retired ones still within two periods
/// of their retirement open. A new key is made at the first use one period after the
/// current one was (so after an idle spell, at once).
struct Rotating {
    period: Duration,
    keys: RwLock<Keys>,
}

struct Keys {
    current: TicketKey,
    made: Instant,
    /// Retired keys, oldest first, with when they stopped sealing.
    retired: Vec<(Instant, TicketKey)>,
}

impl Rotating {
    fn new(period: Duration, now: Instant) -> Result<Rotating, GetRandomFailed> {
        Ok(Rotating {
            period,
            keys: RwLock::new(Keys {
                current: TicketKey::generate()?,
                made: now,
                retired: Vec::new(),
            }),
        })
    }

    /// Makes a new key when the current one has sealed for a period, and erases the
    /// retired ones past two periods since they stopped sealing.
    fn rotate(&self, now: Instant) {
        let due = |keys: &Keys| {
            now.saturating_duration_since(keys.made) >= self.period
                || keys.retired.first().is_some_and(|(retired, _)| {
                    now.saturating_duration_since(*retired) >= 2 * self.period
                })
        };
        if !due(&self.keys.read().unwrap_or_else(PoisonError::into_inner)) {
            return;
        }
        let mut keys = self.keys.write().unwrap_or_else(PoisonError::into_inner);
        if now.saturating_duration_since(keys.made) >= self.period {
            // A key that cannot be made leaves the current one sealing a while longer.
            if let Ok(fresh) = TicketKey::generate() {
                let old = std::mem::replace(&mut keys.current, fresh);
                keys.retired.push((now, old));
                keys.made = now;
            }
        }
        let period = self.period;
        keys.retired
            .retain(|(retired, _)| now.saturating_duration_since(*retired) < 2 * period);
    }

    fn encrypt_at(&self, plain: &[u8], now: Instant) -> Option<Vec<u8>> {
        self.rotate(now);
        let keys = self.keys.read().unwrap_or_else(PoisonError::into_inner);
        keys.current.encrypt(plain)
    }

    fn decrypt_at(&self, ticket: &[u8], now: Instant) -> Option<Vec<u8>> {
        self.rotate(now);
        let keys = self.keys.read().unwrap_or_else(PoisonError::into_inner);
        // Each key checks the ticket's key name first: a ticket costs one decryption.
        std::iter::once(&keys.current)
            .chain(keys.retired.iter().rev().map(|(_, key)| key))
            .find_map(|key| key.decrypt(ticket))
    }

    /// Every key that still opens tickets, the current one first.
    fn export_at(&self, now: Instant) -> Vec<KeyRecord> {
        self.rotate(now);
        let keys = self.keys.read().unwrap_or_else(PoisonError::into_inner);
        std::iter::once(
            keys.current
                .record(false, now.saturating_duration_since(keys.made)),
        )
        .chain(
            keys.retired
                .iter()
                .map(|(retired, key)| key.record(true, now.saturating_duration_since(*retired))),
        )
        .collect()
    }

    /// Takes over a predecessor's keys: its current key seals here (from when it began
    /// sealing there) and its retired ones open for what is left of their time. This
    /// process's own key, never used, is dropped. Then the rotation rules apply, with this
    /// process's period.
    fn adopt_at(&self, records: &[KeyRecord], now: Instant) {
        let at = |age: Duration| now.checked_sub(age).unwrap_or(now);
        let mut keys = self.keys.write().unwrap_or_else(PoisonError::into_inner);
        let mut retired: Vec<(Instant, TicketKey)> = records
            .iter()
            .filter(|record| record.retired)
            .filter_map(|record| {
                Some((
                    at(record.age),
                    TicketKey::from_parts(record.name, record.secret)?,
                ))
            })
            .collect();
        if let Some(current) = records.iter().find(|record| !record.retired)
            && let Some(key) = TicketKey::from_parts(current.name, current.secret)
        {
            keys.current = key;
            keys.made = at(current.age);
        }
        retired.sort_by_key(|(retired, _)| *retired);
        keys.retired = retired;
        drop(keys);
        self.rotate(now);
    }
}

impl std::fmt::Debug for Rotating {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rotating")
            .field("period", &self.period)
            .finish_non_exhaustive()
    }
}

impl ProducesTickets for Rotating {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        u32::try_from(2 * self.period.as_secs()).unwrap_or(u32::MAX)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.encrypt_at(plain, Instant::now())
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        self.decrypt_at(ticket, Instant::now())
    }
}

/// Tickets stamped with when they were made, refused once older than `max_age` seconds.
pub(crate) struct Ticketer {
    rotator: Rotating,
    max_age: u64,
}

impl Ticketer {
    /// The keys that still open tickets, for a successor process.
    pub(crate) fn export(&self) -> Vec<KeyRecord> {
        self.rotator.export_at(Instant::now())
    }

    /// Takes over a predecessor's keys ([`Rotating::adopt_at`]).
    pub(crate) fn adopt(&self, records: &[KeyRecord]) {
        self.rotator.adopt_at(records, Instant::now());
    }
}

impl std::fmt::Debug for Ticketer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticketer")
            .field("max_age", &self.max_age)
            .finish_non_exhaustive()
    }
}

/// Seconds on a monotonic clock of this process (the wall clock may jump), from a large
/// base so that any past second has a value, continued from the predecessor's after a
/// binary upgrade ([`continue_clock`]).
pub(crate) fn now_seconds() -> u64 {
    const BASE: u64 = 1 << 40;
    static START: OnceLock<Instant> = OnceLock::new();
    BASE + CLOCK_OFFSET.load(Ordering::Relaxed)
        + START.get_or_init(Instant::now).elapsed().as_secs()
}

/// How far this process's ticket clock runs ahead of its own start: the predecessor's age.
static CLOCK_OFFSET: AtomicU64 = AtomicU64::new(0);

/// Moves this process's ticket clock to where the predecessor's stood when it handed its
/// keys over (`predecessor_now`, its [`now_seconds`]), so the predecessor's tickets age
/// here as they would have there. Never moves it back.
pub(crate) fn continue_clock(predecessor_now: u64) {
    let ours = now_seconds();
    if predecessor_now > ours {
        CLOCK_OFFSET.fetch_add(predecessor_now - ours, Ordering::Relaxed);
    }
}

impl ProducesTickets for Ticketer {
    fn enabled(&self) -> bool {
        self.rotator.enabled()
    }

    fn lifetime(&self) -> u32 {
        self.rotator.lifetime()
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let mut stamped = Vec::with_capacity(8 + plain.len());
        stamped.extend_from_slice(&now_seconds().to_be_bytes());
        stamped.extend_from_slice(plain);
        self.rotator.encrypt(&stamped)
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        let mut plain = self.rotator.decrypt(ticket)?;
        let stamp = u64::from_be_bytes(plain.get(..8)?.try_into().ok()?);
        if now_seconds().saturating_sub(stamp) > self.max_age {
            return None;
        }
        plain.drain(..8);
        Some(plain)
    }
}

/// Tickets of one session context: the context sealed in with the state, a ticket of another
/// context refused. The keys are shared by every server config of a virtual server; the
/// context says which client certificate checks the session went through (see
/// `crate::acceptor`), so a reload that changes them leaves earlier tickets unusable.
pub(crate) fn in_context(inner: &Arc<Ticketer>, context: [u8; 32]) -> Arc<dyn ProducesTickets> {
    Arc::new(InContext {
        inner: Arc::clone(inner) as Arc<dyn ProducesTickets>,
        context,
    })
}

struct InContext {
    inner: Arc<dyn ProducesTickets>,
    context: [u8; 32],
}

impl std::fmt::Debug for InContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InContext")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl ProducesTickets for InContext {
    fn enabled(&self) -> bool {
        self.inner.enabled()
    }

    fn lifetime(&self) -> u32 {
        self.inner.lifetime()
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let mut bound = Vec::with_capacity(self.context.len() + plain.len());
        bound.extend_from_slice(&self.context);
        bound.extend_from_slice(plain);
        self.inner.encrypt(&bound)
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        let mut plain = self.inner.decrypt(ticket)?;
        if plain.get(..self.context.len())? != self.context {
            return None;
        }
        plain.drain(..self.context.len());
        Some(plain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_round_trip_and_reject_tampering() {
        let key = TicketKey::generate().unwrap();
        let ticket = key.encrypt(b"session state").unwrap();
        assert_eq!(key.decrypt(&ticket).unwrap(), b"session state");
        for position in [0, KEY_NAME_LEN, KEY_NAME_LEN + NONCE_LEN, ticket.len() - 1] {
            let mut bad = ticket.clone();
            bad[position] ^= 1;
            assert!(
                key.decrypt(&bad).is_none(),
                "flipped byte {position} accepted"
            );
        }
        assert!(key.decrypt(&ticket[..20]).is_none());
        let other = TicketKey::generate().unwrap();
        assert!(other.decrypt(&ticket).is_none());
    }

    #[test]
    fn a_ticket_older_than_two_periods_is_refused() {
        let aged = Ticketer {
            rotator: Rotating::new(Duration::from_secs(3600), Instant::now()).unwrap(),
            max_age: 7200,
        };
        let ticket = aged.encrypt(b"state").unwrap();
        assert_eq!(aged.decrypt(&ticket).unwrap(), b"state");
        // The same ticket, as if made 7201 s ago: the key still opens it, its age does not.
        let mut old = b"state".to_vec();
        let made = now_seconds() - 7201;
        old.splice(0..0, made.to_be_bytes());
        let sealed = aged.rotator.encrypt(&old).unwrap();
        assert!(aged.decrypt(&sealed).is_none());
        // Garbage shorter than a stamp is refused, not a panic.
        let short = aged.rotator.encrypt(b"abc").unwrap();
        assert!(aged.decrypt(&short).is_none());
    }

    #[test]
    fn a_ticket_opens_only_in_the_context_that_made_it() {
        let keys = ticketer(Duration::from_secs(3600)).unwrap();
        let here = in_context(&keys, [1; 32]);
        let there = in_context(&keys, [2; 32]);
        let ticket = here.encrypt(b"state").unwrap();
        assert_eq!(here.decrypt(&ticket).unwrap(), b"state");
        assert!(there.decrypt(&ticket).is_none());
        // Same keys, no context: not a way around it either.
        assert!(keys.decrypt(&ticket).unwrap().starts_with(&[1; 32]));
        let short = keys.encrypt(b"abc").unwrap();
        assert!(here.decrypt(&short).is_none());
    }

    /// A ticket made at the very end of its key's period still opens two periods later:
    /// its key is kept two periods past its retirement, then erased.
    #[test]
    fn a_key_opens_its_tickets_for_two_periods_after_it_stops_sealing() {
        let start = Instant::now();
        let at = |seconds: f64| start + Duration::from_secs_f64(seconds);
        let keys = Rotating::new(Duration::from_secs(10), start).unwrap();
        let late = keys.encrypt_at(b"late", at(9.9)).unwrap();
        // A new key seals from 10 s, and another from 20 s.
        let next = keys.encrypt_at(b"next", at(10.5)).unwrap();
        let third = keys.encrypt_at(b"third", at(20.6)).unwrap();
        assert_ne!(late[..KEY_NAME_LEN], next[..KEY_NAME_LEN]);
        assert_ne!(next[..KEY_NAME_LEN], third[..KEY_NAME_LEN]);
        // 9.9 + 20 = 29.9: the first key still opens its last ticket (rustls' rotator
        // had erased it at 20.6).
        assert_eq!(keys.decrypt_at(&late, at(29.8)).unwrap(), b"late");
        assert_eq!(keys.decrypt_at(&next, at(29.8)).unwrap(), b"next");
        // Two periods after it stopped sealing (10.5 + 20), it is gone.
        assert!(keys.decrypt_at(&late, at(30.6)).is_none());
        assert_eq!(keys.decrypt_at(&third, at(30.6)).unwrap(), b"third");
        // After a long idle spell, the next use makes a new key, and nothing old opens.
        let fresh = keys.encrypt_at(b"fresh", at(500.0)).unwrap();
        assert!(keys.decrypt_at(&third, at(500.0)).is_none());
        assert_eq!(keys.decrypt_at(&fresh, at(500.0)).unwrap(), b"fresh");
    }

    /// What one process's keys sealed, another process's keys open once they have taken
    /// the first's over: the current key seals on and the retired one keeps its time left.
    #[test]
    fn adopted_keys_open_what_the_predecessor_sealed() {
        let start = Instant::now();
        let at = |seconds: u64| start + Duration::from_secs(seconds);
        let old = Rotating::new(Duration::from_secs(10), start).unwrap();
        let early = old.encrypt_at(b"early", at(1)).unwrap();
        let late = old.encrypt_at(b"late", at(12)).unwrap();
        let records = old.export_at(at(13));
        assert_eq!(records.len(), 2);
        assert!(!records[0].retired && records[1].retired);
        // The successor starts with its own, unused key and the same period.
        let new = Rotating::new(Duration::from_secs(10), at(13)).unwrap();
        assert!(new.decrypt_at(&late, at(13)).is_none());
        new.adopt_at(&records, at(13));
        assert_eq!(new.decrypt_at(&early, at(13)).unwrap(), b"early");
        assert_eq!(new.decrypt_at(&late, at(13)).unwrap(), b"late");
        // The adopted current key still seals (it began at 12 s, its period runs to 22 s).
        let sealed = new.encrypt_at(b"next", at(14)).unwrap();
        assert_eq!(sealed[..KEY_NAME_LEN], late[..KEY_NAME_LEN]);
        // The retired key stopped sealing at 12 s: erased two periods later, at 32 s.
        assert_eq!(new.decrypt_at(&early, at(31)).unwrap(), b"early");
        assert!(new.decrypt_at(&early, at(33)).is_none());
    }

    #[test]
    fn rotator_reports_two_periods() {
        let ticketer = ticketer(Duration::from_secs(3600)).unwrap();
        assert_eq!(ticketer.lifetime(), 7200);
        let ticket = ticketer.encrypt(b"x").unwrap();
        assert_eq!(ticketer.decrypt(&ticket).unwrap(), b"x");
    }
}
