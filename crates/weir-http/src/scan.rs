//! Deciding when a request head is worth parsing, so that a head sent one byte
//! per segment costs linear time, not a full re-parse per read.
//!
//! The scan keeps its position between reads and looks only at new bytes. A
//! parse is worth trying on the first bytes (a bad method is refused at once),
//! when the start line is complete (a bad target or version is refused before
//! the headers), when the empty line that ends the head has arrived, and when
//! the buffer has reached the head size limit (→ 431).

/// Incremental search for the end of a head. One per head being read.
#[derive(Debug, Default, Clone)]
pub struct HeadScan {
    /// Bytes of the buffer already looked at.
    scanned: usize,
    /// Parse attempts already signalled for the first bytes and the start line.
    saw_first_bytes: bool,
    saw_first_line: bool,
}

impl HeadScan {
    /// A scan at the start of a head.
    pub fn new() -> HeadScan {
        HeadScan::default()
    }

    /// Whether parsing `buf` now could give a different answer than "partial".
    /// `buf` must only have grown since the last call.
    pub fn ready(&mut self, buf: &[u8], max_head_bytes: usize) -> bool {
        if buf.is_empty() {
            return false;
        }
        // An end of head may straddle two reads (`\n` | `\r\n`): look back two bytes.
        let from = self.scanned.min(buf.len()).saturating_sub(2);
        self.scanned = buf.len();
        let mut ready = buf.len() >= max_head_bytes || !self.saw_first_bytes;
        self.saw_first_bytes = true;
        for offset in memchr::memchr_iter(b'\n', &buf[from..]) {
            let lf = from + offset;
            if !self.saw_first_line {
                self.saw_first_line = true;
                ready = true;
            }
            // LF, an optional CR, LF: the empty line (bare LFs are refused by the parser).
            if matches!(buf.get(lf + 1..), Some([b'\n', ..] | [b'\r', b'\n', ..])) {
                return true;
            }
        }
        ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `raw` one byte at a time; returns the lengths at which a parse was signalled.
    fn signals(raw: &[u8], limit: usize) -> Vec<usize> {
        let mut scan = HeadScan::new();
        (1..=raw.len())
            .filter(|&len| scan.ready(&raw[..len], limit))
            .collect()
    }

    #[test]
    fn signals_first_bytes_start_line_and_end() {
        let raw = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        assert_eq!(signals(raw, 1024), vec![1, 16, raw.len()]);
    }

    #[test]
    fn finds_an_end_split_across_reads_and_bare_lf_ends() {
        let raw = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        let mut scan = HeadScan::new();
        assert!(scan.ready(&raw[..20], 1024));
        assert!(!scan.ready(&raw[..raw.len() - 1], 1024));
        assert!(scan.ready(raw, 1024));
        let bare = b"GET / HTTP/1.1\nHost: a\n\n";
        assert_eq!(signals(bare, 1024).last(), Some(&bare.len()));
    }

    #[test]
    fn signals_at_the_limit() {
        let raw = [b'a'; 64];
        assert_eq!(signals(&raw, 32), [vec![1], (32..=64).collect()].concat());
    }

    #[test]
    fn a_head_dripped_byte_by_byte_is_parsed_a_bounded_number_of_times() {
        // 100 header lines sent one byte per read: three parse attempts, not one per read.
        let mut raw = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
        for n in 0..100 {
            raw.extend_from_slice(format!("X-Header-{n}: value\r\n").as_bytes());
        }
        raw.extend_from_slice(b"\r\n");
        assert_eq!(signals(&raw, 64 * 1024).len(), 3);
    }
}
