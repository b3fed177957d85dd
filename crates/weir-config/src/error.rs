//! Configuration errors: every problem names the file, the line and the key path,
//! and a load reports all the problems it found, not just the first.

use std::fmt;

/// A configuration that could not be loaded, with one diagnostic per problem.
///
/// Displays one line per diagnostic:
/// `weir.toml:14: pools.web.nodes[2].address: invalid socket address "10.0.0.1:99999"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file as the user named it (or `<embedded default>`).
    pub file: String,
    /// Never empty.
    pub errors: Vec<Diagnostic>,
}

/// One problem in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// 1-based line in the file; `None` when the problem has no place (a read error,
    /// or a required table that is missing altogether).
    pub line: Option<usize>,
    /// Key path such as `pools.web.nodes[2].address`; empty when none applies.
    pub path: String,
    /// What is wrong, in a sentence.
    pub message: String,
}

/// Where a value sits in the file: table keys and array indexes from the root.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct KeyPath(Vec<Segment>);

/// One step of a [`KeyPath`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Segment {
    /// A table key.
    Key(String),
    /// An array index, from zero.
    Index(usize),
}

/// A validation problem before it is given a line: the key path and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where the problem is.
    pub path: KeyPath,
    /// What is wrong, in a sentence.
    pub message: String,
    /// Another key this conclusion rests on, when it is about more than `path` (a rule
    /// hidden by an earlier one): when that key's value was refused and set aside, the
    /// conclusion is the refusal's consequence, not a problem of the file, and is dropped.
    pub because: Option<KeyPath>,
}

impl ConfigError {
    /// An error with a single diagnostic.
    pub fn single(file: &str, line: Option<usize>, path: String, message: String) -> Self {
        Self {
            file: file.to_owned(),
            errors: vec![Diagnostic {
                line,
                path,
                message,
            }],
        }
    }
}

impl KeyPath {
    /// The document root (displays as an empty string).
    pub fn root() -> Self {
        Self::default()
    }

    /// This path extended by a table key.
    pub fn key(&self, key: &str) -> Self {
        let mut path = self.clone();
        path.0.push(Segment::Key(key.to_owned()));
        path
    }

    /// This path extended by an array index.
    pub fn index(&self, index: usize) -> Self {
        let mut path = self.clone();
        path.0.push(Segment::Index(index));
        path
    }

    /// The enclosing path, or `None` at the root.
    pub fn parent(&self) -> Option<Self> {
        let (_, rest) = self.0.split_last()?;
        Some(Self(rest.to_vec()))
    }

    /// The steps from the root, in order.
    pub fn segments(&self) -> &[Segment] {
        &self.0
    }

    /// Whether `ancestor` is this path or one of its enclosing paths.
    pub fn starts_with(&self, ancestor: &KeyPath) -> bool {
        self.0.starts_with(&ancestor.0)
    }

    /// Whether this is the document root (no steps).
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, diagnostic) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            f.write_str(&self.file)?;
            if let Some(line) = diagnostic.line {
                write!(f, ":{line}")?;
            }
            f.write_str(": ")?;
            if !diagnostic.path.is_empty() {
                write_escaped(f, &diagnostic.path)?;
                f.write_str(": ")?;
            }
            write_escaped(f, &diagnostic.message)?;
        }
        Ok(())
    }
}

/// `text` with its control characters escaped (`\n`, `\u{1b}`): a message quotes names
/// from the file, and a name holding a line break must not start a forged line in a log.
fn write_escaped(f: &mut fmt::Formatter<'_>, text: &str) -> fmt::Result {
    if !text.chars().any(char::is_control) {
        return f.write_str(text);
    }
    for c in text.chars() {
        match c.is_control() {
            true => write!(f, "{}", c.escape_default())?,
            false => write!(f, "{c}")?,
        }
    }
    Ok(())
}

impl std::error::Error for ConfigError {}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Index(index) => write!(f, "[{index}]")?,
                Segment::Key(key) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    let bare = !key.is_empty()
                        && key
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                    if bare {
                        f.write_str(key)?;
                    } else {
                        write!(f, "{key:?}")?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Rewrites a serde message from the TOML deserializer in the file's own terms.
///
/// Returns the key the message is about when the location points at its table
/// rather than at the key itself (a missing key), and the rewritten message.
pub(crate) fn explain_serde_message(message: &str) -> (Option<String>, String) {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let Some((unknown, expected)) = rest.split_once('`') else {
            return (None, message.to_owned());
        };
        let valid: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        let mut text = format!("unknown key \"{unknown}\"");
        if valid.is_empty() {
            text.push_str("; this table takes no keys");
            return (None, text);
        }
        if let Some(close) = closest(unknown, &valid) {
            text.push_str(&format!(" (did you mean \"{close}\"?)"));
        }
        text.push_str("; valid keys: ");
        text.push_str(&valid.join(", "));
        return (None, text);
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        let key = rest.trim_end_matches('`');
        return (Some(key.to_owned()), "missing required key".to_owned());
    }
    let mut text = message.to_owned();
    for (from, to) in [
        ("expected u32", "expected a whole number"),
        ("expected u64", "expected a whole number"),
        ("expected i64", "expected a whole number"),
        ("expected usize", "expected a whole number"),
        ("expected a boolean", "expected true or false"),
        ("expected a sequence", "expected an array"),
        ("invalid type: map", "invalid type: table"),
        ("invalid type: sequence", "invalid type: array"),
    ] {
        text = text.replace(from, to);
    }
    if let Some(start) = text.find("expected struct ") {
        text.replace_range(start.., "expected a table");
    }
    (None, text)
}

/// The valid key closest to a misspelt one, if any is close enough to suggest.
pub(crate) fn closest<'a>(unknown: &str, valid: &[&'a str]) -> Option<&'a str> {
    valid
        .iter()
        .map(|candidate| (edit_distance(unknown, candidate), *candidate))
        .filter(|(distance, candidate)| *distance <= 2.max(candidate.len() / 3))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance over bytes.
fn edit_distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_path_display() {
        let path = KeyPath::root()
            .key("pools")
            .key("web")
            .key("nodes")
            .index(2);
        assert_eq!(
            path.key("address").to_string(),
            "pools.web.nodes[2].address"
        );
        assert_eq!(
            KeyPath::root().key("pools").key("my pool").to_string(),
            "pools.\"my pool\""
        );
        assert_eq!(KeyPath::root().to_string(), "");
        assert_eq!(path.parent().unwrap().to_string(), "pools.web.nodes");
    }

    #[test]
    fn display_with_and_without_line_and_path() {
        let error = ConfigError {
            file: "weir.toml".into(),
            errors: vec![
                Diagnostic {
                    line: Some(14),
                    path: "pools.web.nodes[2].address".into(),
                    message: "invalid socket address \"10.0.0.1:99999\"".into(),
                },
                Diagnostic {
                    line: None,
                    path: "virtual_servers".into(),
                    message: "at least one virtual server is required".into(),
                },
                Diagnostic {
                    line: None,
                    path: String::new(),
                    message: "cannot read file: not found".into(),
                },
            ],
        };
        assert_eq!(
            error.to_string(),
            "weir.toml:14: pools.web.nodes[2].address: invalid socket address \"10.0.0.1:99999\"\n\
             weir.toml: virtual_servers: at least one virtual server is required\n\
             weir.toml: cannot read file: not found"
        );
    }

    #[test]
    fn unknown_field_message_suggests_and_lists() {
        let (_, text) =
            explain_serde_message("unknown field `retrys`, expected one of `nodes`, `retries`");
        assert_eq!(
            text,
            "unknown key \"retrys\" (did you mean \"retries\"?); valid keys: nodes, retries"
        );
        let (_, text) = explain_serde_message("unknown field `zzz`, expected `listen`");
        assert_eq!(text, "unknown key \"zzz\"; valid keys: listen");
    }

    #[test]
    fn missing_field_names_the_key() {
        let (key, text) = explain_serde_message("missing field `pool`");
        assert_eq!(key.as_deref(), Some("pool"));
        assert_eq!(text, "missing required key");
    }

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("retrys", "retries"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
