//! QUIC's datagrams framed on a byte stream, for the TCP fallback transport
//! (`crate::driver::tcp`): `length u16 (1..=65535) | datagram`.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Why a byte stream is not a sequence of frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a zero-length frame")]
pub struct FrameError;

/// Appends one frame holding `datagram` (at most 65,535 bytes; callers split nothing
/// larger, as a UDP payload is smaller).
pub fn put_frame(out: &mut BytesMut, datagram: &[u8]) {
    let length = datagram.len().min(usize::from(u16::MAX));
    out.put_u16(length as u16);
    out.extend_from_slice(&datagram[..length]);
}

/// Takes one whole frame from the front of `buffer`, if it holds one.
pub fn take_frame(buffer: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
    let Some(head) = buffer.first_chunk::<2>() else {
        return Ok(None);
    };
    let length = usize::from(u16::from_be_bytes(*head));
    if length == 0 {
        return Err(FrameError);
    }
    if buffer.len() < 2 + length {
        return Ok(None);
    }
    buffer.advance(2);
    Ok(Some(buffer.split_to(length).freeze()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_across_any_split() {
        let mut wire = BytesMut::new();
        put_frame(&mut wire, b"first");
        put_frame(&mut wire, &[7; 1500]);
        let bytes = wire.freeze();
        for split in 0..bytes.len() {
            let mut buffer = BytesMut::from(&bytes[..split]);
            let mut frames = Vec::new();
            while let Some(frame) = take_frame(&mut buffer).unwrap() {
                frames.push(frame);
            }
            buffer.extend_from_slice(&bytes[split..]);
            while let Some(frame) = take_frame(&mut buffer).unwrap() {
                frames.push(frame);
            }
            assert_eq!(frames.len(), 2, "split at {split}");
            assert_eq!(&frames[0][..], b"first");
            assert_eq!(frames[1].len(), 1500);
            assert!(buffer.is_empty());
        }
    }

    #[test]
    fn a_zero_length_frame_is_an_error() {
        let mut buffer = BytesMut::from(&[0u8, 0, 1][..]);
        assert_eq!(take_frame(&mut buffer), Err(FrameError));
    }
}
