//! The optional sequence header: 16 bytes in front of each datagram's payload.
//!
//! | bytes | field | value |
//! |---|---|---|
//! | 0..3 | magic | `L` `U` `S` (0x4c 0x55 0x53) |
//! | 3 | version | 1 |
//! | 4..8 | stream id | u32, big-endian (network order): one per sender unless chosen |
//! | 8..16 | sequence number | u64, big-endian: 0 for a sender's first datagram, +1 per datagram |
//!
//! The payload follows at byte 16; its length is the datagram's length less 16. Without
//! the header a datagram is pure payload.

/// Header length in bytes.
pub const HEADER_LEN: usize = 16;
/// Bytes 0..4: magic and version.
pub const MAGIC: [u8; 4] = [b'L', b'U', b'S', 1];

/// A decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub stream_id: u32,
    pub sequence: u64,
}

impl Header {
    /// The 16 bytes on the wire.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..4].copy_from_slice(&MAGIC);
        h[4..8].copy_from_slice(&self.stream_id.to_be_bytes());
        h[8..16].copy_from_slice(&self.sequence.to_be_bytes());
        h
    }

    /// The header at the front of `datagram`, if it has a valid one.
    pub fn decode(datagram: &[u8]) -> Option<Header> {
        if datagram.len() < HEADER_LEN || datagram[0..4] != MAGIC {
            return None;
        }
        let stream_id = u32::from_be_bytes(datagram[4..8].try_into().ok()?);
        let sequence = u64::from_be_bytes(datagram[8..16].try_into().ok()?);
        Some(Header { stream_id, sequence })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_layout() {
        let h = Header { stream_id: 0x0102_0304, sequence: 0x1122_3344_5566_7788 };
        let b = h.encode();
        assert_eq!(b, [b'L', b'U', b'S', 1, 1, 2, 3, 4, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
        assert_eq!(Header::decode(&b), Some(h));
        assert_eq!(Header::decode(&b[..15]), None);
        let mut bad = b;
        bad[3] = 2;
        assert_eq!(Header::decode(&bad), None);
    }
}
