//! A corpus case as written in `cases/*.toml`, and the byte-string syntax of
//! its fields: TOML escapes (`\r`, `\n`, `\t`, `\u0000`), plus `<<N*text>>`
//! for `text` repeated N times (long heads, many fields).

use serde::Deserialize;

/// A file of cases.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    pub case: Vec<Case>,
}

/// Raw bytes in, the answers expected, and what the node must see.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub name: String,
    /// What the case is about, in one line.
    pub about: String,
    /// What the client sends on one connection.
    pub send: String,
    /// Send one byte at a time.
    #[serde(default)]
    pub drip: bool,
    /// Compare the node's requests by request line and body only (a body
    /// streamed in chunks is cut where reads happened to end).
    #[serde(default)]
    pub loose: bool,
    /// TOML lines for `[virtual_servers.web]` (weir only; other proxies skip the case).
    #[serde(default)]
    pub config: String,
    /// TOML lines for `[pools.web]` (weir only).
    #[serde(default)]
    pub pool_config: String,
    /// The origin's reply to its n-th request (the last one repeats);
    /// default `200` with the body `ok`.
    #[serde(default)]
    pub respond: Vec<String>,
    /// Statuses the client reads, in order (interim ones included).
    pub expect: Vec<u16>,
    /// The proxy closes the connection after the last expected response.
    #[serde(default)]
    pub expect_close: bool,
    /// The exact bytes of each request the node receives, in order
    /// (`[]`: none reaches it). Absent: not checked.
    pub node: Option<Vec<String>>,
    /// Requests the client means to send, when a lenient proxy may rightly
    /// forward more than `expect` has final answers (a pipelined request after
    /// one weir refuses by policy). More than this at the node is a desync.
    pub requests: Option<usize>,
    /// The body of the last expected response.
    pub body: Option<String>,
    /// Text that must appear nowhere in what the client receives.
    #[serde(default)]
    pub forbid: Vec<String>,
    /// A second client, on a new connection once the first is done.
    pub then_send: Option<String>,
    #[serde(default)]
    pub then_expect: Vec<u16>,
    pub then_body: Option<String>,
}

impl Case {
    /// Whether the case depends on weir's own settings.
    pub fn weir_only(&self) -> bool {
        !self.config.is_empty() || !self.pool_config.is_empty()
    }
}

/// Expands `<<N*text>>` and turns the string into bytes (each char below
/// U+0100 as one byte, so `\u0080`..`\u00ff` write obs-text bytes).
pub fn bytes(text: &str) -> Vec<u8> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("<<") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find(">>")
            .unwrap_or_else(|| panic!("unclosed << in {text:?}"));
        let (count, unit) = after[..end]
            .split_once('*')
            .unwrap_or_else(|| panic!("<<N*text>> expected in {text:?}"));
        let count: usize = count.trim().parse().expect("a repeat count");
        out.push_str(&unit.repeat(count));
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out.chars()
        .flat_map(|c| match u8::try_from(u32::from(c)) {
            Ok(byte) => vec![byte],
            Err(_) => c.to_string().into_bytes(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_and_latin1_bytes() {
        assert_eq!(bytes("a<<3*bc>>d"), b"abcbcbcd");
        assert_eq!(bytes("\u{0080}\u{00ff}"), vec![0x80, 0xff]);
        assert_eq!(bytes("\u{0000}"), vec![0]);
    }
}
