use std::sync::Arc;

use bytes::Bytes;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::date::UnixTime;
use crate::key::VarySpec;
use crate::object::{HeadBuilder, NewObject, ObjectBody, Rope};
use crate::policy::freshness::{Freshness, Timing};

fn freshness() -> Freshness {
    Freshness {
        timing: Timing {
            request_time: UnixTime(0),
            response_time: UnixTime(0),
            date: UnixTime(0),
            age_value: 0,
        },
        lifetime: 60,
        stale_while_revalidate: 0,
        stale_if_error: 0,
        no_cache: false,
        forbids_stale: false,
    }
}

fn object(key: &str, secondary: &str, size: usize, tags: &[&str]) -> NewObject {
    let mut head = HeadBuilder::default();
    head.push(b"Content-Type", b"text/plain");
    NewObject {
        primary: Arc::from(key.as_bytes()),
        secondary: secondary.as_bytes().into(),
        head: head.finish(200),
        freshness: freshness(),
        body: ObjectBody::Complete(Rope::new(vec![Bytes::from(vec![b'x'; size])])),
        tags: tags.iter().map(|tag| tag.as_bytes().into()).collect(),
        stored_at: UnixTime(0),
    }
}

fn insert(store: &Store, key: &str, size: usize) -> Inserted {
    store.insert(
        store.hash(key.as_bytes()),
        VarySpec::none(),
        object(key, "", size, &[]),
        0,
    )
}

fn get(store: &Store, key: &str) -> Option<Arc<Object>> {
    let mut scratch = Vec::new();
    match store.find(
        store.hash(key.as_bytes()),
        key.as_bytes(),
        |_, _| {},
        &mut scratch,
    ) {
        Found::Object(object) => Some(object),
        _ => None,
    }
}

/// The charges of every object found by walking the store.
fn walked_bytes(store: &Store) -> (usize, usize, u64) {
    let (mut charged, mut objects, mut body) = (0, 0, 0);
    store.for_each(|object| {
        charged += object.charge();
        objects += 1;
        body += object.body().map_or(0, Rope::len);
    });
    (charged, objects, body)
}

#[test]
fn never_holds_more_than_its_bound() {
    let capacity = 4 << 20;
    let store = Store::new(capacity, 64 << 10);
    assert!(store.shard_count() > 1);
    let mut rng = SmallRng::seed_from_u64(12);
    let mut evicted = 0;
    for index in 0..20_000 {
        let size = rng.random_range(0..64 << 10);
        evicted += insert(&store, &format!("http://h/{index}"), size).evicted;
        if index % 97 == 0 {
            // Some objects are hit again, so that both FIFOs are exercised.
            get(&store, &format!("http://h/{}", rng.random_range(0..=index)));
        }
        let stats = store.stats();
        assert!(
            stats.bytes <= capacity,
            "{} bytes held, bound {capacity}",
            stats.bytes
        );
    }
    let stats = store.stats();
    let (charged, objects, body) = walked_bytes(&store);
    assert_eq!(
        (charged, objects),
        (stats.bytes, stats.objects),
        "accounting matches the contents"
    );
    // What the objects really hold (bodies and heads) is within the bound + 5 %.
    assert!(body as usize <= capacity + capacity / 20);
    // Full to within the largest object per shard.
    assert!(
        stats.bytes > capacity - store.shard_count() * (64 << 10),
        "{stats:?}"
    );
    assert_eq!(stats.evictions, evicted);
    assert_eq!(stats.objects as u64 + evicted, 20_000);
}

#[test]
fn a_hot_set_survives_a_scan() {
    // One shard of 1 MiB holds about 100 objects of 10 KiB.
    let store = Store::new(1 << 20, 256 << 10);
    let hot: Vec<String> = (0..30).map(|i| format!("http://h/hot/{i}")).collect();
    for key in &hot {
        insert(&store, key, 10_000);
    }
    for _ in 0..3 {
        for key in &hot {
            assert!(get(&store, key).is_some());
        }
    }
    // A one-pass scan of many cold keys, each seen once.
    for index in 0..10_000 {
        insert(&store, &format!("http://h/cold/{index}"), 10_000);
    }
    let survivors = hot.iter().filter(|key| get(&store, key).is_some()).count();
    assert_eq!(survivors, hot.len(), "the scan evicted hot objects");
    // And the cold ones did churn through.
    assert!(get(&store, "http://h/cold/0").is_none());
    assert!(store.stats().evictions > 9_000);
}

#[test]
fn a_returning_key_goes_to_main() {
    let store = Store::new(1 << 20, 256 << 10);
    insert(&store, "http://h/again", 10_000);
    // Enough to evict it (about 97 fit), few enough that its ghost is still remembered
    // (as many ghosts as objects).
    for index in 0..150 {
        insert(&store, &format!("http://h/cold/{index}"), 10_000);
    }
    assert!(
        get(&store, "http://h/again").is_none(),
        "evicted once, into the ghost FIFO"
    );
    let again = insert(&store, "http://h/again", 10_000).object.unwrap();
    assert!(again.in_main.load(Ordering::Relaxed));
}

#[test]
fn variants_replace_and_vary_changes_drop_them() {
    let store = Store::new(1 << 20, 64 << 10);
    let key = "http://h/v";
    let hash = store.hash(key.as_bytes());
    let spec =
        Arc::new(VarySpec::from_values([&b"Accept-Language"[..]].into_iter(), false).unwrap());
    store.insert(hash, Arc::clone(&spec), object(key, "en", 10, &[]), 0);
    store.insert(hash, Arc::clone(&spec), object(key, "fr", 20, &[]), 0);
    store.insert(hash, Arc::clone(&spec), object(key, "fr", 30, &[]), 0);
    let find = |secondary: &'static str| {
        let mut scratch = Vec::new();
        match store.find(
            hash,
            key.as_bytes(),
            |_, out| out.extend_from_slice(secondary.as_bytes()),
            &mut scratch,
        ) {
            Found::Object(object) => Some(object.body().unwrap().len()),
            Found::NoVariant => None,
            Found::Nothing => Some(u64::MAX),
        }
    };
    assert_eq!(find("en"), Some(10));
    assert_eq!(find("fr"), Some(30));
    assert_eq!(find("de"), None);
    assert_eq!(store.stats().objects, 2);
    // The node changed its Vary: the old variants go.
    store.insert(hash, VarySpec::none(), object(key, "", 40, &[]), 0);
    assert_eq!(store.stats().objects, 1);
    assert_eq!(find(""), Some(40));
    assert_eq!(store.remove_primary(key.as_bytes()), 1);
    assert_eq!(find(""), Some(u64::MAX));
    assert_eq!(
        store.stats(),
        StoreStats {
            evictions: 0,
            ..StoreStats::default()
        }
    );
}

/// A node that compresses for some clients and sends identity to others, with
/// `Vary: Accept-Encoding` on both, behind weir's compression: its own encodings are keyed
/// by the set of codings a client accepts, weir's by the coding weir picks. Both kinds
/// stay side by side instead of each insert dropping the other's.
#[test]
fn variants_keyed_by_the_node_and_by_weir_stay_side_by_side() {
    use crate::key::EncodingKey;
    let store = Store::new(1 << 20, 64 << 10);
    let key = "http://h/mixed";
    let hash = store.hash(key.as_bytes());
    let by_node =
        Arc::new(VarySpec::from_values([&b"Accept-Encoding"[..]].into_iter(), false).unwrap());
    let by_weir =
        Arc::new(VarySpec::from_values([&b"Accept-Encoding"[..]].into_iter(), true).unwrap());
    assert_ne!(by_node, by_weir);
    store.insert(hash, Arc::clone(&by_node), object(key, "7", 10, &[]), 0);
    store.insert(
        hash,
        Arc::clone(&by_weir),
        object(key, "identity", 20, &[]),
        0,
    );
    store.insert(hash, Arc::clone(&by_node), object(key, "7", 30, &[]), 0);
    assert_eq!(store.stats().objects, 2);
    // Each variant is found with the key its own spec makes for the request.
    let find = |accepted: &'static str, chosen: &'static str| {
        let mut scratch = Vec::new();
        match store.find(
            hash,
            key.as_bytes(),
            |spec, out| match spec.encoding {
                EncodingKey::Chosen => out.extend_from_slice(chosen.as_bytes()),
                _ => out.extend_from_slice(accepted.as_bytes()),
            },
            &mut scratch,
        ) {
            Found::Object(object) => Some(object.body().unwrap().len()),
            _ => None,
        }
    };
    assert_eq!(find("7", "gzip"), Some(30));
    assert_eq!(find("0", "identity"), Some(20));
    assert_eq!(find("0", "gzip"), None);
    // A request both select gets the newest.
    assert_eq!(find("7", "identity"), Some(30));
    // The node varies on something else now: every old variant goes.
    let other =
        Arc::new(VarySpec::from_values([&b"Accept-Language"[..]].into_iter(), false).unwrap());
    store.insert(hash, other, object(key, "en", 40, &[]), 0);
    assert_eq!(store.stats().objects, 1);
}

#[test]
fn tags_and_predicates_remove_objects() {
    let store = Store::new(1 << 20, 64 << 10);
    for (key, tags) in [
        ("http://h/a", &["red", "blue"][..]),
        ("http://h/b", &["red"]),
        ("http://h/c", &[]),
    ] {
        store.insert(
            store.hash(key.as_bytes()),
            VarySpec::none(),
            object(key, "", 10, tags),
            0,
        );
    }
    assert_eq!(store.remove_tagged(b"red"), 2);
    assert_eq!(store.remove_tagged(b"red"), 0);
    assert_eq!(
        store.remove_tagged(b"blue"),
        0,
        "the tag index forgets removed objects"
    );
    assert!(get(&store, "http://h/c").is_some());
    assert_eq!(
        store.remove_where(|object| object.primary_key().ends_with(b"/c")),
        1
    );
    assert_eq!(store.stats().objects, 0);
    assert_eq!(store.stats().bytes, 0);
}

#[test]
fn objects_larger_than_a_shard_are_refused() {
    let store = Store::new(1 << 20, 256 << 10);
    let inserted = insert(&store, "http://h/huge", 2 << 20);
    assert!(inserted.object.is_none());
    assert_eq!(store.stats().objects, 0);
}

#[test]
fn threads_share_the_store() {
    let store = Arc::new(Store::new(2 << 20, 16 << 10));
    let threads: Vec<_> = (0..4)
        .map(|thread| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(thread);
                for index in 0..5_000 {
                    let key = format!("http://h/{}", rng.random_range(0..2_000));
                    if index % 3 == 0 {
                        insert(&store, &key, rng.random_range(0..16 << 10));
                    } else {
                        get(&store, &key);
                    }
                    if index % 1_000 == 0 {
                        store.remove_where(|object| object.primary_key().ends_with(b"7"));
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let stats = store.stats();
    assert!(stats.bytes <= store.capacity());
    assert_eq!(walked_bytes(&store).0, stats.bytes);
}

/// A URL keeps at most MAX_VARIANTS variants, the oldest stored going first (counted as
/// evictions), so that a lookup's scan of them stays short whatever clients send.
#[test]
fn a_url_keeps_a_bounded_number_of_variants() {
    let store = Store::new(64 << 20, 64 << 10);
    let key = "http://example.com/v";
    let hash = store.hash(key.as_bytes());
    let vary =
        Arc::new(VarySpec::from_values([&b"User-Agent"[..]].into_iter(), false).expect("a spec"));
    let variant = |i: usize| format!("=agent-{i}\n");
    for i in 0..MAX_VARIANTS + 10 {
        store.insert(
            hash,
            Arc::clone(&vary),
            object(key, &variant(i), 100, &[]),
            0,
        );
    }
    let find = |i: usize| {
        let mut scratch = Vec::new();
        let wanted = variant(i);
        matches!(
            store.find(
                hash,
                key.as_bytes(),
                |_, out| out.extend_from_slice(wanted.as_bytes()),
                &mut scratch,
            ),
            Found::Object(_)
        )
    };
    assert!((0..10).all(|i| !find(i)), "the oldest ten were kept");
    assert!((10..MAX_VARIANTS + 10).all(find));
    let stats = store.stats();
    assert_eq!((stats.objects, stats.evictions), (MAX_VARIANTS, 10));
}
