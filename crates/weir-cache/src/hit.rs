//! A response answered from the cache: the stored object, what the client's
//! request makes of it (200, 304, 206, 412, 416; HEAD without a body) and its
//! age, with a writer for HTTP/1.1 heads. An HTTP/2 codec reads the same
//! accessors.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use weir_http::HeaderEdit;

use crate::date::UnixTime;
use crate::object::{BodyReader, Object, Rope};
use crate::policy::conditional::{self, Precondition, in_not_modified};
use crate::policy::range::{self, RangeAnswer};
use crate::view::{RequestView, ResponseView};

/// How the response was produced, for the access log and the debug header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStatus {
    /// Fresh from the cache.
    Hit,
    /// Fetched from a node (and stored, if storable).
    Miss,
    /// Stale from the cache: within `stale-while-revalidate` or the client's `max-stale`.
    Stale,
    /// Stale from the cache because the node failed (`stale-if-error`).
    StaleIfError,
    /// Validated with the node (304) and served from the cache.
    Revalidated,
    /// Stale, and replaced by the node's new response.
    Expired,
    /// Not cacheable: the node answered and nothing was stored.
    Pass,
}

/// What the cache answers, as decided from the client's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The stored response as it is.
    Full,
    /// 304 Not Modified: the client's validators match.
    NotModified,
    /// 206 Partial Content for one range of the body.
    Partial {
        /// First byte of the range.
        start: u64,
        /// End of the range, exclusive.
        end: u64,
    },
    /// 412 Precondition Failed: an `If-Match` or `If-Unmodified-Since` does not hold.
    PreconditionFailed,
    /// 416 Range Not Satisfiable.
    RangeNotSatisfiable,
}

/// A response to send from the cache.
#[derive(Debug, Clone)]
pub struct Hit {
    object: Arc<Object>,
    answer: Answer,
    head_only: bool,
    age: u64,
    status: CacheStatus,
    /// Field lines for this answer only, after the stored ones (the `Set-Cookie` of the
    /// response that filled the object, to the client that asked for it).
    own_lines: Option<Box<[u8]>>,
}

/// The body to send with a hit.
#[derive(Debug)]
pub enum HitBody {
    /// No body (a HEAD request, a 204 or 304, an answer without the object).
    Empty,
    /// The whole stored body.
    Whole(Rope),
    /// A range of it.
    Part(Vec<Bytes>),
    /// The body as it arrives from the node; a reader never waits on another.
    Growing(BodyReader),
}

/// How the body of an HTTP/1.1 hit is framed (the head says so already).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length` of this many bytes.
    Length(u64),
    /// Chunked, because the body's length is not known yet (still filling).
    Chunked,
    /// Until the connection closes (an HTTP/1.0 client and a body still arriving).
    Close,
}

impl Hit {
    /// The answer to `request` from `object` at `now`.
    pub fn new(
        object: Arc<Object>,
        request: &impl RequestView,
        now: UnixTime,
        status: CacheStatus,
    ) -> Hit {
        let head_only = request.method() == b"HEAD";
        let answer = if request.may_be_conditional() {
            Hit::answer_to(&object, request)
        } else {
            // No precondition and no range: the stored response as it is.
            Answer::Full
        };
        let age = object.freshness.timing.current_age(now);
        Hit {
            object,
            answer,
            head_only,
            age,
            status,
            own_lines: None,
        }
    }

    /// This hit with `lines` (`Name: value\r\n` each) after the stored fields.
    pub(crate) fn with_own_lines(mut self, lines: Box<[u8]>) -> Hit {
        self.own_lines = Some(lines);
        self
    }

    /// What a request with preconditions or a range gets from `object`.
    fn answer_to(object: &Object, request: &impl RequestView) -> Answer {
        // Preconditions apply only where the answer without them would be a 2xx (RFC 9110
        // section 13.2.1): a stored 404 or 301 is answered as it is, whatever they say.
        if !(200..300).contains(&object.head.status()) {
            return Answer::Full;
        }
        let etag = object.etag();
        let precondition = conditional::evaluate(
            request,
            etag,
            object.last_modified(),
            object.freshness.timing.date,
        );
        match precondition {
            Precondition::NotModified => Answer::NotModified,
            Precondition::Failed => Answer::PreconditionFailed,
            // A range is answered from a whole body, or from one still arriving whose
            // length the node declared; a body of unknown length (chunked, or compressed
            // on its way) is sent whole (ignoring Range is allowed).
            Precondition::Pass => match (object.body_length(), object.head.status()) {
                (Some(length), 200) => {
                    let validators = (etag, object.head.header("last-modified"));
                    match range::answer(request, length, validators, object.freshness.timing.date) {
                        RangeAnswer::Full => Answer::Full,
                        RangeAnswer::Partial { start, end } => Answer::Partial { start, end },
                        RangeAnswer::NotSatisfiable => Answer::RangeNotSatisfiable,
                    }
                }
                _ => Answer::Full,
            },
        }
    }

    /// The stored object answered from.
    pub fn object(&self) -> &Arc<Object> {
        &self.object
    }

    /// What is answered: the whole object, a range, or a status without it.
    pub fn answer(&self) -> Answer {
        self.answer
    }

    /// What the cache did, for the status header and the metrics.
    pub fn cache_status(&self) -> CacheStatus {
        self.status
    }

    /// The status to send.
    pub fn status(&self) -> u16 {
        match self.answer {
            Answer::Full => self.object.head.status(),
            Answer::NotModified => 304,
            Answer::Partial { .. } => 206,
            Answer::PreconditionFailed => 412,
            Answer::RangeNotSatisfiable => 416,
        }
    }

    /// The `Age` value, seconds.
    pub fn age(&self) -> u64 {
        self.age
    }

    /// The stored fields to send (a 304 carries only those RFC 9110 §15.4.5
    /// lists; 412 and 416 carry none). Framing, `Age` and `Content-Range`
    /// are not among them: see [`Hit::content_length`], [`Hit::age`] and
    /// [`Hit::content_range`].
    pub fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let answer = self.answer;
        self.object
            .head
            .headers()
            .filter(move |(name, _)| match answer {
                Answer::Full | Answer::Partial { .. } => true,
                Answer::NotModified => in_not_modified(name),
                Answer::PreconditionFailed | Answer::RangeNotSatisfiable => false,
            })
    }

    /// The `Content-Range` value for 206 and 416.
    pub fn content_range(&self) -> Option<String> {
        let total = self.object.body_length()?;
        match self.answer {
            Answer::Partial { start, end } => Some(format!("bytes {start}-{}/{total}", end - 1)),
            Answer::RangeNotSatisfiable => Some(format!("bytes */{total}")),
            _ => None,
        }
    }

    /// The `Content-Length` to send: the representation's for HEAD and full
    /// answers, the range's for 206, 0 for answers without content; `None`
    /// while a body of unknown length is still arriving.
    pub fn content_length(&self) -> Option<u64> {
        match self.answer {
            Answer::Full => self.object.body_length(),
            Answer::Partial { start, end } => Some(end - start),
            Answer::NotModified | Answer::PreconditionFailed | Answer::RangeNotSatisfiable => {
                Some(0)
            }
        }
    }

    /// Whether a body follows the head (never for HEAD, 304, 412 and 416;
    /// nor for statuses that have none).
    pub fn has_body(&self) -> bool {
        !self.head_only
            && matches!(self.answer, Answer::Full | Answer::Partial { .. })
            && !matches!(self.status(), 204 | 304)
    }

    /// The body, its chunks shared with the store.
    pub fn body(&self) -> HitBody {
        if !self.has_body() {
            return HitBody::Empty;
        }
        match (self.answer, self.object.body()) {
            (Answer::Partial { start, end }, Some(body)) => HitBody::Part(body.slice(start, end)),
            (_, Some(body)) => HitBody::Whole(body.clone()),
            (answer, None) => match (answer, self.object.growing()) {
                (Answer::Partial { start, end }, Some(growing)) => {
                    HitBody::Growing(growing.range(start, end))
                }
                (_, Some(growing)) => HitBody::Growing(growing.reader()),
                // Completed between the two checks.
                (Answer::Partial { start, end }, None) => self
                    .object
                    .body()
                    .map_or(HitBody::Empty, |body| HitBody::Part(body.slice(start, end))),
                (_, None) => self
                    .object
                    .body()
                    .map_or(HitBody::Empty, |body| HitBody::Whole(body.clone())),
            },
        }
    }

    /// Writes an HTTP/1.1 status line and head for this hit, and returns how
    /// the body is framed. `http10` writes for an HTTP/1.0 client (no chunked
    /// coding); `extra` fields (the debug header, say) follow the stored ones.
    /// `replace` fields (the virtual server's response headers) are written
    /// instead of any stored field of the same name; `edit` (a request's own
    /// response edits: its traffic rules, its request id) leaves out the stored
    /// fields it drops and adds its fields after them. Neither is stored: they
    /// are this answer's.
    pub fn write_http1_head<E: HeaderEdit + ?Sized>(
        &self,
        out: &mut BytesMut,
        (http10, keep_alive): (bool, bool),
        extra: &[(&str, &str)],
        replace: &[(String, String)],
        edit: Option<&E>,
    ) -> Framing {
        let status = self.status();
        let lines = self.object.head.lines();
        out.reserve(lines.len() + 128);
        let mut number = itoa::Buffer::new();
        let reason = weir_http::reason_phrase(status).as_bytes();
        weir_http::write_status_line(status, reason, out);
        let replaced = |name: &[u8]| {
            replace
                .iter()
                .any(|(set, _)| name.eq_ignore_ascii_case(set.as_bytes()))
                || edit.is_some_and(|edit| edit.drops(name))
        };
        match self.answer {
            Answer::Full | Answer::Partial { .. } if replace.is_empty() && edit.is_none() => {
                out.extend_from_slice(lines);
            }
            _ => {
                for (name, value) in self.headers().filter(|(name, _)| !replaced(name)) {
                    push_field(out, name, value);
                }
                // 412 and 416 are the cache's own answers, made now: they carry none of
                // the stored fields, and their `Date` is now (RFC 9110 §6.6.1).
                let own = matches!(
                    self.answer,
                    Answer::PreconditionFailed | Answer::RangeNotSatisfiable
                );
                if own && !replaced(b"date") {
                    weir_http::write_date(out);
                }
            }
        }
        if let Some(lines) = &self.own_lines {
            out.extend_from_slice(lines);
        }
        // A field the edit sets or removes too is the edit's (a rule's word is the last).
        for (name, value) in replace
            .iter()
            .filter(|(name, _)| !edit.is_some_and(|edit| edit.drops(name.as_bytes())))
        {
            push_field(out, name.as_bytes(), value.as_bytes());
        }
        if let Some(edit) = edit {
            edit.write_added(out);
        }
        push_field(out, b"Age", number.format(self.age).as_bytes());
        if let Some(range) = self.content_range() {
            push_field(out, b"Content-Range", range.as_bytes());
        }
        for (name, value) in extra {
            push_field(out, name.as_bytes(), value.as_bytes());
        }
        let mut keep_alive = keep_alive;
        let framing = match self.content_length() {
            Some(length) => {
                if !matches!(status, 204 | 304) {
                    push_field(out, b"Content-Length", number.format(length).as_bytes());
                }
                Framing::Length(if self.has_body() { length } else { 0 })
            }
            None if !self.has_body() => Framing::Length(0),
            None if http10 => {
                keep_alive = false;
                Framing::Close
            }
            None => {
                push_field(out, b"Transfer-Encoding", b"chunked");
                Framing::Chunked
            }
        };
        let version = match http10 {
            true => weir_http::Version::Http10,
            false => weir_http::Version::Http11,
        };
        weir_http::write_connection(version, keep_alive, false, out);
        out.extend_from_slice(b"\r\n");
        framing
    }
}

impl CacheStatus {
    /// The value for the access log and the debug header.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheStatus::Hit => "HIT",
            CacheStatus::Miss => "MISS",
            CacheStatus::Stale => "STALE",
            CacheStatus::StaleIfError => "STALE-IF-ERROR",
            CacheStatus::Revalidated => "REVALIDATED",
            CacheStatus::Expired => "EXPIRED",
            CacheStatus::Pass => "PASS",
        }
    }
}

/// Inlined: most names are constants, whose copies then need no call.
#[inline(always)]
fn push_field(out: &mut BytesMut, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}
