//! Flood detection on an HTTP/2 client connection, sans-IO: a frame-header
//! sniffer over the bytes the client sends (after the preface) that keeps one
//! leaky bucket per kind of abuse, with the time passed in.
//!
//! The `h2` codec answers PING and SETTINGS and consumes WINDOW_UPDATE and
//! RST_STREAM itself, so the pipeline never sees them; this watcher sees
//! every frame header before the codec does, at the cost of a few compares
//! per frame (payloads are skipped, not read). What each bucket counts and
//! why its bounds are what they are: `docs/design/http2.md` ("Defences").

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use weir_http::frame::{
    ACK, CONTINUATION, DATA, END_HEADERS, END_STREAM, ErrorCode, GOAWAY, HEADERS, PING,
    PUSH_PROMISE, RST_STREAM, SETTINGS, WINDOW_UPDATE,
};
use weir_observe::Flood;

/// The client connection preface (RFC 9113 §3.4).
pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const FRAME_HEADER: usize = 9;

/// What a PING that follows a DATA or HEADERS frame weir wrote still weighs in the PING
/// bucket: a gRPC client measuring the path sends one per burst of data it gets, and a
/// fast chat sustains 2,560 of them a second (10 per second × 256); a client that makes weir
/// write one-byte DATA frames (a window kept at a byte) to excuse PINGs fills the bucket
/// within a second at the rates that flood.
const EXCUSED_PING: f64 = 1.0 / 256.0;

/// WINDOW_UPDATEs each DATA frame weir writes pays for: the stream's and the connection's,
/// less a fiftieth, so that a client answering every frame with two (gRPC's C core does)
/// sustains 5,000 frames a second (100 per second ÷ 0.02), and one that dribbles a byte per
/// frame to earn updates does not go on for ever.
const DATA_FRAME_CREDIT: f64 = 1.98;

/// A stream the client resets younger than this counts towards `rapid_reset`; an older one
/// is an ordinary cancel (a gRPC deadline, a page left), not the attack, which resets each
/// stream as soon as it is opened so that the concurrency bound never holds it back. With
/// every stream living at least this long, `max_concurrent_streams` bounds the streams a
/// client can start per second. The same age Envoy calls a reset premature.
const PREMATURE_RESET: Duration = Duration::from_secs(1);

/// How long the counts of streams opened and reset prematurely remember: each event
/// weighs e^(-age / this). The share of premature resets among the streams opened is read
/// over about this long.
const STREAM_MEMORY: Duration = Duration::from_secs(10);

/// Streams remembered as young, at most: a client cannot have more open at once than its
/// concurrency bound (at most a few hundred), and the rapid-reset pattern resets the stream
/// it just opened, always among the newest.
const YOUNG_STREAMS: usize = 1024;

/// Frames weir acts on not at all that each request (HEADERS frame) from the client
/// explains: a PRIORITY and a PRIORITY_UPDATE (RFC 9218) for it.
const HEADERS_IGNORED_CREDIT: f64 = 2.0;

/// Refused streams kept between two reports: above the codec's bound on its own resets
/// per connection (`MAX_LOCAL_ERROR_RESETS` in `server.rs`), past which it closes.
const MAX_REFUSED_KEPT: usize = 512;

/// A bucket's bound: how many events at once, and how many per second after.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Budget {
    pub burst: f64,
    pub per_second: f64,
}

/// The bounds the watcher enforces.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct FloodLimits {
    /// RST_STREAM frames from the client for streams it opened less than
    /// [`PREMATURE_RESET`] before; past the budget a flood only while they are half or
    /// more of the streams the client opened lately (as Envoy judges premature resets).
    pub resets: Budget,
    /// SETTINGS frames that are not acknowledgements.
    pub settings: Budget,
    /// PING frames that are not acknowledgements.
    pub pings: Budget,
    /// DATA frames with no payload that do not end the stream, and HEADERS
    /// or CONTINUATION frames with no payload that do not end the block.
    pub empty_frames: Budget,
    /// WINDOW_UPDATE frames; each KiB weir writes to the client, and each DATA frame
    /// (for its stream and the connection), earns more.
    pub window_updates: Budget,
    /// Frames weir acts on not at all: PRIORITY (the `h2` codec reads and drops it),
    /// PRIORITY_UPDATE and other types it does not know (skipped unread); each HEADERS
    /// frame from the client earns two more.
    pub ignored_frames: Budget,
    /// CONTINUATION frames in one header block.
    pub continuations_per_block: u32,
}

impl FloodLimits {
    /// Bounds for a connection whose header lists may take `max_header_list`
    /// bytes in frames of at most `max_frame` bytes.
    pub(crate) fn new(max_header_list: u32, max_frame: u32) -> FloodLimits {
        // A legitimate block needs header_list / frame frames; allow a quarter more
        // for imperfect packing, and a few for small frames (the h2 codec's own bound).
        let needed = (max_header_list / max_frame.max(1)).max(1);
        FloodLimits {
            resets: Budget {
                burst: 200.0,
                per_second: 50.0,
            },
            settings: Budget {
                burst: 50.0,
                per_second: 5.0,
            },
            pings: Budget {
                burst: 100.0,
                per_second: 10.0,
            },
            empty_frames: Budget {
                burst: 100.0,
                per_second: 10.0,
            },
            window_updates: Budget {
                burst: 1000.0,
                per_second: 100.0,
            },
            ignored_frames: Budget {
                burst: 1000.0,
                per_second: 100.0,
            },
            continuations_per_block: (needed + needed / 4).max(5),
        }
    }
}

/// A leaky bucket: each event adds one, the level drains at `per_second`.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    level: f64,
    last: Option<Instant>,
}

impl Bucket {
    const fn new() -> Bucket {
        Bucket {
            level: 0.0,
            last: None,
        }
    }

    fn level_at(&self, budget: Budget, now: Instant) -> f64 {
        let drained = self.last.map_or(0.0, |last| {
            now.saturating_duration_since(last).as_secs_f64() * budget.per_second
        });
        (self.level - drained).max(0.0)
    }

    /// Counts `events` at `now`; true once the level passes the burst.
    fn add(&mut self, budget: Budget, events: f64, now: Instant) -> bool {
        if let Some(last) = self.last {
            let drained = now.saturating_duration_since(last).as_secs_f64() * budget.per_second;
            self.level = (self.level - drained).max(0.0);
        }
        self.last = Some(now);
        self.level += events;
        self.level > budget.burst
    }
}

/// A count whose events fade with age: each weighs e^(-age / [`STREAM_MEMORY`]).
#[derive(Debug, Clone, Copy)]
struct Fading {
    level: f64,
    last: Option<Instant>,
}

impl Fading {
    const fn new() -> Fading {
        Fading {
            level: 0.0,
            last: None,
        }
    }

    fn at(&self, now: Instant) -> f64 {
        let age = self.last.map_or(0.0, |last| {
            now.saturating_duration_since(last).as_secs_f64()
        });
        self.level * (-age / STREAM_MEMORY.as_secs_f64()).exp()
    }

    fn add(&mut self, now: Instant) {
        self.level = self.at(now) + 1.0;
        self.last = Some(now);
    }
}

/// Where the sniffer is in the client's byte stream.
#[derive(Debug, Clone, Copy)]
enum Position {
    /// In the preface; this many bytes of it seen.
    Preface(usize),
    /// In a frame header; this many of its bytes are in `header`.
    Header(usize),
    /// In a payload; this many bytes left to skip.
    Payload(usize),
}

/// The watcher of one connection.
#[derive(Debug)]
pub(crate) struct FrameWatch {
    limits: FloodLimits,
    position: Position,
    header: [u8; FRAME_HEADER],
    /// CONTINUATION frames seen in the open header block, if one is open.
    block: Option<u32>,
    /// Streams the client opened less than [`PREMATURE_RESET`] ago (or not yet pruned),
    /// by id, oldest first (a client's stream ids only grow), with when.
    young: VecDeque<(u32, Instant)>,
    /// The highest stream id the client opened.
    last_opened: u32,
    /// Streams opened, and those reset prematurely, lately.
    opened_lately: Fading,
    premature_lately: Fading,
    resets: Bucket,
    settings: Bucket,
    pings: Bucket,
    empty: Bucket,
    window_updates: Bucket,
    ignored: Bucket,
    /// Where the sniffer is in the bytes weir writes (frames from the start: the
    /// server's preface is a SETTINGS frame).
    outgoing: Position,
    outgoing_header: [u8; FRAME_HEADER],
    /// The RST_STREAM weir is writing: its stream, and the bytes of its error code so far.
    outgoing_reset: Option<(u32, usize, [u8; 4])>,
    /// Streams reset with `PROTOCOL_ERROR` above the last one handed over, not yet taken
    /// ([`FrameWatch::take_refused`]).
    refused: Vec<u32>,
    /// weir wrote a DATA or HEADERS frame since the client's last PING: that PING
    /// is the kind a client sends to measure the path as data arrives (gRPC's BDP
    /// estimate), and weighs [`EXCUSED_PING`] of one.
    answered_since_ping: bool,
    /// Empty DATA frames that did not end their stream, over the connection's life: the
    /// codec closes a connection past 100 of them whatever their rate (see
    /// [`FrameWatch::worn_out`]).
    empty_data: u32,
    verdict: Option<Flood>,
}

/// Empty DATA frames not ending their stream after which a client's connection is asked to
/// end (a graceful GOAWAY): half the `h2` codec's lifetime bound, which closes the connection
/// under its streams with `ENHANCE_YOUR_CALM` however slowly the frames came.
pub(crate) const EMPTY_DATA_RETIRE_AT: u32 = 50;

impl FrameWatch {
    /// A watcher that expects the preface first.
    pub(crate) fn new(limits: FloodLimits) -> FrameWatch {
        FrameWatch {
            limits,
            position: Position::Preface(0),
            header: [0; FRAME_HEADER],
            block: None,
            young: VecDeque::new(),
            last_opened: 0,
            opened_lately: Fading::new(),
            premature_lately: Fading::new(),
            resets: Bucket::new(),
            settings: Bucket::new(),
            pings: Bucket::new(),
            empty: Bucket::new(),
            window_updates: Bucket::new(),
            ignored: Bucket::new(),
            outgoing: Position::Header(0),
            outgoing_header: [0; FRAME_HEADER],
            outgoing_reset: None,
            refused: Vec::new(),
            answered_since_ping: false,
            empty_data: 0,
            verdict: None,
        }
    }

    /// Whether the client sent so many empty DATA frames over the connection's life that
    /// it should move to a new one before the codec closes this one under its streams.
    pub(crate) fn worn_out(&self) -> bool {
        self.empty_data >= EMPTY_DATA_RETIRE_AT
    }

    /// The flood found, once one was.
    pub(crate) fn verdict(&self) -> Option<Flood> {
        self.verdict
    }

    /// The kind of frame the client has sent most of, relative to its
    /// budget, when that is a tenth of the budget or more: what to blame
    /// when the codec's own bound (lower than ours for resets of streams not
    /// yet accepted, and for empty DATA frames) closed the connection first.
    pub(crate) fn suspect(&self, now: Instant) -> Option<Flood> {
        let limits = &self.limits;
        [
            (Flood::RapidReset, &self.resets, limits.resets),
            (Flood::Settings, &self.settings, limits.settings),
            (Flood::Ping, &self.pings, limits.pings),
            (Flood::EmptyFrames, &self.empty, limits.empty_frames),
            (
                Flood::WindowUpdate,
                &self.window_updates,
                limits.window_updates,
            ),
            (Flood::IgnoredFrames, &self.ignored, limits.ignored_frames),
        ]
        .into_iter()
        .map(|(kind, bucket, budget)| (kind, bucket.level_at(budget, now) / budget.burst))
        .filter(|(_, share)| *share >= 0.1)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(kind, _)| kind)
    }

    /// Looks at bytes the client sent, in order. Returns the flood found, if
    /// any (and keeps returning it).
    pub(crate) fn received(&mut self, mut bytes: &[u8], now: Instant) -> Option<Flood> {
        while !bytes.is_empty() && self.verdict.is_none() {
            match self.position {
                Position::Preface(seen) => {
                    let take = (PREFACE.len() - seen).min(bytes.len());
                    // A wrong preface is the codec's to reject; only count bytes here.
                    self.position = if seen + take == PREFACE.len() {
                        Position::Header(0)
                    } else {
                        Position::Preface(seen + take)
                    };
                    bytes = &bytes[take..];
                }
                Position::Header(have) => {
                    let take = (FRAME_HEADER - have).min(bytes.len());
                    self.header[have..have + take].copy_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if have + take < FRAME_HEADER {
                        self.position = Position::Header(have + take);
                    } else {
                        let length = self.frame(now);
                        self.position = Position::Payload(length);
                    }
                }
                Position::Payload(left) => {
                    let take = left.min(bytes.len());
                    bytes = &bytes[take..];
                    self.position = if take == left {
                        Position::Header(0)
                    } else {
                        Position::Payload(left - take)
                    };
                }
            }
            if let Position::Payload(0) = self.position {
                self.position = Position::Header(0);
            }
        }
        self.verdict
    }

    /// Looks at bytes weir wrote to the client, in order. A client may acknowledge
    /// data with WINDOW_UPDATEs: one per KiB written, and nearly two per DATA frame
    /// ([`DATA_FRAME_CREDIT`]: its stream's and the connection's, as gRPC's C core sends for
    /// each small message), before they count as a flood. A DATA or HEADERS frame makes the
    /// client's next PING weigh little (`answered_since_ping`, [`EXCUSED_PING`]).
    ///
    /// Returns how many of the frames written reset, with `PROTOCOL_ERROR`, a stream above
    /// `last_accepted` (the highest stream the driver was handed), and keeps their ids
    /// ([`FrameWatch::take_refused`]): requests the codec may have refused as malformed
    /// before weir saw them (RFC 9113 §8.1.1), which only these frames tell of. The codec
    /// writes such a reset in the turn that read the stream's frames, before it hands
    /// over any later stream; it may still hand over that stream itself (its HEADERS were
    /// whole, its DATA overran its `content-length` in the same read), and then it is the
    /// pipeline's to count.
    pub(crate) fn sent(&mut self, mut bytes: &[u8], last_accepted: u32) -> u32 {
        let mut refused = 0;
        let mut credit = bytes.len() as f64 / 1024.0;
        while !bytes.is_empty() {
            match self.outgoing {
                Position::Header(have) => {
                    let take = (FRAME_HEADER - have).min(bytes.len());
                    self.outgoing_header[have..have + take].copy_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if have + take < FRAME_HEADER {
                        self.outgoing = Position::Header(have + take);
                        continue;
                    }
                    let header = self.outgoing_header;
                    let length = usize::from(header[0]) << 16
                        | usize::from(header[1]) << 8
                        | usize::from(header[2]);
                    match header[3] {
                        DATA => {
                            credit += DATA_FRAME_CREDIT;
                            self.answered_since_ping = true;
                        }
                        HEADERS => self.answered_since_ping = true,
                        RST_STREAM if length == 4 => {
                            let stream = u32::from_be_bytes([
                                header[5] & 0x7f,
                                header[6],
                                header[7],
                                header[8],
                            ]);
                            self.outgoing_reset = Some((stream, 0, [0; 4]));
                        }
                        _ => {}
                    }
                    self.outgoing = match length {
                        0 => Position::Header(0),
                        length => Position::Payload(length),
                    };
                }
                Position::Payload(left) => {
                    let take = left.min(bytes.len());
                    if let Some((stream, have, code)) = self.outgoing_reset.as_mut() {
                        code[*have..*have + take].copy_from_slice(&bytes[..take]);
                        *have += take;
                        if *have == 4 {
                            if u32::from_be_bytes(*code) == ErrorCode::PROTOCOL_ERROR.0
                                && *stream > last_accepted
                                && self.refused.len() < MAX_REFUSED_KEPT
                            {
                                self.refused.push(*stream);
                                refused += 1;
                            }
                            self.outgoing_reset = None;
                        }
                    }
                    bytes = &bytes[take..];
                    self.outgoing = match left - take {
                        0 => Position::Header(0),
                        left => Position::Payload(left),
                    };
                }
                // weir writes no preface of its own.
                Position::Preface(_) => self.outgoing = Position::Header(0),
            }
        }
        self.window_updates.level = (self.window_updates.level - credit).max(0.0);
        refused
    }

    /// The streams [`FrameWatch::sent`] found reset as malformed, oldest first.
    pub(crate) fn take_refused(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.refused)
    }

    /// Counts the frame whose header is complete; returns its payload length.
    fn frame(&mut self, now: Instant) -> usize {
        let length = usize::from(self.header[0]) << 16
            | usize::from(self.header[1]) << 8
            | usize::from(self.header[2]);
        let (kind, flags) = (self.header[3], self.header[4]);
        let stream = u32::from_be_bytes([
            self.header[5] & 0x7f,
            self.header[6],
            self.header[7],
            self.header[8],
        ]);
        let limits = self.limits;
        let flood = match kind {
            DATA => {
                let empty = length == 0 && flags & END_STREAM == 0;
                if empty {
                    self.empty_data = self.empty_data.saturating_add(1);
                }
                empty && self.empty.add(limits.empty_frames, 1.0, now)
            }
            HEADERS => {
                self.opened(stream, now);
                self.ignored.level = (self.ignored.level - HEADERS_IGNORED_CREDIT).max(0.0);
                self.block = (flags & END_HEADERS == 0).then_some(0);
                (length == 0 && flags & END_HEADERS == 0)
                    && self.empty.add(limits.empty_frames, 1.0, now)
            }
            CONTINUATION => self.continuation(length, flags, now),
            RST_STREAM => self.premature_reset(stream, now),
            SETTINGS => flags & ACK == 0 && self.settings.add(limits.settings, 1.0, now),
            PING => {
                let weight = match std::mem::take(&mut self.answered_since_ping) {
                    true => EXCUSED_PING,
                    false => 1.0,
                };
                flags & ACK == 0 && self.pings.add(limits.pings, weight, now)
            }
            WINDOW_UPDATE => self.window_updates.add(limits.window_updates, 1.0, now),
            // PUSH_PROMISE and GOAWAY: the codec's to refuse or act on.
            PUSH_PROMISE | GOAWAY => false,
            // PRIORITY, and every type this sniffer does not know (RFC 9113 §5.5: ignored).
            _ => self.ignored.add(limits.ignored_frames, 1.0, now),
        };
        if flood {
            self.verdict = Some(match kind {
                DATA | HEADERS => Flood::EmptyFrames,
                CONTINUATION => self.verdict.unwrap_or(Flood::EmptyFrames),
                RST_STREAM => Flood::RapidReset,
                SETTINGS => Flood::Settings,
                PING => Flood::Ping,
                WINDOW_UPDATE => Flood::WindowUpdate,
                _ => Flood::IgnoredFrames,
            });
        }
        length
    }

    /// A HEADERS frame on `stream`: a new stream when its id is higher than any before (a
    /// later HEADERS frame on a stream is its trailers).
    fn opened(&mut self, stream: u32, now: Instant) {
        if stream <= self.last_opened {
            return;
        }
        self.last_opened = stream;
        self.opened_lately.add(now);
        self.prune(now);
        if self.young.len() == YOUNG_STREAMS {
            self.young.pop_front();
        }
        self.young.push_back((stream, now));
    }

    /// A reset of `stream`: counted when premature; a flood past the budget while premature
    /// resets are half or more of the streams opened lately. A client that cancels some of
    /// its calls early (a third of them, say) is no attacker; the attack resets nearly all.
    fn premature_reset(&mut self, stream: u32, now: Instant) -> bool {
        if !self.premature(stream, now) {
            return false;
        }
        self.premature_lately.add(now);
        let past_budget = self.resets.add(self.limits.resets, 1.0, now);
        past_budget && self.premature_lately.at(now) * 2.0 >= self.opened_lately.at(now)
    }

    /// Whether a reset of `stream` is premature: the client opened it less than
    /// [`PREMATURE_RESET`] ago. A reset of a stream it never opened is the codec's to refuse.
    fn premature(&mut self, stream: u32, now: Instant) -> bool {
        self.prune(now);
        self.young
            .binary_search_by_key(&stream, |&(id, _)| id)
            .is_ok()
    }

    fn prune(&mut self, now: Instant) {
        while let Some(&(_, opened)) = self.young.front() {
            if now.saturating_duration_since(opened) < PREMATURE_RESET {
                break;
            }
            self.young.pop_front();
        }
    }

    fn continuation(&mut self, length: usize, flags: u8, now: Instant) -> bool {
        let Some(frames) = self.block.as_mut() else {
            // Outside a block: a protocol error the codec answers.
            return false;
        };
        *frames += 1;
        if *frames > self.limits.continuations_per_block {
            self.verdict = Some(Flood::Continuation);
            return true;
        }
        if flags & END_HEADERS != 0 {
            self.block = None;
            return false;
        }
        length == 0 && self.empty.add(self.limits.empty_frames, 1.0, now)
    }
}

#[cfg(test)]
mod tests;
