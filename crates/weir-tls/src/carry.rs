//! Resumption across a binary upgrade: the running process writes each virtual server's
//! ticket keys and cached sessions ([`export`]); the new process reads them ([`adopt`])
//! before it builds its acceptors, and each [`Acceptor`] of the same name starts with
//! them. Clients that resumed before the upgrade resume after it, instead of every one of
//! them making a full handshake at once.
//!
//! Only a process of the same user hands them over (`weir serve --upgrade`, in the `weir`
//! crate's `upgrade` module). The encoding is this module's own and versioned; a reader
//! that does not know the version, or finds the bytes cut short, adopts nothing and says
//! so, and the upgrade goes on with fresh keys.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::Acceptor;
use crate::session_cache::CarriedSession;
use crate::ticketer::{KEY_NAME_LEN, KeyRecord, SECRET_LEN};

/// The encoding's version: the first byte.
const VERSION: u8 = 1;

/// What one virtual server's acceptor carries over.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Carried {
    pub keys: Vec<KeyRecord>,
    pub sessions: Vec<CarriedSession>,
}

/// What [`adopt`] took over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Adopted {
    /// Virtual servers with something carried over.
    pub virtual_servers: usize,
    /// Ticket keys, over all of them.
    pub ticket_keys: usize,
    /// Cached sessions, over all of them.
    pub sessions: usize,
}

/// Carried state by virtual server name, waiting for its acceptor ([`take`]).
static ADOPTED: Mutex<Option<HashMap<String, Carried>>> = Mutex::new(None);

/// The ticket keys and sessions of `acceptors`, and this process's ticket clock, encoded
/// for a successor.
pub fn export<'a>(acceptors: impl IntoIterator<Item = &'a Acceptor>) -> Vec<u8> {
    let by_name: Vec<(&str, Carried)> = acceptors
        .into_iter()
        .map(|acceptor| (acceptor.virtual_server(), acceptor.carried()))
        .filter(|(_, carried)| !carried.keys.is_empty() || !carried.sessions.is_empty())
        .collect();
    encode(crate::ticketer::now_seconds(), &by_name)
}

/// Reads what a predecessor [`export`]ed, continues its ticket clock, and keeps each
/// virtual server's part for the acceptor of that name this process builds next. Nothing
/// is adopted from bytes that do not decode.
pub fn adopt(bytes: &[u8]) -> Result<Adopted, String> {
    let (clock, carried) = decode(bytes)?;
    crate::ticketer::continue_clock(clock);
    let adopted = Adopted {
        virtual_servers: carried.len(),
        ticket_keys: carried.values().map(|c| c.keys.len()).sum(),
        sessions: carried.values().map(|c| c.sessions.len()).sum(),
    };
    *ADOPTED.lock().unwrap_or_else(PoisonError::into_inner) = Some(carried);
    Ok(adopted)
}

/// Drops what no acceptor took when the first model was built (a virtual server the new
/// config does not have, or renamed): a virtual server a later reload adds starts with
/// fresh keys and an empty cache, not with state whose age stopped counting at the
/// handover. The number of virtual servers whose state was dropped.
pub fn forget_unclaimed() -> usize {
    ADOPTED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
        .map_or(0, |left| left.len())
}

/// The carried state of `virtual_server`, once: the first acceptor of that name takes it.
pub(crate) fn take(virtual_server: &str) -> Option<Carried> {
    ADOPTED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_mut()?
        .remove(virtual_server)
}

fn encode(clock: u64, by_name: &[(&str, Carried)]) -> Vec<u8> {
    let mut out = vec![VERSION];
    out.extend_from_slice(&clock.to_be_bytes());
    put_len(&mut out, by_name.len());
    for (name, carried) in by_name {
        put_bytes(&mut out, name.as_bytes());
        put_len(&mut out, carried.keys.len());
        for key in &carried.keys {
            out.extend_from_slice(&key.name);
            out.extend_from_slice(&key.secret);
            out.push(u8::from(key.retired));
            put_age(&mut out, key.age);
        }
        put_len(&mut out, carried.sessions.len());
        for session in &carried.sessions {
            put_bytes(&mut out, &session.key);
            put_bytes(&mut out, &session.value);
            put_age(&mut out, session.age);
        }
    }
    out
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

fn put_age(out: &mut Vec<u8>, age: Duration) {
    let millis = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
    out.extend_from_slice(&millis.to_be_bytes());
}

type Decoded = (u64, HashMap<String, Carried>);

fn decode(bytes: &[u8]) -> Result<Decoded, String> {
    let mut reader = Reader(bytes);
    let version = reader.array::<1>()?[0];
    if version != VERSION {
        return Err(format!(
            "version {version}, this weir reads version {VERSION}"
        ));
    }
    let clock = u64::from_be_bytes(reader.array()?);
    let mut carried = HashMap::new();
    for _ in 0..reader.len()? {
        let name = String::from_utf8(reader.bytes()?.to_vec())
            .map_err(|_| "a virtual server name is not UTF-8".to_owned())?;
        let mut one = Carried::default();
        for _ in 0..reader.len()? {
            one.keys.push(KeyRecord {
                name: reader.array::<KEY_NAME_LEN>()?,
                secret: reader.array::<SECRET_LEN>()?,
                retired: reader.array::<1>()?[0] != 0,
                age: reader.age()?,
            });
        }
        for _ in 0..reader.len()? {
            one.sessions.push(CarriedSession {
                key: reader.bytes()?.to_vec(),
                value: reader.bytes()?.to_vec(),
                age: reader.age()?,
            });
        }
        carried.insert(name, one);
    }
    if !reader.0.is_empty() {
        return Err(format!("{} bytes after the end", reader.0.len()));
    }
    Ok((clock, carried))
}

/// Reads the encoding front to back; every read checks what is left first.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, count: usize) -> Result<&'a [u8], String> {
        if self.0.len() < count {
            return Err("cut short".to_owned());
        }
        let (taken, rest) = self.0.split_at(count);
        self.0 = rest;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut array = [0u8; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }

    /// A count: never more than the bytes left could hold, so a corrupt count cannot make
    /// a reader reserve or loop for more than the input.
    fn len(&mut self) -> Result<usize, String> {
        let len = u32::from_be_bytes(self.array()?) as usize;
        if len > self.0.len() {
            return Err("a count larger than what follows".to_owned());
        }
        Ok(len)
    }

    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let len = self.len()?;
        self.take(len)
    }

    fn age(&mut self) -> Result<Duration, String> {
        Ok(Duration::from_millis(u64::from_be_bytes(self.array()?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<(&'static str, Carried)> {
        vec![
            (
                "secure",
                Carried {
                    keys: vec![
                        KeyRecord {
                            name: [1; KEY_NAME_LEN],
                            secret: [2; SECRET_LEN],
                            retired: false,
                            age: Duration::from_millis(1500),
                        },
                        KeyRecord {
                            name: [3; KEY_NAME_LEN],
                            secret: [4; SECRET_LEN],
                            retired: true,
                            age: Duration::from_secs(3600),
                        },
                    ],
                    sessions: vec![CarriedSession {
                        key: b"id and context".to_vec(),
                        value: b"rustls state".to_vec(),
                        age: Duration::from_secs(7),
                    }],
                },
            ),
            (
                "other",
                Carried {
                    keys: Vec::new(),
                    sessions: vec![CarriedSession {
                        key: Vec::new(),
                        value: vec![9; 300],
                        age: Duration::ZERO,
                    }],
                },
            ),
        ]
    }

    #[test]
    fn what_is_encoded_decodes_the_same() {
        let sample = sample();
        let bytes = encode(1 << 41, &sample);
        let (clock, decoded) = decode(&bytes).unwrap();
        assert_eq!(clock, 1 << 41);
        assert_eq!(decoded.len(), 2);
        for (name, carried) in sample {
            assert_eq!(decoded[name], carried, "{name}");
        }
        let (_, empty) = decode(&encode(5, &[])).unwrap();
        assert!(empty.is_empty());
    }

    /// What the first model does not take is dropped, and never taken later.
    #[test]
    fn unclaimed_state_is_forgotten() {
        let bytes = encode(1, &sample());
        adopt(&bytes).unwrap();
        assert!(take("secure").is_some());
        assert!(take("secure").is_none(), "taken twice");
        assert_eq!(forget_unclaimed(), 1);
        assert!(take("other").is_none());
        assert_eq!(forget_unclaimed(), 0);
    }

    /// Every cut, every flipped count and an unknown version are refused, never a panic
    /// or a reservation beyond the input.
    #[test]
    fn damaged_bytes_are_refused() {
        let bytes = encode(1 << 41, &sample());
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
        let mut version = bytes.clone();
        version[0] = 2;
        assert!(decode(&version).unwrap_err().contains("version 2"));
        for position in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[position] ^= 0xff;
            // Some flips still decode (a key byte, an age); none may panic.
            let _ = decode(&flipped);
        }
    }
}
