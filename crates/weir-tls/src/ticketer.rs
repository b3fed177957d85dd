//! Session tickets: AES-256-GCM under a random key, rotated on a schedule.
//!
//! rustls' [`TicketRotator`] keeps the current key and the one before it, so
//! a ticket is accepted for up to two rotation periods and every key is
//! erased after that. The key itself is made here because the aws-lc-rs
//! ticketer rustls ships has a fixed six-hour rotation.
//!
//! Ticket layout: key name (16 random bytes) ‖ nonce (12) ‖ ciphertext ‖ tag (16).

use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::GetRandomFailed;
use rustls::server::ProducesTickets;
use rustls::ticketer::TicketRotator;
use tokio_rustls::rustls;

use aws_lc_rs::aead::{AES_256_GCM, Aad, NONCE_LEN, Nonce, RandomizedNonceKey};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};

const KEY_NAME_LEN: usize = 16;
const TAG_LEN: usize = 16;

/// One ticket key.
struct TicketKey {
    name: [u8; KEY_NAME_LEN],
    key: RandomizedNonceKey,
}

impl std::fmt::Debug for TicketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("TicketKey").finish_non_exhaustive()
    }
}

impl TicketKey {
    fn generate() -> Result<Box<dyn ProducesTickets>, GetRandomFailed> {
        let random = SystemRandom::new();
        let mut name = [0u8; KEY_NAME_LEN];
        let mut secret = [0u8; 32];
        random.fill(&mut name).map_err(|_| GetRandomFailed)?;
        random.fill(&mut secret).map_err(|_| GetRandomFailed)?;
        let key = RandomizedNonceKey::new(&AES_256_GCM, &secret).map_err(|_| GetRandomFailed)?;
        Ok(Box::new(TicketKey { name, key }))
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

/// A ticketer whose key changes every `rotation`.
pub fn ticketer(rotation: Duration) -> Result<Arc<dyn ProducesTickets>, rustls::Error> {
    let seconds = u32::try_from(rotation.as_secs().max(1)).unwrap_or(u32::MAX);
    Ok(Arc::new(TicketRotator::new(seconds, TicketKey::generate)?))
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
    fn rotator_reports_two_periods() {
        let ticketer = ticketer(Duration::from_secs(3600)).unwrap();
        assert_eq!(ticketer.lifetime(), 7200);
        let ticket = ticketer.encrypt(b"x").unwrap();
        assert_eq!(ticketer.decrypt(&ticket).unwrap(), b"x");
    }
}
