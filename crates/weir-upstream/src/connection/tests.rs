use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use weir_core::ErrorKind;
use weir_observe::Metrics;

use super::*;

fn settings(max: u32, queue: u32, queue_timeout_ms: u64) -> ConnectionSettings {
    ConnectionSettings {
        max_connections: max,
        queue_length: queue,
        queue_timeout: Duration::from_millis(queue_timeout_ms),
        fair_queue: true,
        idle_timeout: Duration::from_secs(30),
        connect_timeout: Duration::from_secs(2),
        max_requests: None,
        max_tunnels: 2,
        tls: None,
    }
}

/// A listener that accepts and holds every connection; returns the count accepted.
async fn holding_listener() -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            held.push(stream);
        }
    });
    (address, accepted)
}

fn pool(address: SocketAddr, settings: ConnectionSettings) -> Arc<NodeConnections> {
    let metrics = Metrics::new();
    NodeConnections::new(address, settings, metrics.node("p", "n"), metrics.pool("p"))
}

#[tokio::test]
async fn released_connections_are_reused() {
    let (address, accepted) = holding_listener().await;
    let pool = pool(address, settings(4, 10, 1000));
    for _ in 0..10 {
        let lease = pool.checkout().await.unwrap();
        lease.release();
    }
    assert_eq!(pool.open(), 1);
    assert_eq!(pool.idle(), 1);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn cap_is_hard_and_waiters_get_released_connections_in_order() {
    let (address, accepted) = holding_listener().await;
    let pool = pool(address, settings(2, 10, 5000));
    let first = pool.checkout().await.unwrap();
    let second = pool.checkout().await.unwrap();
    assert_eq!(pool.open(), 2);
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for n in 0..3 {
        let waiter_pool = Arc::clone(&pool);
        let order = Arc::clone(&order);
        waiters.push(tokio::spawn(async move {
            let lease = waiter_pool.checkout().await.unwrap();
            order.lock().unwrap().push(n);
            tokio::time::sleep(Duration::from_millis(5)).await;
            lease.release();
        }));
        // Make the queue order deterministic.
        while pool.queued() < n + 1 {
            tokio::task::yield_now().await;
        }
    }
    assert_eq!(pool.queued(), 3);
    first.release();
    second.release();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
    assert_eq!(pool.open(), 2);
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn queue_timeout_and_queue_full_fail_fast() {
    let (address, _) = holding_listener().await;
    let pool = pool(address, settings(1, 1, 50));
    let held = pool.checkout().await.unwrap();
    let waiting = {
        let pool = Arc::clone(&pool);
        tokio::spawn(async move { pool.checkout().await.map(|_| ()) })
    };
    while pool.queued() < 1 {
        tokio::task::yield_now().await;
    }
    let full = pool.checkout().await.unwrap_err();
    assert_eq!(full.kind(), ErrorKind::QueueFull);
    let timed_out = waiting.await.unwrap().unwrap_err();
    assert_eq!(timed_out.kind(), ErrorKind::QueueTimeout);
    assert_eq!(pool.queued(), 0);
    drop(held);
    assert_eq!(pool.open(), 0);
}

#[tokio::test]
async fn dropped_lease_frees_its_slot_for_a_waiter() {
    let (address, accepted) = holding_listener().await;
    let pool = pool(address, settings(1, 4, 5000));
    let held = pool.checkout().await.unwrap();
    let waiter = {
        let pool = Arc::clone(&pool);
        tokio::spawn(async move { pool.checkout().await.map(|lease| lease.is_reused()) })
    };
    while pool.queued() < 1 {
        tokio::task::yield_now().await;
    }
    drop(held); // closed, not reusable: the waiter connects afresh
    assert!(!waiter.await.unwrap().unwrap());
    assert_eq!(pool.open(), 0);
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn cancelled_waiter_leaves_the_queue() {
    let (address, _) = holding_listener().await;
    let pool = pool(address, settings(1, 4, 5000));
    let held = pool.checkout().await.unwrap();
    let waiter = {
        let pool = Arc::clone(&pool);
        tokio::spawn(async move { pool.checkout().await.map(|_| ()) })
    };
    while pool.queued() < 1 {
        tokio::task::yield_now().await;
    }
    waiter.abort();
    let _ = waiter.await;
    assert_eq!(pool.queued(), 0);
    held.release();
    assert_eq!(pool.idle(), 1);
    assert_eq!(pool.open(), 1);
}

#[tokio::test]
async fn connections_closed_by_the_node_are_not_reused() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    // Accept and close at once.
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
        }
    });
    let pool = pool(address, settings(2, 4, 1000));
    let lease = pool.checkout().await.unwrap();
    lease.release();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let lease = pool.checkout().await.unwrap();
    assert!(!lease.is_reused());
    assert_eq!(pool.open(), 1);
}

#[tokio::test]
async fn idle_connections_expire() {
    let (address, _) = holding_listener().await;
    let mut settings = settings(2, 4, 1000);
    settings.idle_timeout = Duration::from_millis(20);
    let pool = pool(address, settings);
    pool.checkout().await.unwrap().release();
    assert_eq!(pool.idle(), 1);
    tokio::time::sleep(Duration::from_millis(40)).await;
    assert_eq!(pool.close_expired(std::time::Instant::now()), 1);
    assert_eq!(pool.open(), 0);
}

/// An idle connection the node closed (its own keep-alive timeout) is closed and its slot
/// freed at the next sweep, long before weir's idle timeout: it is not held half-closed
/// and counted as open until a request tries it.
#[tokio::test]
async fn idle_connections_the_node_closed_are_swept() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    // Keep the first connection until told, then close it.
    let (close, closed) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let _ = closed.await;
        drop(stream);
        std::future::pending::<()>().await;
    });
    let pool = pool(address, settings(2, 4, 1000));
    pool.checkout().await.unwrap().release();
    assert_eq!(
        pool.close_expired(std::time::Instant::now()),
        0,
        "still open"
    );
    assert_eq!((pool.idle(), pool.open()), (1, 1));
    close.send(()).unwrap();
    let start = std::time::Instant::now();
    while pool.close_expired(std::time::Instant::now()) == 0 {
        assert!(start.elapsed() < Duration::from_secs(5), "never swept");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!((pool.idle(), pool.open()), (0, 0));
}

#[tokio::test]
async fn connect_failure_is_retry_safe_and_frees_the_slot() {
    // Bind then drop: nothing listens on this port.
    let address = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let pool = pool(address, settings(1, 4, 1000));
    let error = pool.checkout().await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::ConnectFailed);
    assert!(error.is_retry_safe());
    assert_eq!(pool.open(), 0);
}

#[tokio::test]
async fn dedicated_connections_wait_at_the_cap_in_order_and_are_never_kept() {
    let (address, accepted) = holding_listener().await;
    let pool = pool(address, settings(2, 10, 5000));
    // An idle connection left by an HTTP exchange is not handed to a dedicated checkout.
    pool.checkout().await.unwrap().release();
    assert_eq!((pool.open(), pool.idle()), (1, 1));
    let first = pool.checkout_dedicated(&[]).await.unwrap();
    assert!(!first.is_reused());
    assert_eq!((pool.open(), pool.idle()), (2, 1));
    // At the cap, the idle connection makes room for a dedicated one.
    let second = pool.checkout_dedicated(&[]).await.unwrap();
    assert_eq!((pool.open(), pool.idle()), (2, 0));
    // Then the next ones queue, in order.
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for n in 0..3 {
        let pool = Arc::clone(&pool);
        let order = Arc::clone(&order);
        waiters.push(tokio::spawn(async move {
            let lease = pool.checkout_dedicated(&[]).await.unwrap();
            order.lock().unwrap().push(n);
            assert!(pool.open() <= 2);
            tokio::time::sleep(Duration::from_millis(20)).await;
            lease.release();
        }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(pool.queued(), 3);
    // A lease that ends (released or dropped) closes, and its slot goes to the first waiter,
    // which passes it on in turn.
    first.release();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    drop(second);
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
    assert_eq!((pool.open(), pool.idle(), pool.queued()), (0, 0, 0));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 6);
}

#[tokio::test]
async fn a_dedicated_waiter_granted_an_idle_connection_opens_its_own() {
    let (address, accepted) = holding_listener().await;
    let pool = pool(address, settings(1, 10, 5000));
    let http = pool.checkout().await.unwrap();
    let waiting = {
        let pool = Arc::clone(&pool);
        tokio::spawn(async move {
            pool.checkout_dedicated(&[])
                .await
                .map(|lease| lease.is_reused())
        })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(pool.queued(), 1);
    // The HTTP exchange gives its connection back: the waiter closes it and connects anew.
    http.release();
    assert!(!waiting.await.unwrap().unwrap());
    assert_eq!((pool.open(), pool.idle()), (0, 0));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

/// A listener that writes `stray` on each connection it accepts, after `delay`.
async fn stray_listener(stray: &'static [u8], delay: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let _ = tokio::io::AsyncWriteExt::write_all(&mut stream, stray).await;
                tokio::time::sleep(Duration::from_secs(30)).await;
            });
            held.push(());
        }
    });
    address
}

/// Bytes a node sent after its last response (a late body after HEAD) make a
/// connection unusable even when it goes straight to a waiting request.
#[tokio::test]
async fn a_connection_with_stray_bytes_is_not_handed_to_a_waiter() {
    let address = stray_listener(
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nforged",
        Duration::from_millis(20),
    )
    .await;
    let pool = pool(address, settings(1, 10, 5000));
    let first = pool.checkout().await.unwrap();
    let waiter_pool = Arc::clone(&pool);
    let waiter = tokio::spawn(async move { waiter_pool.checkout().await });
    while pool.queued() < 1 {
        tokio::task::yield_now().await;
    }
    // The stray bytes arrive before the connection is released.
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.release();
    let second = waiter.await.unwrap().unwrap();
    assert!(!second.is_reused(), "the waiter got a fresh connection");
    assert_eq!(pool.open(), 1, "the cap still holds");
}

/// Tunnels are capped apart from request slots, and a tunnel frees its slot.
#[tokio::test]
async fn tunnels_have_their_own_cap_and_free_request_slots() {
    let (address, _) = holding_listener().await;
    let pool = pool(address, settings(1, 10, 200));
    let first = pool.reserve_tunnel().unwrap();
    let second = pool.reserve_tunnel().unwrap();
    let refused = pool.reserve_tunnel().unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::QueueFull);
    drop(second);
    assert_eq!(pool.tunnels(), 1);

    let lease = pool.checkout().await.unwrap();
    let tunnel = lease.into_tunnel(first);
    assert_eq!(pool.open(), 0, "the tunnel no longer holds a request slot");
    let lease = pool
        .checkout()
        .await
        .expect("the slot is free for requests");
    assert_eq!(pool.tunnels(), 1);
    drop(tunnel);
    assert_eq!(pool.tunnels(), 0);
    drop(lease);
}

/// The release's check stands for `RECHECK_AFTER`: a connection taken just
/// after it is not peeked again, one taken later is (and found closed here).
#[tokio::test]
async fn a_fresh_release_check_is_not_repeated() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let pool = pool(listener.local_addr().unwrap(), settings(1, 4, 1000));
    let mut lease = pool.checkout().await.unwrap();
    let (node_side, _) = listener.accept().await.unwrap();
    drop(node_side);
    let mut connection = lease.connection.take().unwrap();
    while connection.looks_open() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let now = Instant::now();
    connection.checked_at = now;
    assert!(
        connection.still_open(now),
        "checked just now: taken as open"
    );
    assert!(
        !connection.still_open(now + RECHECK_AFTER),
        "checked RECHECK_AFTER ago: peeked again, and the node's close seen"
    );
}

/// A connection whose last read drained the socket is taken as open without
/// a peek (tokio's readiness is clear): bytes the node sends after that are
/// still seen, once the event loop has reported them.
#[tokio::test]
async fn bytes_after_a_drained_read_still_make_a_connection_unusable() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (send_stray, stray_wanted) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let answer = b"HTTP/1.1 204 No Content\r\n\r\n";
        tokio::io::AsyncWriteExt::write_all(&mut stream, answer)
            .await
            .unwrap();
        let _ = stray_wanted.await;
        let _ = tokio::io::AsyncWriteExt::write_all(&mut stream, b"forged").await;
        tokio::time::sleep(Duration::from_secs(30)).await;
    });
    let pool = pool(address, settings(1, 10, 5000));
    let mut lease = pool.checkout().await.unwrap();
    let mut answer = [0_u8; 64];
    let read = tokio::io::AsyncReadExt::read(lease.stream(), &mut answer)
        .await
        .unwrap();
    assert!(
        read > 0 && read < answer.len(),
        "a read that drains the socket"
    );
    let connection = lease.connection.as_ref().unwrap();
    assert!(connection.looks_open(), "drained, nothing since: open");
    send_stray.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !lease.connection.as_ref().unwrap().looks_open(),
        "the node's later bytes are seen"
    );
    lease.release();
    assert_eq!((pool.open(), pool.idle()), (0, 0), "closed, not kept");
}

/// A health check's connection takes a slot like any other: a free one, else an idle
/// connection lent with its slot, never one past the cap; none while requests hold every
/// slot. Its slot goes back to the first waiter.
#[tokio::test]
async fn a_check_takes_a_slot_and_never_goes_past_the_cap() {
    let (address, _) = holding_listener().await;
    let pool = pool(address, settings(2, 4, 5000));
    // A free slot: the idle connection stays.
    pool.checkout().await.unwrap().release();
    let slot = pool.check_slot().expect("a free slot");
    assert_eq!((pool.open(), pool.idle()), (2, 1));
    drop(slot);
    assert_eq!((pool.open(), pool.idle()), (1, 1));
    // At the cap with an idle connection: it is lent to the check, with its slot.
    let busy = pool.checkout().await.unwrap();
    let other = pool.checkout().await.unwrap();
    other.release();
    assert_eq!((pool.open(), pool.idle()), (2, 1));
    let slot = pool.check_slot().expect("an idle connection's slot");
    assert_eq!((pool.open(), pool.idle()), (2, 0));
    // Every slot held (a request and the check): no other check, and a request waits.
    assert!(pool.check_slot().is_none());
    let waiter = {
        let pool = Arc::clone(&pool);
        tokio::spawn(async move { pool.checkout().await.map(|lease| lease.is_reused()) })
    };
    while pool.queued() < 1 {
        tokio::task::yield_now().await;
    }
    drop(slot);
    assert_eq!(
        waiter.await.unwrap().ok(),
        Some(false),
        "the slot went to the waiter"
    );
    // The waiter's lease closed with its task: the request's slot is the one left.
    assert_eq!(pool.open(), 1);
    drop(busy);
    assert_eq!(pool.open(), 0);
}

/// A reload that lowers the cap applies it at once: idle connections past it close now,
/// busy ones as they come back, and a waiter is served only under the new cap. One that
/// raises it serves the waiting requests at once.
#[tokio::test]
async fn a_cap_lowered_or_raised_by_a_reload_holds_at_once() {
    let (address, _) = holding_listener().await;
    let pool = pool(address, settings(4, 10, 5000));
    let mut leases = Vec::new();
    for _ in 0..4 {
        leases.push(pool.checkout().await.unwrap());
    }
    leases.pop().unwrap().release();
    assert_eq!((pool.open(), pool.idle()), (4, 1));
    pool.update(settings(2, 10, 5000));
    // The idle one closed: three busy, past the cap of two.
    assert_eq!((pool.open(), pool.idle()), (3, 0));
    let waiter = {
        let pool = Arc::clone(&pool);
        tokio::spawn(async move { pool.checkout().await.map(Lease::release) })
    };
    while pool.queued() < 1 {
        tokio::task::yield_now().await;
    }
    // Given back past the cap: closed, not passed to the waiter.
    leases.pop().unwrap().release();
    assert_eq!((pool.open(), pool.idle(), pool.queued()), (2, 0, 1));
    // At the cap: the next one goes to the waiter.
    leases.pop().unwrap().release();
    waiter.await.unwrap().unwrap();
    assert_eq!((pool.open(), pool.idle(), pool.queued()), (2, 1, 0));

    // Raised while requests wait: they take the new slots without waiting for a release.
    let held = pool.checkout().await.unwrap();
    assert_eq!(pool.open(), 2);
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let pool = Arc::clone(&pool);
            tokio::spawn(async move { pool.checkout().await.map(|lease| lease.is_reused()) })
        })
        .collect();
    while pool.queued() < 2 {
        tokio::task::yield_now().await;
    }
    pool.update(settings(4, 10, 5000));
    for waiter in waiters {
        let reused = tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .expect("served without a release")
            .unwrap()
            .unwrap();
        assert!(!reused, "a new connection in a new slot");
    }
    drop((held, leases));
}

fn flow(last: u8) -> Flow {
    Flow::client(std::net::IpAddr::from([192, 0, 2, last]))
}

/// Queues one request of `flow` on `pool` (waiting until it is in the queue, or refused); the task
/// records `name` when granted, then gives the connection back.
async fn queue_one(
    pool: &Arc<NodeConnections>,
    flow: Flow,
    name: &'static str,
    order: &Arc<std::sync::Mutex<Vec<&'static str>>>,
) -> tokio::task::JoinHandle<Result<(), ErrorKind>> {
    // Each request that joins the queue takes the next waiter id.
    let before = pool.next_waiter.load(Ordering::SeqCst);
    let (pool_, order) = (Arc::clone(pool), Arc::clone(order));
    let task = tokio::spawn(async move {
        let lease = pool_
            .checkout_watching(flow, std::future::pending)
            .await
            .map_err(|error| error.kind())?;
        order.lock().unwrap().push(name);
        tokio::time::sleep(Duration::from_millis(2)).await;
        lease.release();
        Ok(())
    });
    while pool.next_waiter.load(Ordering::SeqCst) == before && !task.is_finished() {
        tokio::task::yield_now().await;
    }
    task
}

#[tokio::test]
async fn clients_take_turns_in_the_queue() {
    let (address, _) = holding_listener().await;
    let pool = pool(address, settings(1, 10, 5000));
    let held = pool.checkout().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiting = Vec::new();
    for (who, name) in [
        (1, "a1"),
        (1, "a2"),
        (1, "a3"),
        (2, "b1"),
        (3, "c1"),
        (2, "b2"),
    ] {
        waiting.push(queue_one(&pool, flow(who), name, &order).await);
    }
    assert_eq!(pool.queued(), 6);
    held.release();
    for task in waiting {
        task.await.unwrap().expect("served");
    }
    assert_eq!(*order.lock().unwrap(), ["a1", "b1", "c1", "a2", "b2", "a3"]);
    assert_eq!(
        pool.open(),
        1,
        "one connection carried every request in turn"
    );
}

#[tokio::test]
async fn a_full_queue_refuses_the_newest_request_of_the_client_with_most_waiting() {
    let (address, _) = holding_listener().await;
    let metrics = Metrics::new();
    let pool = NodeConnections::new(
        address,
        settings(1, 3, 5000),
        metrics.node("p", "n"),
        metrics.pool("p"),
    );
    let held = pool.checkout().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let a1 = queue_one(&pool, flow(1), "a1", &order).await;
    let a2 = queue_one(&pool, flow(1), "a2", &order).await;
    let a3 = queue_one(&pool, flow(1), "a3", &order).await;
    // Full: b's first request takes the place of a's newest.
    let b1 = queue_one(&pool, flow(2), "b1", &order).await;
    assert_eq!(a3.await.unwrap(), Err(ErrorKind::QueueFull));
    assert_eq!(pool.queued(), 3);
    // a (two waiting) is not longer than b would be with a second: the newcomer is refused.
    let b2 = queue_one(&pool, flow(2), "b2", &order).await;
    assert_eq!(b2.await.unwrap(), Err(ErrorKind::QueueFull));
    let a4 = queue_one(&pool, flow(1), "a4", &order).await;
    assert_eq!(a4.await.unwrap(), Err(ErrorKind::QueueFull));
    held.release();
    for task in [a1, a2, b1] {
        task.await.unwrap().expect("served");
    }
    assert_eq!(*order.lock().unwrap(), ["a1", "b1", "a2"]);
    let text = metrics.encode();
    assert!(
        text.contains("weir_queue_full_total{pool=\"p\"} 3"),
        "{text}"
    );
    assert!(text.contains("weir_queue_length{pool=\"p\"} 0"), "{text}");
    assert!(
        text.contains("weir_queue_timeouts_total{pool=\"p\"} 0"),
        "{text}"
    );
}

#[tokio::test]
async fn without_fair_queue_the_queue_is_first_come_first_served() {
    let (address, _) = holding_listener().await;
    let fifo = ConnectionSettings {
        fair_queue: false,
        ..settings(1, 3, 5000)
    };
    let pool = pool(address, fifo);
    let held = pool.checkout().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiting = Vec::new();
    for (who, name) in [(1, "a1"), (1, "a2"), (2, "b1")] {
        waiting.push(queue_one(&pool, flow(who), name, &order).await);
    }
    // Full, and no client is favoured: the newcomer is refused.
    let c1 = queue_one(&pool, flow(3), "c1", &order).await;
    assert_eq!(c1.await.unwrap(), Err(ErrorKind::QueueFull));
    held.release();
    for task in waiting {
        task.await.unwrap().expect("served");
    }
    assert_eq!(*order.lock().unwrap(), ["a1", "a2", "b1"]);
}

#[tokio::test]
async fn a_request_that_leaves_the_queue_loses_its_clients_turn_to_no_one() {
    let (address, _) = holding_listener().await;
    let pool = pool(address, settings(1, 10, 5000));
    let held = pool.checkout().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let a1 = queue_one(&pool, flow(1), "a1", &order).await;
    let b1 = queue_one(&pool, flow(2), "b1", &order).await;
    let a2 = queue_one(&pool, flow(1), "a2", &order).await;
    // b's only request gives up: b's flow leaves the round.
    b1.abort();
    let _ = b1.await;
    assert_eq!(pool.queued(), 2);
    let c1 = queue_one(&pool, flow(3), "c1", &order).await;
    held.release();
    for task in [a1, a2, c1] {
        task.await.unwrap().expect("served");
    }
    assert_eq!(*order.lock().unwrap(), ["a1", "c1", "a2"]);
}

#[tokio::test]
async fn a_withdrawn_node_sends_its_waiters_and_newcomers_elsewhere() {
    let (address, accepted) = holding_listener().await;
    let pool = pool(address, settings(1, 10, 5000));
    let held = pool.checkout().await.unwrap();
    let mut waiters = Vec::new();
    for n in 0..3 {
        let waiter_pool = Arc::clone(&pool);
        waiters.push(tokio::spawn(async move {
            waiter_pool.checkout().await.map(|_| ())
        }));
        while pool.queued() < n + 1 {
            tokio::task::yield_now().await;
        }
    }
    // Draining keeps the queue: the node finishes what it accepted.
    pool.set_reusable(false);
    assert_eq!(pool.queued(), 3);
    // Disabled (or removed): every waiter is told at once, and nothing was sent.
    pool.set_taking_requests(false);
    assert_eq!(pool.queued(), 0);
    for waiter in waiters {
        let error = tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("told at once, not at the queue timeout")
            .unwrap()
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::NoNodeAvailable);
        assert!(error.is_retry_safe());
    }
    let later = pool.checkout().await.unwrap_err();
    assert_eq!(later.kind(), ErrorKind::NoNodeAvailable);
    assert!(later.is_retry_safe());
    // The lease in flight finishes; its connection closes rather than serving anyone.
    held.release();
    assert_eq!(pool.open(), 0);
    // Enabled again, it takes requests.
    pool.set_reusable(true);
    pool.set_taking_requests(true);
    pool.checkout().await.unwrap().release();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}
