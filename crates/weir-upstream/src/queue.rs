//! The queue in front of a node: bounded, and fair between clients.
//!
//! Requests that find every connection (or stream) of a node busy wait here. Each request
//! belongs to a [`Flow`], in practice its client's address. Requests of one flow keep
//! their order, and the flows that have requests waiting take turns: a freed connection
//! goes to the oldest request of the next flow in the round. A client with thirty
//! requests queued therefore delays another client's single request by at most one
//! request per flow ahead of it, not by all thirty.
//!
//! The queue's bound (`queue_length`) is shared by every flow. When it is full, a request
//! of a flow with fewer requests waiting takes the place of the newest request of the
//! longest flow, which is refused as a full queue would have refused it (stochastic fair
//! queueing drops from its longest queue the same way): one client cannot keep the others
//! out of the queue by filling it.
//!
//! A pool whose queue is first come, first served (`fair_queue = false`) puts every
//! request in [`Flow::Shared`]: one flow, served in arrival order.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

/// Whose request waits in a node's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flow {
    /// Requests that have no client of their own (health checks, tests), and every
    /// request of a pool whose queue is first come, first served.
    Shared,
    /// A client: an IPv4 address, or the /64 prefix of an IPv6 address (one host's usual
    /// share of a network, so that a client cannot open a flow per address it owns).
    Client(u128),
}

impl Flow {
    /// The flow of requests from `address`: its client as limits count it
    /// ([`weir_rules::limited_client`]: an IPv4 address, an IPv6 one's /64).
    pub fn client(address: IpAddr) -> Flow {
        let bits = match weir_rules::limited_client(address) {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().to_bits(),
            IpAddr::V6(v6) => v6.to_bits(),
        };
        Flow::Client(bits)
    }

    /// The flow a request of this one waits in: its own in a fair queue, else the one
    /// shared by every request.
    pub(crate) fn waiting_in(self, fair: bool) -> Flow {
        match fair {
            true => self,
            false => Flow::Shared,
        }
    }
}

/// A full queue had no request to push out for a newcomer: the newcomer is refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Full;

/// Requests waiting for a node, grouped by flow; each entry is a request's id and what
/// the pool keeps for it (the sender of its grant).
#[derive(Debug)]
pub(crate) struct FairQueue<T> {
    /// The requests of each flow that has any, oldest first.
    flows: HashMap<Flow, VecDeque<(u64, T)>>,
    /// The flows that have requests waiting, in the order they are served next.
    turns: VecDeque<Flow>,
    len: usize,
}

impl<T> Default for FairQueue<T> {
    fn default() -> Self {
        FairQueue {
            flows: HashMap::new(),
            turns: VecDeque::new(),
            len: 0,
        }
    }
}

impl<T> FairQueue<T> {
    /// Requests waiting, all flows together.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds a request at the end of its flow; a flow new to the queue takes its turn
    /// after every flow already waiting.
    pub(crate) fn push(&mut self, flow: Flow, id: u64, item: T) {
        let waiting = self.flows.entry(flow).or_default();
        if waiting.is_empty() {
            self.turns.push_back(flow);
        }
        waiting.push_back((id, item));
        self.len += 1;
    }

    /// Takes the oldest request of the flow whose turn it is; that flow, if it still has
    /// requests, goes to the end of the round.
    pub(crate) fn pop(&mut self) -> Option<T> {
        let flow = self.turns.pop_front()?;
        let waiting = self
            .flows
            .get_mut(&flow)
            .expect("a flow in turn has requests waiting");
        let (_, item) = waiting
            .pop_front()
            .expect("a flow in turn has requests waiting");
        if waiting.is_empty() {
            self.flows.remove(&flow);
        } else {
            self.turns.push_back(flow);
        }
        self.len -= 1;
        Some(item)
    }

    /// Takes the request `id` of `flow` out (it stopped waiting); `None` when it is no
    /// longer queued.
    pub(crate) fn remove(&mut self, flow: Flow, id: u64) -> Option<T> {
        let waiting = self.flows.get_mut(&flow)?;
        let position = waiting.iter().position(|(queued, _)| *queued == id)?;
        let (_, item) = waiting.remove(position)?;
        if waiting.is_empty() {
            self.flows.remove(&flow);
            self.turns.retain(|turn| *turn != flow);
        }
        self.len -= 1;
        Some(item)
    }

    /// Room for one more request of `flow` with at most `bound` waiting: under the bound,
    /// nothing to do; at it, the request [`FairQueue::push_out_for`] takes out, returned
    /// to be refused; [`Full`] when none may go.
    pub(crate) fn make_room(&mut self, flow: Flow, bound: usize) -> Result<Option<T>, Full> {
        if self.len < bound {
            return Ok(None);
        }
        self.push_out_for(flow).map(Some).ok_or(Full)
    }

    /// In a full queue, makes room for one more request of `flow`: takes out and returns
    /// the newest request of the flow with the most waiting, when that flow would still
    /// have more than `flow` with the newcomer. `None`: `flow` is itself among the
    /// longest, and the newcomer is the one refused.
    fn push_out_for(&mut self, flow: Flow) -> Option<T> {
        let own = self.flows.get(&flow).map_or(0, VecDeque::len);
        let (&longest, waiting) = self
            .flows
            .iter_mut()
            .max_by_key(|(_, waiting)| waiting.len())?;
        if waiting.len() <= own + 1 {
            return None;
        }
        let (_, item) = waiting.pop_back().expect("the longest flow has requests");
        // The longest flow had at least two requests: it still has one, and its turn.
        debug_assert!(!waiting.is_empty(), "{longest:?} still waits");
        self.len -= 1;
        Some(item)
    }
}

impl<G> FairQueue<tokio::sync::oneshot::Sender<G>> {
    /// Empties the queue, handing each request waiting `grant()`: those sent away from a
    /// node that takes no more (`NodeConnections::set_taking_requests`). Returns how many
    /// were taken out, and how many of those were still there to receive it.
    pub(crate) fn send_each(&mut self, grant: impl Fn() -> G) -> (usize, usize) {
        let (mut taken, mut received) = (0, 0);
        while let Some(waiter) = self.pop() {
            taken += 1;
            if waiter.send(grant()).is_ok() {
                received += 1;
            }
        }
        (taken, received)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn client(last: u8) -> Flow {
        Flow::client(IpAddr::V4(Ipv4Addr::new(192, 0, 2, last)))
    }

    fn drain(queue: &mut FairQueue<&'static str>) -> Vec<&'static str> {
        std::iter::from_fn(|| queue.pop()).collect()
    }

    #[test]
    fn flows_take_turns_and_keep_their_own_order() {
        let mut queue = FairQueue::default();
        for (id, name) in ["a1", "a2", "a3", "a4"].into_iter().enumerate() {
            queue.push(client(1), id as u64, name);
        }
        queue.push(client(2), 10, "b1");
        queue.push(client(3), 11, "c1");
        queue.push(client(2), 12, "b2");
        assert_eq!(queue.len(), 7);
        assert_eq!(
            drain(&mut queue),
            ["a1", "b1", "c1", "a2", "b2", "a3", "a4"]
        );
        assert!(queue.is_empty());
    }

    #[test]
    fn one_shared_flow_is_first_come_first_served() {
        let mut queue = FairQueue::default();
        for (id, name) in ["x", "y", "z"].into_iter().enumerate() {
            queue.push(Flow::Shared, id as u64, name);
        }
        assert_eq!(drain(&mut queue), ["x", "y", "z"]);
    }

    #[test]
    fn a_removed_request_leaves_its_flow_and_an_emptied_flow_its_turn() {
        let mut queue = FairQueue::default();
        queue.push(client(1), 1, "a1");
        queue.push(client(2), 2, "b1");
        queue.push(client(1), 3, "a2");
        assert_eq!(queue.remove(client(2), 2), Some("b1"));
        assert_eq!(queue.remove(client(2), 2), None, "removed once");
        assert_eq!(queue.remove(client(1), 2), None, "not this flow's");
        // b's flow came back after emptying: it waits behind a's turn.
        queue.push(client(2), 4, "b2");
        assert_eq!(queue.len(), 3);
        assert_eq!(drain(&mut queue), ["a1", "b2", "a2"]);
    }

    #[test]
    fn a_full_queue_pushes_out_the_newest_of_the_longest_flow() {
        let mut queue = FairQueue::default();
        queue.push(client(1), 1, "a1");
        queue.push(client(1), 2, "a2");
        queue.push(client(1), 3, "a3");
        queue.push(client(2), 4, "b1");
        // Under the bound nothing goes.
        assert_eq!(queue.make_room(client(3), 5), Ok(None));
        // c has none: a's three are more than c's one with the newcomer.
        assert_eq!(queue.make_room(client(3), 4), Ok(Some("a3")));
        queue.push(client(3), 5, "c1");
        // b has one; a has two, not more than b's two with the newcomer.
        assert_eq!(queue.make_room(client(2), 4), Err(Full));
        // a is the longest itself.
        assert_eq!(queue.make_room(client(1), 4), Err(Full));
        assert_eq!(queue.len(), 4);
        assert_eq!(drain(&mut queue), ["a1", "b1", "c1", "a2"]);
        assert_eq!(queue.push_out_for(client(1)), None, "nothing to push out");
    }

    #[test]
    fn an_ipv6_client_is_one_flow_per_64_prefix_and_mapped_ipv4_is_ipv4() {
        let host = |last: u16| {
            Flow::client(IpAddr::V6(Ipv6Addr::new(
                0x2001, 0xdb8, 0, 1, 0, 0, 0, last,
            )))
        };
        assert_eq!(host(1), host(0xffff));
        let other = Flow::client(IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 2, 0, 0, 0, 1)));
        assert_ne!(host(1), other);
        let v4 = Ipv4Addr::new(192, 0, 2, 7);
        assert_eq!(
            Flow::client(IpAddr::V6(v4.to_ipv6_mapped())),
            Flow::client(IpAddr::V4(v4))
        );
        assert_ne!(
            client(1),
            client(2),
            "IPv4 clients are one flow per address"
        );
        assert_ne!(Flow::Shared, client(0));
    }
}
