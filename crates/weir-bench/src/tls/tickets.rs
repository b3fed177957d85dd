//! The client's session store: like a browser population, every connection of a run may
//! hold a TLS 1.3 ticket of its own. rustls' in-memory store keeps at most 8 tickets per
//! server name, so with more connections than that a burst of new connections finds the
//! store empty and does full handshakes without offering a ticket; a "resumed" run would
//! then mix in full handshakes. This store keeps as many tickets per server as the run has
//! connections (twice over, since servers send two per connection), oldest dropped first.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use rustls::NamedGroup;
use rustls::client::{ClientSessionStore, Tls12ClientSessionValue, Tls13ClientSessionValue};
use rustls::pki_types::ServerName;

/// Tickets kept per server name at the least (rustls' own bound).
const MIN_TICKETS: usize = 8;

/// Sessions per server name, each TLS 1.3 ticket used at most once.
#[derive(Debug)]
pub struct TicketStore {
    tickets_per_server: usize,
    /// By server name as text (`ServerName::to_str`).
    servers: Mutex<HashMap<String, Server>>,
}

#[derive(Debug, Default)]
struct Server {
    kx_hint: Option<NamedGroup>,
    tls12: Option<Tls12ClientSessionValue>,
    /// Oldest first.
    tls13: VecDeque<Tls13ClientSessionValue>,
}

impl TicketStore {
    /// A store for a run of `connections` connections.
    pub fn for_connections(connections: usize) -> TicketStore {
        TicketStore {
            tickets_per_server: connections.saturating_mul(2).max(MIN_TICKETS),
            servers: Mutex::new(HashMap::new()),
        }
    }

    /// TLS 1.3 tickets kept per server name at most.
    pub fn tickets_per_server(&self) -> usize {
        self.tickets_per_server
    }

    fn with_server<R>(&self, name: &ServerName<'_>, f: impl FnOnce(&mut Server) -> R) -> R {
        let mut servers = self
            .servers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let server = match servers.get_mut(name.to_str().as_ref()) {
            Some(server) => server,
            None => servers.entry(name.to_str().into_owned()).or_default(),
        };
        f(server)
    }

    fn with_known<R>(&self, name: &ServerName<'_>, f: impl FnOnce(&mut Server) -> R) -> Option<R> {
        let mut servers = self
            .servers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        servers.get_mut(name.to_str().as_ref()).map(f)
    }
}

impl ClientSessionStore for TicketStore {
    fn set_kx_hint(&self, name: ServerName<'static>, group: NamedGroup) {
        self.with_server(&name, |server| server.kx_hint = Some(group));
    }

    fn kx_hint(&self, name: &ServerName<'_>) -> Option<NamedGroup> {
        self.with_known(name, |server| server.kx_hint).flatten()
    }

    fn set_tls12_session(&self, name: ServerName<'static>, value: Tls12ClientSessionValue) {
        self.with_server(&name, |server| server.tls12 = Some(value));
    }

    fn tls12_session(&self, name: &ServerName<'_>) -> Option<Tls12ClientSessionValue> {
        self.with_known(name, |server| server.tls12.clone())
            .flatten()
    }

    fn remove_tls12_session(&self, name: &ServerName<'static>) {
        self.with_known(name, |server| server.tls12 = None);
    }

    fn insert_tls13_ticket(&self, name: ServerName<'static>, value: Tls13ClientSessionValue) {
        let limit = self.tickets_per_server;
        self.with_server(&name, |server| {
            while server.tls13.len() >= limit {
                server.tls13.pop_front();
            }
            server.tls13.push_back(value);
        });
    }

    fn take_tls13_ticket(&self, name: &ServerName<'static>) -> Option<Tls13ClientSessionValue> {
        // The newest ticket: the least likely to have expired or been rotated out.
        self.with_known(name, |server| server.tls13.pop_back())
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_two_tickets_per_connection_and_at_least_eight() {
        assert_eq!(TicketStore::for_connections(50).tickets_per_server(), 100);
        assert_eq!(TicketStore::for_connections(1).tickets_per_server(), 8);
        assert_eq!(TicketStore::for_connections(0).tickets_per_server(), 8);
    }

    #[test]
    fn unknown_servers_have_nothing() {
        let store = TicketStore::for_connections(4);
        let name = ServerName::try_from("a.test").expect("valid name");
        assert_eq!(store.kx_hint(&name), None);
        assert!(store.tls12_session(&name).is_none());
        assert!(store.take_tls13_ticket(&name).is_none());
        store.set_kx_hint(name.clone(), NamedGroup::X25519);
        assert_eq!(store.kx_hint(&name), Some(NamedGroup::X25519));
        let other = ServerName::try_from("b.test").expect("valid name");
        assert_eq!(store.kx_hint(&other), None);
    }
}
