//! A stored response: its head (the fields as they will be sent, in one
//! buffer), its freshness, and its body as shared `Bytes` chunks, complete or
//! still being filled. A hit clones an `Arc` and the chunks' handles; no body
//! byte is copied.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use bytes::{Bytes, BytesMut};
use tokio::sync::watch;

use crate::date::{UnixTime, parse_http_date};
use crate::key::VarySpec;
use crate::policy::freshness::Freshness;
use crate::view::{ResponseView, list_elements};

/// Header fields never stored (RFC 9111 §3.1): hop-by-hop and framing
/// fields, and `Age`, which is computed when served.
const NOT_STORED: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "transfer-encoding",
    "upgrade",
    "trailer",
    "proxy-authenticate",
    "proxy-authentication-info",
    "content-length",
    "age",
];

/// A response head as stored: status and `Name: value\r\n` lines in one buffer.
#[derive(Debug, Clone)]
pub struct StoredHead {
    status: u16,
    /// Every stored field line, `Name: value\r\n`.
    lines: Bytes,
    /// (name start, name end, value start, value end) of each field in `lines`.
    spans: Box<[[u32; 4]]>,
}

/// A list of fields being built into a [`StoredHead`].
#[derive(Debug, Default)]
pub struct HeadBuilder {
    lines: BytesMut,
    spans: Vec<[u32; 4]>,
}

impl HeadBuilder {
    /// Appends a header field.
    pub fn push(&mut self, name: &[u8], value: &[u8]) {
        let start = self.lines.len() as u32;
        self.lines.extend_from_slice(name);
        self.lines.extend_from_slice(b": ");
        self.lines.extend_from_slice(value);
        self.lines.extend_from_slice(b"\r\n");
        let name_end = start + name.len() as u32;
        let value_start = name_end + 2;
        self.spans.push([
            start,
            name_end,
            value_start,
            value_start + value.len() as u32,
        ]);
    }

    /// The stored head with status `status` and the fields pushed.
    pub fn finish(self, status: u16) -> StoredHead {
        // A copy of exactly its length: the buffer grew by doubling, and a stored head
        // holds what it keeps for as long as the object lives.
        StoredHead {
            status,
            lines: Bytes::copy_from_slice(&self.lines),
            spans: self.spans.into_boxed_slice(),
        }
    }
}

impl StoredHead {
    /// The fields of `response` worth storing: hop-by-hop fields, those its
    /// `Connection` names, framing and `Age` left out, and any field for which
    /// `drop` says so; then the relaying hop's own (`ResponseView::hop_fields`).
    pub fn from_response(response: &impl ResponseView, drop: impl Fn(&[u8]) -> bool) -> StoredHead {
        let fields = response
            .headers()
            .map(|(name, value)| (name, Cow::Borrowed(value)));
        StoredHead::from_fields(response, fields, drop)
    }

    /// Like [`StoredHead::from_response`], with the fields given (`response`'s
    /// after edits such as compression's) and `response` read for its status
    /// and `Connection`.
    pub fn from_fields<'a>(
        response: &impl ResponseView,
        fields: impl Iterator<Item = (&'a [u8], Cow<'a, [u8]>)>,
        drop: impl Fn(&[u8]) -> bool,
    ) -> StoredHead {
        let connection_names = weir_http::FieldNames::listed(response.header_values("connection"));
        let mut builder = HeadBuilder::default();
        for (name, value) in fields {
            let hop = NOT_STORED
                .iter()
                .any(|skip| name.eq_ignore_ascii_case(skip.as_bytes()))
                || connection_names.contains(name);
            if !hop && !drop(name) {
                builder.push(name, &value);
            }
        }
        for (name, value) in response.hop_fields() {
            if !drop(name) {
                builder.push(name, value);
            }
        }
        builder.finish(response.status())
    }

    /// The stored response's status.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The stored field lines, ready to follow a status line on HTTP/1.1.
    pub fn lines(&self) -> &Bytes {
        &self.lines
    }

    /// The stored header fields in order, names as received.
    pub fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.spans
            .iter()
            .map(|[name_start, name_end, value_start, value_end]| {
                (
                    &self.lines[*name_start as usize..*name_end as usize],
                    &self.lines[*value_start as usize..*value_end as usize],
                )
            })
    }

    /// Bytes held, for the store's accounting.
    pub fn size(&self) -> usize {
        self.lines.len() + self.spans.len() * 16
    }
}

impl ResponseView for StoredHead {
    fn status(&self) -> u16 {
        self.status
    }

    fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        StoredHead::headers(self)
    }
}

/// A body: one or more shared chunks.
#[derive(Debug, Clone, Default)]
pub struct Rope {
    chunks: Arc<[Bytes]>,
    len: u64,
}

impl Rope {
    /// A rope of `chunks`, in order.
    pub fn new(chunks: Vec<Bytes>) -> Rope {
        let len = chunks.iter().map(|chunk| chunk.len() as u64).sum();
        Rope {
            chunks: chunks.into(),
            len,
        }
    }

    /// Total bytes in all chunks.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the rope holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The chunks, in order.
    pub fn chunks(&self) -> &[Bytes] {
        &self.chunks
    }

    /// The chunks covering `start..end` (byte offsets), sliced without copying.
    pub fn slice(&self, start: u64, end: u64) -> Vec<Bytes> {
        let mut out = Vec::new();
        let mut offset = 0u64;
        for chunk in self.chunks.iter() {
            let chunk_end = offset + chunk.len() as u64;
            if chunk_end > start && offset < end {
                let from = start.saturating_sub(offset) as usize;
                let to = (end.min(chunk_end) - offset) as usize;
                out.push(chunk.slice(from..to));
            }
            offset = chunk_end;
            if offset >= end {
                break;
            }
        }
        out
    }
}

/// How a fill ended, for readers of a growing body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FillState {
    /// The fill goes on; more chunks may come.
    Filling,
    /// The whole body arrived.
    Complete,
    /// The node failed or the body broke a limit: readers past the start get
    /// an error and must close their connection, as for a truncated response.
    Aborted,
}

/// A body that is still arriving from the node and that any number of
/// readers follow at their own pace. The writer never waits for a reader.
#[derive(Debug)]
pub struct GrowingBody {
    chunks: Mutex<Vec<Bytes>>,
    progress: watch::Sender<(usize, FillState)>,
    /// Its readers, and the clients about to read it ([`Follower`]).
    followers: AtomicUsize,
    /// Woken when the last follower leaves, or when the object leaves the store: its fill
    /// may be read for no one ([`crate::fill::OrphanWatch`]).
    orphaning: tokio::sync::Notify,
}

/// One who follows a [`GrowingBody`]: a reader, or the client of the request that fills it
/// from before its reader exists ([`crate::fill::Fill::follower`]). Counted while it lives.
#[derive(Debug)]
pub struct Follower(Arc<GrowingBody>);

impl Drop for Follower {
    fn drop(&mut self) {
        if self.0.followers.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.orphaning.notify_waiters();
        }
    }
}

/// The body was aborted while this reader was following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the cached body was aborted while being filled")]
pub struct BodyAborted;

/// One reader of a [`GrowingBody`].
#[derive(Debug)]
pub struct BodyReader {
    body: Arc<GrowingBody>,
    _following: Follower,
    progress: watch::Receiver<(usize, FillState)>,
    next: usize,
    /// The bytes this reader gives, `start..end` of the body (a range asked of an object
    /// still filling); the whole body when `None`.
    window: Option<(u64, u64)>,
    /// The body's bytes before the next chunk.
    position: u64,
}

impl GrowingBody {
    /// An empty body that is filling.
    pub fn new() -> Arc<GrowingBody> {
        let (progress, _) = watch::channel((0, FillState::Filling));
        Arc::new(GrowingBody {
            chunks: Mutex::new(Vec::new()),
            progress,
            followers: AtomicUsize::new(0),
            orphaning: tokio::sync::Notify::new(),
        })
    }

    /// Appends a chunk and wakes the readers.
    pub fn push(&self, chunk: Bytes) {
        let count = {
            let mut chunks = self.lock();
            chunks.push(chunk);
            chunks.len()
        };
        self.progress.send_replace((count, FillState::Filling));
    }

    /// Marks the body complete and returns it whole.
    pub fn complete(&self) -> Rope {
        let chunks = self.lock().clone();
        self.progress
            .send_replace((chunks.len(), FillState::Complete));
        Rope::new(chunks)
    }

    /// Ends the fill without the whole body; readers see `Aborted`.
    pub fn abort(&self) {
        let count = self.lock().len();
        self.progress.send_replace((count, FillState::Aborted));
    }

    /// Whether anyone follows it now (a reader, or a client about to read it).
    pub(crate) fn is_followed(&self) -> bool {
        self.followers.load(Ordering::Acquire) > 0
    }

    /// A follower until dropped ([`Follower`]).
    pub(crate) fn follower(self: &Arc<Self>) -> Follower {
        self.followers.fetch_add(1, Ordering::AcqRel);
        Follower(Arc::clone(self))
    }

    /// What [`GrowingBody::orphaning`] wakes.
    pub(crate) fn orphaning(&self) -> &tokio::sync::Notify {
        &self.orphaning
    }

    /// Whether the fill goes on, completed or was aborted.
    pub fn state(&self) -> FillState {
        self.progress.borrow().1
    }

    /// A reader from the first chunk, independent of other readers.
    pub fn reader(self: &Arc<Self>) -> BodyReader {
        BodyReader {
            body: Arc::clone(self),
            _following: self.follower(),
            progress: self.progress.subscribe(),
            next: 0,
            window: None,
            position: 0,
        }
    }

    /// A reader of the body's bytes `start..end` only: it ends once it has given them,
    /// whether or not the fill has finished.
    pub(crate) fn range(self: &Arc<Self>, start: u64, end: u64) -> BodyReader {
        BodyReader {
            window: Some((start, end)),
            ..self.reader()
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Bytes>> {
        // Pushing a Bytes cannot leave the vector half-changed.
        self.chunks.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl BodyReader {
    /// The next chunk, waiting for the writer if needed; `None` at the end (of the body,
    /// or of this reader's range).
    pub async fn next(&mut self) -> Result<Option<Bytes>, BodyAborted> {
        let Some((start, end)) = self.window else {
            return self.next_chunk().await;
        };
        loop {
            if self.position >= end {
                return Ok(None);
            }
            let Some(chunk) = self.next_chunk().await? else {
                return Ok(None);
            };
            let at = self.position;
            self.position += chunk.len() as u64;
            if self.position <= start {
                continue;
            }
            // Both bounds fall within this chunk's length, so the casts cannot truncate.
            let from = start.saturating_sub(at) as usize;
            let to = (end - at).min(chunk.len() as u64) as usize;
            return Ok(Some(chunk.slice(from..to)));
        }
    }

    /// The body's next chunk as it was pushed.
    async fn next_chunk(&mut self) -> Result<Option<Bytes>, BodyAborted> {
        loop {
            let state = {
                let (count, state) = *self.progress.borrow_and_update();
                if self.next < count {
                    let chunk = self.body.lock().get(self.next).cloned();
                    self.next += 1;
                    return Ok(chunk);
                }
                state
            };
            match state {
                FillState::Complete => return Ok(None),
                FillState::Aborted => return Err(BodyAborted),
                FillState::Filling => {
                    if self.progress.changed().await.is_err() {
                        // The writer is gone without finishing.
                        return Err(BodyAborted);
                    }
                }
            }
        }
    }
}

/// A stored response and the bookkeeping the store keeps on it.
#[derive(Debug)]
pub struct Object {
    /// Unique for the store's lifetime.
    pub(crate) id: u64,
    /// The store's hash of the primary key.
    pub(crate) hash: u64,
    pub(crate) primary: Arc<[u8]>,
    pub(crate) secondary: Box<[u8]>,
    /// What the response varies on: how `secondary` was made from its request, and how a
    /// request's key is made to find it.
    pub(crate) vary: Arc<VarySpec>,
    /// The stored response head.
    pub head: StoredHead,
    /// When it was stored and how long it stays fresh.
    pub freshness: Freshness,
    /// Set once the body is whole.
    complete: OnceLock<Rope>,
    /// While filling: the body being received (let go once complete: its channel and
    /// chunk list would cost a small object more than its body).
    growing: Mutex<Option<Arc<GrowingBody>>>,
    /// The body's length when known in advance (`Content-Length` of a body stored as
    /// received; not of one compressed on its way, whose length is known at its end).
    pub(crate) declared_length: Option<u64>,
    /// The body bytes charged to the store: the declared length, or for a body compressed
    /// on its way the most it may take; the actual length once complete.
    reserved: u64,
    /// `Surrogate-Key` and `Cache-Tag` values.
    pub(crate) tags: Box<[Box<[u8]>]>,
    /// Bytes charged to the store's bound (settled when a compressed fill ends).
    pub(crate) charge: AtomicUsize,
    /// S3-FIFO access count (0–3).
    pub(crate) frequency: AtomicU8,
    /// In the store's main FIFO (else its small one).
    pub(crate) in_main: AtomicBool,
    pub(crate) removed: AtomicBool,
    /// Sequence of the newest ban this object is known not to match.
    pub(crate) ban_checked: AtomicU64,
    pub(crate) stored_at: UnixTime,
    /// `Last-Modified`, parsed once.
    last_modified: Option<UnixTime>,
}

/// Fixed bytes charged per object besides its head, body, key and tags: the object itself
/// (312 bytes and its `Arc`'s counts), its head's field spans, its body's chunk list, its
/// entry in the store's index, its FIFO and ghost entries, and the allocator's rounding of
/// each. A small object holds about 580 bytes besides those it is charged for
/// (`small_cached_objects_hold_no_more_than_they_are_charged` in
/// crates/weir-proxy/tests/idle_memory.rs); the rest covers the index's and the queues'
/// slack after they grow, and the ghosts of a cache that evicts.
pub const OBJECT_OVERHEAD: usize = 704;

/// What `Object::new` needs.
#[derive(Debug)]
pub struct NewObject {
    /// The primary key (method, scheme, authority, path and query).
    pub primary: Arc<[u8]>,
    /// The secondary key: the request's values of the fields the response varies on.
    pub secondary: Box<[u8]>,
    /// The response head to store.
    pub head: StoredHead,
    /// When it was received and how long it stays fresh.
    pub freshness: Freshness,
    /// The body, whole or still arriving.
    pub body: ObjectBody,
    /// Tags for purging by tag.
    pub tags: Box<[Box<[u8]>]>,
    /// When the object is stored.
    pub stored_at: UnixTime,
}

/// A new object's body.
#[derive(Debug)]
pub enum ObjectBody {
    /// The whole body.
    Complete(Rope),
    /// Still arriving: the body, the bytes reserved for it in the store, and its length
    /// when known in advance (`None` for a body compressed on its way).
    Growing(Arc<GrowingBody>, u64, Option<u64>),
}

impl Object {
    pub(crate) fn new(
        id: u64,
        hash: u64,
        (ban_sequence, vary): (u64, Arc<VarySpec>),
        new: NewObject,
    ) -> Object {
        let last_modified = new.head.header("last-modified").and_then(parse_http_date);
        let (complete, growing, declared_length, body_len) = match new.body {
            ObjectBody::Complete(rope) => {
                let len = rope.len();
                (OnceLock::from(rope), None, Some(len), len)
            }
            ObjectBody::Growing(body, reserve, length) => {
                (OnceLock::new(), Some(body), length, reserve)
            }
        };
        let charge = OBJECT_OVERHEAD
            + new.head.size()
            + new.primary.len()
            + new.secondary.len()
            + new.tags.iter().map(|tag| tag.len() + 16).sum::<usize>()
            + usize::try_from(body_len).unwrap_or(usize::MAX);
        Object {
            id,
            hash,
            primary: new.primary,
            secondary: new.secondary,
            vary,
            head: new.head,
            freshness: new.freshness,
            complete,
            growing: Mutex::new(growing),
            declared_length,
            reserved: body_len,
            tags: new.tags,
            charge: AtomicUsize::new(charge),
            frequency: AtomicU8::new(0),
            in_main: AtomicBool::new(false),
            removed: AtomicBool::new(false),
            ban_checked: AtomicU64::new(ban_sequence),
            stored_at: new.stored_at,
            last_modified,
        }
    }

    /// The primary key (`scheme://authority/path?query`).
    pub fn primary_key(&self) -> &[u8] {
        &self.primary
    }

    /// The whole body, once it has arrived.
    pub fn body(&self) -> Option<&Rope> {
        self.complete.get()
    }

    /// The body still arriving, while it is.
    pub fn growing(&self) -> Option<Arc<GrowingBody>> {
        match self.complete.get() {
            Some(_) => None,
            None => self
                .growing
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }

    /// The body length: known once complete, or declared in advance.
    pub fn body_length(&self) -> Option<u64> {
        self.complete.get().map(Rope::len).or(self.declared_length)
    }

    /// Records the body as whole (a growing body that finished).
    pub(crate) fn set_complete(&self, rope: Rope) {
        // Only the fill that owns this object completes it, once.
        let _ = self.complete.set(rope);
        // Readers that follow it hold their own reference.
        self.growing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }

    /// The stored `ETag`, if any.
    pub fn etag(&self) -> Option<&[u8]> {
        self.head.header("etag")
    }

    /// The stored `Last-Modified`, when it is a valid HTTP date.
    pub fn last_modified(&self) -> Option<UnixTime> {
        self.last_modified
    }

    /// When it was stored (or last refreshed by a 304).
    pub fn stored_at(&self) -> UnixTime {
        self.stored_at
    }

    /// Bytes the object counts against the store's size (keys, head and body).
    pub fn charge(&self) -> usize {
        self.charge.load(Ordering::Relaxed)
    }

    /// The charge with the body counted at `body_length` bytes instead of
    /// the bytes reserved for it.
    pub(crate) fn charge_for(&self, body_length: u64) -> usize {
        let reserved = usize::try_from(self.reserved).unwrap_or(usize::MAX);
        let body = usize::try_from(body_length).unwrap_or(usize::MAX);
        self.charge() - reserved.min(self.charge()) + body
    }

    /// The object's purge tags.
    pub fn tags(&self) -> impl Iterator<Item = &[u8]> {
        self.tags.iter().map(|tag| &tag[..])
    }

    /// Counts a use for the eviction policy (saturating at 3).
    pub(crate) fn touch(&self) {
        let seen = self.frequency.load(Ordering::Relaxed);
        if seen < 3 {
            self.frequency.store(seen + 1, Ordering::Relaxed);
        }
    }

    pub(crate) fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// Tells a fill still writing its body that it left the store ([`Object::is_removed`]).
    pub(crate) fn left_store(&self) {
        let growing = self.growing.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(body) = growing.as_ref() {
            body.orphaning.notify_waiters();
        }
    }
}

/// The tags a response carries: `Surrogate-Key` (space-separated) and
/// `Cache-Tag` (comma-separated), each kept once.
pub fn response_tags(response: &impl ResponseView) -> Box<[Box<[u8]>]> {
    let mut tags: Vec<Box<[u8]>> = Vec::new();
    let mut add = |tag: &[u8]| {
        if !tag.is_empty() && tag.len() <= 1024 && !tags.iter().any(|known| **known == *tag) {
            tags.push(tag.into());
        }
    };
    for value in response.header_values("surrogate-key") {
        value
            .split(|b| *b == b' ' || *b == b'\t')
            .for_each(&mut add);
    }
    for tag in list_elements(response.header_values("cache-tag")) {
        add(tag);
    }
    tags.into_boxed_slice()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Resp;

    #[test]
    fn stored_heads_leave_out_hop_by_hop_fields() {
        let response = Resp::new(200)
            .header("Connection", "close, X-Hop")
            .header("X-Hop", "1")
            .header("Keep-Alive", "timeout=5")
            .header("Transfer-Encoding", "chunked")
            .header("Content-Length", "5")
            .header("Age", "3")
            .header("ETag", "\"v1\"")
            .header("Set-Cookie", "a=b")
            .header("Content-Type", "text/plain");
        let head =
            StoredHead::from_response(&response, |name| name.eq_ignore_ascii_case(b"set-cookie"));
        let names: Vec<&[u8]> = head.headers().map(|(name, _)| name).collect();
        assert_eq!(names, [&b"ETag"[..], b"Content-Type"]);
        assert_eq!(
            &head.lines()[..],
            b"ETag: \"v1\"\r\nContent-Type: text/plain\r\n"
        );
        assert_eq!(ResponseView::header(&head, "etag"), Some(&b"\"v1\""[..]));
    }

    #[test]
    fn rope_slices_across_chunks() {
        let rope = Rope::new(vec![
            Bytes::from_static(b"abc"),
            Bytes::from_static(b"defg"),
            Bytes::from_static(b"h"),
        ]);
        assert_eq!(rope.len(), 8);
        let joined = |parts: Vec<Bytes>| parts.concat();
        assert_eq!(joined(rope.slice(0, 8)), b"abcdefgh");
        assert_eq!(joined(rope.slice(2, 5)), b"cde");
        assert_eq!(joined(rope.slice(3, 7)), b"defg");
        assert_eq!(joined(rope.slice(7, 8)), b"h");
        assert!(rope.slice(8, 8).is_empty());
    }

    #[test]
    fn tags_from_both_fields() {
        let response = Resp::new(200)
            .header("Surrogate-Key", "a  b a")
            .header("Cache-Tag", "c, b,d");
        let tags = response_tags(&response);
        let tags: Vec<&[u8]> = tags.iter().map(|tag| &tag[..]).collect();
        assert_eq!(tags, [&b"a"[..], b"b", b"c", b"d"]);
    }

    #[tokio::test]
    async fn readers_follow_a_growing_body_at_their_own_pace() {
        let body = GrowingBody::new();
        let mut early = body.reader();
        body.push(Bytes::from_static(b"one"));
        body.push(Bytes::from_static(b"two"));
        assert_eq!(early.next().await, Ok(Some(Bytes::from_static(b"one"))));
        let mut late = body.reader();
        let waiting = tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some(chunk) = late.next().await.unwrap() {
                seen.extend_from_slice(&chunk);
            }
            seen
        });
        body.push(Bytes::from_static(b"three"));
        let rope = body.complete();
        assert_eq!(rope.len(), 11);
        assert_eq!(waiting.await.unwrap(), b"onetwothree");
        assert_eq!(early.next().await, Ok(Some(Bytes::from_static(b"two"))));
        assert_eq!(early.next().await, Ok(Some(Bytes::from_static(b"three"))));
        assert_eq!(early.next().await, Ok(None));
    }

    #[tokio::test]
    async fn readers_see_an_abort() {
        let body = GrowingBody::new();
        let mut reader = body.reader();
        body.push(Bytes::from_static(b"x"));
        body.abort();
        assert_eq!(reader.next().await, Ok(Some(Bytes::from_static(b"x"))));
        assert_eq!(reader.next().await, Err(BodyAborted));
    }
}
