//! What every connection of one origin reads, and the memory each one holds while open.

use std::sync::Arc;

use crate::options::OriginOptions;
use crate::stats::OriginStats;

/// What every connection of one origin reads.
#[derive(Debug)]
pub(crate) struct Shared {
    pub options: OriginOptions,
    pub stats: Arc<OriginStats>,
    /// `X-Origin: <name>\r\n`, sent in every response.
    pub fixed_headers: Vec<u8>,
    /// The body of `/`.
    pub hello: Vec<u8>,
}

impl Shared {
    /// `per_connection_memory` bytes, allocated with one byte written per page so the memory
    /// is really resident; held by a connection until it closes.
    pub fn ballast(&self) -> Vec<u8> {
        let mut ballast = vec![0u8; self.options.per_connection_memory];
        for page in ballast.iter_mut().step_by(4096) {
            *page = 1;
        }
        std::hint::black_box(ballast)
    }
}
