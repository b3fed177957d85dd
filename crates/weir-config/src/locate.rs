//! Maps key paths to lines and byte offsets to key paths, using the spans that
//! `toml_edit` keeps when it parses a document.

use std::collections::HashMap;
use std::ops::Range;

use toml_edit::{Document, Item, Table, Value};

use crate::error::{Diagnostic, KeyPath, Problem};

/// Everything the file says about where each key sits.
pub(crate) struct Locator<'a> {
    text: &'a str,
    /// Byte offset at which each path appears (its key, or its header for array elements).
    starts: HashMap<KeyPath, usize>,
    /// Spans that belong to each path, to find the path of a byte offset.
    spans: Vec<(KeyPath, Range<usize>)>,
    /// Each `key = value` of a table written with a header (or of the root): from its key
    /// to the end of its value.
    statements: HashMap<KeyPath, Range<usize>>,
    /// The header (`[a.b]`, `[[a.b]]`) of each table written with one.
    headers: Vec<(KeyPath, Range<usize>)>,
    /// The byte offset of each line break, in order: a line is a binary search away, where
    /// counting from the top for each of 10,000 problems took seconds.
    breaks: Vec<usize>,
}

impl<'a> Locator<'a> {
    pub(crate) fn new(text: &'a str, document: &Document<String>) -> Self {
        let mut locator = Self {
            text,
            starts: HashMap::new(),
            spans: Vec::new(),
            statements: HashMap::new(),
            headers: Vec::new(),
            breaks: text.match_indices('\n').map(|(offset, _)| offset).collect(),
        };
        if let Some(root) = document.as_item().as_table() {
            locator.visit_table(&KeyPath::root(), root);
        }
        locator
    }

    /// The line of `path`, or of its nearest ancestor present in the file.
    pub(crate) fn line_of(&self, path: &KeyPath) -> Option<usize> {
        nearest(&self.starts, path).map(|(_, &offset)| {
            // As `line_at`: 1 + the line breaks before `offset`.
            1 + self
                .breaks
                .partition_point(|&at| at < offset.min(self.text.len()))
        })
    }

    /// The innermost path whose key or value covers `offset`.
    pub(crate) fn path_at(&self, offset: usize) -> KeyPath {
        self.spans
            .iter()
            .filter(|(_, span)| span.contains(&offset) || (span.is_empty() && span.start == offset))
            .min_by_key(|(path, span)| (span.len(), usize::MAX - path.segments().len()))
            .map(|(path, _)| path.clone())
            .unwrap_or_default()
    }

    /// The `key = value` that holds `path` (it, or the nearest ancestor written as one),
    /// with its path and byte range; `None` for a path under a table header.
    pub(crate) fn statement(&self, path: &KeyPath) -> Option<(KeyPath, Range<usize>)> {
        nearest(&self.statements, path).map(|(path, range)| (path, range.clone()))
    }

    /// Everything the file writes at `path` and under it when that is a table, not a
    /// `key = value`: the first part of a dotted key (`zz` of `zz.a = 1`), a table header
    /// (`[pools.p.helth]`) or an array of tables, with every statement and header under it.
    /// Empty when the file writes nothing there.
    pub(crate) fn section(&self, path: &KeyPath) -> Vec<Range<usize>> {
        let statements = self
            .statements
            .iter()
            .filter(|(at, _)| at.starts_with(path))
            .map(|(_, range)| range.clone());
        let headers = self
            .headers
            .iter()
            .filter(|(at, _)| at.starts_with(path))
            .map(|(_, range)| range.clone());
        statements.chain(headers).collect()
    }

    pub(crate) fn diagnostic(&self, problem: Problem) -> Diagnostic {
        Diagnostic {
            line: self.line_of(&problem.path),
            path: problem.path.to_string(),
            message: problem.message,
        }
    }

    /// Where the statement whose key has a part at `offset` begins: the first non-blank
    /// byte of its line. A dotted key's last part (`client` in `timeouts.client = "1s"`) is
    /// not where its statement begins, and blanking from there would leave `timeouts.`.
    fn line_start(&self, offset: usize) -> usize {
        let line = self.text[..offset].rfind('\n').map_or(0, |at| at + 1);
        let blank = self.text[line..offset]
            .bytes()
            .take_while(|byte| matches!(byte, b' ' | b'\t'))
            .count();
        line + blank
    }

    fn record(&mut self, path: &KeyPath, start: Option<usize>, spans: [Option<Range<usize>>; 2]) {
        if let Some(start) = start {
            self.starts.entry(path.clone()).or_insert(start);
        }
        for span in spans.into_iter().flatten() {
            self.spans.push((path.clone(), span));
        }
    }

    fn visit_table(&mut self, path: &KeyPath, table: &Table) {
        for (name, item) in table.iter() {
            let child = path.key(name);
            let key_span = table.key(name).and_then(|key| key.span());
            let start = key_span.as_ref().or(item.span().as_ref()).map(|s| s.start);
            if let (Some(key), Some(value), Item::Value(_)) = (&key_span, item.span(), item) {
                self.statements
                    .insert(child.clone(), self.line_start(key.start)..value.end);
            }
            self.record(&child, start, [key_span, item.span()]);
            self.visit_item(&child, item);
        }
    }

    fn visit_item(&mut self, path: &KeyPath, item: &Item) {
        match item {
            Item::Table(table) => {
                if let Some(span) = table.span().filter(|_| !table.is_dotted()) {
                    self.headers.push((path.clone(), span));
                }
                self.visit_table(path, table);
            }
            Item::ArrayOfTables(array) => {
                for (index, table) in array.iter().enumerate() {
                    let element = path.index(index);
                    let span = table.span();
                    if let Some(span) = &span {
                        self.headers.push((element.clone(), span.clone()));
                    }
                    self.record(&element, span.as_ref().map(|s| s.start), [span, None]);
                    self.visit_table(&element, table);
                }
            }
            Item::Value(value) => self.visit_value(path, value),
            Item::None => {}
        }
    }

    fn visit_value(&mut self, path: &KeyPath, value: &Value) {
        match value {
            Value::Array(array) => {
                for (index, value) in array.iter().enumerate() {
                    let element = path.index(index);
                    let span = value.span();
                    self.record(&element, span.as_ref().map(|s| s.start), [span, None]);
                    self.visit_value(&element, value);
                }
            }
            Value::InlineTable(table) => {
                for (name, value) in table.iter() {
                    let child = path.key(name);
                    let key_span = table.key(name).and_then(|key| key.span());
                    let start = key_span.as_ref().or(value.span().as_ref()).map(|s| s.start);
                    self.record(&child, start, [key_span, value.span()]);
                    self.visit_value(&child, value);
                }
            }
            _ => {}
        }
    }
}

/// The entry of `map` for `path` or, failing that, for its nearest ancestor, with the path
/// it was found at.
fn nearest<'m, V>(map: &'m HashMap<KeyPath, V>, path: &KeyPath) -> Option<(KeyPath, &'m V)> {
    let mut current = Some(path.clone());
    while let Some(path) = current {
        if let Some(value) = map.get(&path) {
            return Some((path, value));
        }
        current = path.parent();
    }
    None
}

/// The 1-based line holding byte `offset` of `text` (which need not be UTF-8: a file that
/// is not is placed by it too).
pub fn line_at(text: &[u8], offset: usize) -> usize {
    let end = offset.min(text.len());
    1 + text[..end].iter().filter(|&&b| b == b'\n').count()
}

/// A best guess at the key path of a line in a file that does not parse: the last
/// table header above it, plus the key written on the line itself.
pub(crate) fn guess_path(text: &str, line: usize) -> String {
    let mut table = String::new();
    let mut array_counts: HashMap<String, usize> = HashMap::new();
    for (number, raw) in text.lines().enumerate() {
        let content = raw.trim();
        let header = if let Some(name) = content.strip_prefix("[[") {
            name.split_once("]]").map(|(name, _)| {
                let name = compact_key(name);
                let count = array_counts.entry(name.clone()).or_insert(0);
                *count += 1;
                format!("{name}[{}]", *count - 1)
            })
        } else if let Some(name) = content.strip_prefix('[') {
            name.split_once(']').map(|(name, _)| compact_key(name))
        } else {
            None
        };
        if let Some(header) = header {
            table = header;
            if number + 1 == line {
                return table;
            }
            continue;
        }
        if number + 1 == line {
            let key = content
                .split_once('=')
                .map(|(key, _)| compact_key(key))
                .filter(|key| {
                    !key.is_empty()
                        && key
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || "_-.\"' ".contains(c))
                });
            return match key {
                Some(key) if table.is_empty() => key,
                Some(key) => format!("{table}.{key}"),
                None => table,
            };
        }
    }
    table
}

/// A hint for the commonest syntax error, a string value without quotes
/// (`level = info`), or nothing.
pub(crate) fn unquoted_string_hint(text: &str, line: usize) -> &'static str {
    let value = text
        .lines()
        .nth(line.saturating_sub(1))
        .and_then(|content| content.split_once('='))
        .map(|(_, value)| value.trim());
    match value {
        Some(value)
            if value.starts_with(|c: char| c.is_ascii_alphabetic())
                && !["true", "false", "inf", "nan"].contains(&value) =>
        {
            " (strings need quotes)"
        }
        _ => "",
    }
}

/// A dotted key as written, without the spaces TOML allows around dots.
fn compact_key(key: &str) -> String {
    key.split('.').map(str::trim).collect::<Vec<_>>().join(".")
}

/// The byte offset of the line whose key has the most dotted parts (a table header or a
/// `key = value` line), for an error the parser gives no place for: a key nested past its
/// recursion limit. Dots inside quotes and after the `=` do not count.
pub(crate) fn deepest_key_offset(text: &str) -> usize {
    let mut deepest = (0, 0);
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let mut dots = 0;
        let mut quote = None;
        for byte in line.bytes() {
            match (quote, byte) {
                (None, b'"' | b'\'') => quote = Some(byte),
                (Some(open), _) if byte == open => quote = None,
                (None, b'.') => dots += 1,
                (None, b'=' | b'#') => break,
                _ => {}
            }
        }
        if dots > deepest.0 {
            deepest = (dots, offset);
        }
        offset += line.len();
    }
    deepest.1
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
[pools.web]
nodes = [
  { address = \"127.0.0.1:1\" },
  { address = \"127.0.0.1:2\", weight = 3 },
]

[[virtual_servers.web.routes]]
pool = \"web\"

[[virtual_servers.web.routes]]
pool = \"api\"
";

    fn locator_lines(path: KeyPath) -> Option<usize> {
        let document = Document::parse(TEXT.to_owned()).unwrap();
        Locator::new(TEXT, &document).line_of(&path)
    }

    #[test]
    fn lines_of_paths() {
        let pool = KeyPath::root().key("pools").key("web");
        assert_eq!(locator_lines(pool.clone()), Some(1));
        assert_eq!(locator_lines(pool.key("nodes")), Some(2));
        assert_eq!(locator_lines(pool.key("nodes").index(1)), Some(4));
        assert_eq!(
            locator_lines(pool.key("nodes").index(1).key("weight")),
            Some(4)
        );
        let routes = KeyPath::root()
            .key("virtual_servers")
            .key("web")
            .key("routes");
        assert_eq!(locator_lines(routes.index(1)), Some(10));
        assert_eq!(locator_lines(routes.index(1).key("pool")), Some(11));
        // Absent keys fall back to their nearest present ancestor.
        assert_eq!(locator_lines(routes.index(0).key("host")), Some(7));
        assert_eq!(locator_lines(KeyPath::root().key("origins")), None);
    }

    #[test]
    fn paths_of_offsets() {
        let document = Document::parse(TEXT.to_owned()).unwrap();
        let locator = Locator::new(TEXT, &document);
        let offset = TEXT.find("weight").unwrap();
        assert_eq!(
            locator.path_at(offset).to_string(),
            "pools.web.nodes[1].weight"
        );
        let offset = TEXT.find("3 }").unwrap();
        assert_eq!(
            locator.path_at(offset).to_string(),
            "pools.web.nodes[1].weight"
        );
        let offset = TEXT.find("\"api\"").unwrap();
        assert_eq!(
            locator.path_at(offset).to_string(),
            "virtual_servers.web.routes[1].pool"
        );
    }

    #[test]
    fn guessed_paths_for_broken_files() {
        let text = "[log]\nlevel = info\n[[origins]]\n[[origins]]\nname = \n";
        assert_eq!(guess_path(text, 2), "log.level");
        assert_eq!(guess_path(text, 4), "origins[1]");
        assert_eq!(guess_path(text, 5), "origins[1].name");
        assert_eq!(guess_path("x = \n", 1), "x");
    }
}
