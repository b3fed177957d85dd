//! The property the `tunnel_wire` target checks: the tunnel's wire parsers
//! (record framing, the open header, control messages, blocks and the flow
//! decoder, FEC frames, the TCP transport's frames) never panic on bytes from
//! a peer, never take more than they were given, and a control message that
//! parses encodes back to the same record.

use bytes::{Bytes, BytesMut};
use weir_tunnel::fuzzing::wire::{self, Block, MAX_RECORD};
use weir_tunnel::fuzzing::{Control, FlowDecoder};

/// Chunks a block may claim in the checks (small, so lengths are reachable).
const MAX_CHUNK: u32 = 64 * 1024;

/// Checks one input: fed to each parser whole, and split into records.
pub fn check_tunnel_wire(data: &[u8]) {
    let _ = weir_tunnel::fuzzing::fec_wire::parse(data);
    let mut frames = BytesMut::from(data);
    while let Ok(Some(frame)) = weir_tunnel::fuzzing::frame::take_frame(&mut frames) {
        assert!(!frame.is_empty() && frame.len() <= usize::from(u16::MAX));
    }
    let mut buffer = BytesMut::from(data);
    let mut decoder = FlowDecoder::new(MAX_CHUNK).expect("a zstd context");
    loop {
        let before = buffer.len();
        let record = match wire::take_record(&mut buffer) {
            Ok(Some(record)) => record,
            Ok(None) | Err(_) => break,
        };
        assert!(record.len() <= MAX_RECORD, "a record over MAX_RECORD");
        assert!(buffer.len() < before, "a record taken from nothing");
        check_record(record, &mut decoder);
    }
}

fn check_record(record: Bytes, decoder: &mut FlowDecoder) {
    let _ = wire::decode_open(record.clone());
    let _ = Block::decode(record.clone(), MAX_CHUNK);
    let _ = decoder.decode(record.clone());
    if let Ok(control) = Control::decode(record.clone()) {
        let mut encoded = BytesMut::new();
        control.encode(&mut encoded);
        let again = wire::take_record(&mut encoded)
            .expect("an encoded record frames")
            .expect("whole");
        assert_eq!(
            Control::decode(again),
            Ok(control),
            "a control message changed in a round trip"
        );
    }
}
