//! weir's configuration: the TOML file, read once and turned into a validated
//! [`Config`] that the rest of weir reads without ever seeing a string from the file.
//!
//! Loading happens in two layers. `schema` (private) mirrors the file with serde
//! (`deny_unknown_fields` everywhere); [`validate`] converts it into the [`model`],
//! checking every value and cross reference and collecting *every* problem. Each
//! problem becomes a [`Diagnostic`] with the file, the line and the key path:
//!
//! ```text
//! weir.toml:14: pools.web.nodes[2].address: invalid socket address "10.0.0.1:99999"
//! ```
//!
//! Syntax errors, unknown keys and wrong types are reported the same way.
//! `examples/weir.toml` in the repository documents every key and its default.
//!
//! # Example
//!
//! ```
//! let text = r#"
//! [virtual_servers.web]
//! listen = "127.0.0.1:8080"
//! pool = "web"
//!
//! [pools.web]
//! nodes = [{ address = "127.0.0.1:8081" }]
//! "#;
//! let config = weir_config::parse_str(text, "weir.toml").unwrap();
//! assert_eq!(config.virtual_servers[0].name, "web");
//! assert_eq!(config.pool(config.virtual_servers[0].default_pool).name, "web");
//!
//! let error = weir_config::parse_str("[pools.web]\nretries = -1\n", "weir.toml").unwrap_err();
//! assert!(error.to_string().contains("weir.toml:2: pools.web.retries: must be between 0 and 100"));
//! ```

pub mod cache;
pub mod defaults;
pub mod diff;
pub mod edit;
pub mod error;
pub mod http2;
mod locate;
pub mod model;
mod schema;
pub mod units;
pub mod validate;

use std::path::Path;

pub use error::{ConfigError, Diagnostic, KeyPath};
pub use locate::line_at;
pub use model::*;
pub use schema::Named;

use crate::locate::Locator;
use crate::schema::FileConfig;

/// The configuration `weir serve` runs when given no file: virtual server `web` on
/// 127.0.0.1:8080 balancing two built-in origins, with the admin listener on
/// 127.0.0.1:9090.
pub const EMBEDDED_DEFAULT: &str = include_str!("embedded_default.toml");

/// The file name that errors in [`EMBEDDED_DEFAULT`] would carry.
pub const EMBEDDED_DEFAULT_NAME: &str = "<embedded default>";

/// The largest configuration file read, in bytes. A config with ten thousand virtual
/// servers is a few MiB; a file far past this bound is a mistake (a log or an image
/// named by accident), and parsing it would cost a running weir, asked to reload it,
/// gigabytes of memory before it could say so.
pub const MAX_CONFIG_BYTES: u64 = 64 * 1024 * 1024;

/// Reads and validates a configuration file. Read errors are reported as a
/// [`ConfigError`] too, as is a file larger than [`MAX_CONFIG_BYTES`]. The
/// file may be a pipe (`weir check --config <(generate)`). The result's `source`
/// is `path`.
pub fn load_file(path: &Path) -> Result<Config, ConfigError> {
    let file_name = path.display().to_string();
    let bytes = read_bounded(path).map_err(|error| {
        ConfigError::single(
            &file_name,
            None,
            String::new(),
            format!("cannot read file: {error}"),
        )
    })?;
    let text = String::from_utf8(bytes).map_err(|error| {
        // TOML is UTF-8: say where the first byte that is not is, as any other error does.
        let at = error.utf8_error().valid_up_to();
        let line = line_at(error.as_bytes(), at);
        let line_start = error.as_bytes()[..at]
            .iter()
            .rposition(|&byte| byte == b'\n')
            .map_or(0, |newline| newline + 1);
        let column = at - line_start + 1;
        ConfigError::single(
            &file_name,
            Some(line),
            String::new(),
            format!(
                "the file is not UTF-8 (TOML must be): byte {column} of this line is not; save it as UTF-8"
            ),
        )
    })?;
    parse_file_text(&text, path)
}

/// The bytes of the config file at `path`, refused past [`MAX_CONFIG_BYTES`] without
/// reading further (an `InvalidData` error): every reader of a config file (the admin
/// API's too) reads it through this.
pub fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let meta = std::fs::metadata(path)?;
    let too_large = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "larger than {} MiB, the most a config may be",
                MAX_CONFIG_BYTES >> 20
            ),
        )
    };
    if meta.is_file() && meta.len() > MAX_CONFIG_BYTES {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // A pipe has no length, and a file may grow between the stat and the read.
    std::fs::File::open(path)?
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(too_large());
    }
    Ok(bytes)
}

/// Validates `text` as if it were the content of the file at `path` (which it need not be
/// yet: the admin API validates a candidate before writing it): errors name `path`,
/// relative file names resolve against its directory, and the result's `source` is `path`.
pub fn parse_file_text(text: &str, path: &Path) -> Result<Config, ConfigError> {
    let file_name = path.display().to_string();
    let mut config = parse_str(text, &file_name)?;
    config.source = Some(path.to_path_buf());
    // Files named in the config are relative to the config file, not to the
    // directory weir happens to be started in.
    if let Some(dir) = path.parent() {
        for file in config.file_refs_mut() {
            if file.path.is_relative() {
                file.path = dir.join(&file.path);
            }
        }
    }
    Ok(config)
}

/// The `admin.token_file` the file at `path` names, resolved against its directory as
/// [`load_file`] resolves it, read even when the file does not validate as a whole:
/// `weir reload --admin` asks the running weir about a file it refuses, and must not be
/// turned away for want of the token. `None` when the file cannot be read, is not TOML
/// or names none.
pub fn token_file_of(path: &Path) -> Option<std::path::PathBuf> {
    let text = std::fs::read_to_string(path).ok()?;
    let document = parse_document(&text).ok()?;
    let file = document.get("admin")?.get("token_file")?.as_str()?;
    let file = Path::new(file);
    Some(match path.parent() {
        Some(dir) if file.is_relative() => dir.join(file),
        _ => file.to_path_buf(),
    })
}

/// Parses and validates configuration text; `file_name` is only used in errors.
/// The result's `source` is `None`.
pub fn parse_str(text: &str, file_name: &str) -> Result<Config, ConfigError> {
    let mut config = parse_toml(text, file_name, |file: &FileConfig| Config::try_from(file))?;
    // One map of the file for every file it names (a reload of a thousand certificates
    // must not parse the file a thousand times).
    let names = config.pools.iter().any(|pool| !pool.names.is_empty());
    if (names || config.file_refs_mut().next().is_some())
        && let Ok(document) = parse_document(text)
    {
        let locator = Locator::new(text, &document);
        for file in config.file_refs_mut() {
            file.line = locator.line_of(&file.key);
        }
        // Nodes given by name are resolved later (at start, by a reload): their errors
        // need the line too.
        for named in config.pools.iter_mut().flat_map(|pool| &mut pool.names) {
            named.line = locator.line_of(&named.key);
        }
    }
    Ok(config)
}

/// Parses `text` as a TOML document of the serde schema `F` and turns it into a model with
/// `validate`, reporting syntax errors, unknown keys, wrong types and every validation
/// [`Problem`](error::Problem) with the file, the line and the key path. [`parse_str`] is this
/// for `weir serve`'s file; other commands with their own files (`weir tunnel`) use it too.
pub fn parse_toml<F, M>(
    text: &str,
    file_name: &str,
    validate: impl FnOnce(&F) -> Result<M, Vec<error::Problem>>,
) -> Result<M, ConfigError>
where
    F: serde::de::DeserializeOwned,
{
    let document = parse_document(text).map_err(|error| {
        let line = locate::line_at(text.as_bytes(), error.offset);
        ConfigError::single(
            file_name,
            Some(line),
            locate::guess_path(text, line),
            format!(
                "TOML syntax error: {}{}",
                error.message.trim_end(),
                locate::unquoted_string_hint(text, line)
            ),
        )
    })?;
    // The map of key paths to lines is only needed to report a problem: it is built from
    // a second parse then, so a valid file (every reload) is parsed once.
    let locator = || {
        parse_document(text)
            .map(|document| Locator::new(text, &document))
            .ok()
    };
    let schema = deserialize::<F>(text, document);
    let mut errors = schema.errors;
    if let Some(file) = schema.file {
        match validate(&file) {
            Ok(model) if errors.is_empty() => return Ok(model),
            Ok(_) => {}
            // With lines set aside, what they held is not the file's problem again.
            Err(problems) => {
                let locator = locator();
                errors.extend(
                    problems
                        .into_iter()
                        .filter(|problem| {
                            !schema.blanked.iter().any(|b| {
                                problem.path.starts_with(b)
                                    || problem.because.as_ref().is_some_and(|because| {
                                        b.starts_with(because) || because.starts_with(b)
                                    })
                            })
                        })
                        .map(|problem| match &locator {
                            Some(locator) => locator.diagnostic(problem),
                            None => Diagnostic {
                                line: None,
                                path: problem.path.to_string(),
                                message: problem.message,
                            },
                        }),
                );
            }
        }
    }
    // File order reads best; problems without a line (whole-file ones) go last.
    errors.sort_by_key(|diagnostic| diagnostic.line.unwrap_or(usize::MAX));
    Err(ConfigError {
        file: file_name.to_owned(),
        errors,
    })
}

/// What the schema made of a file: the file, unless a problem stopped it; the unknown keys
/// and wrong values found; the `key = value` lines set aside to find them.
struct Schema<F> {
    file: Option<F>,
    errors: Vec<Diagnostic>,
    blanked: Vec<KeyPath>,
}

/// At most this many unknown keys and wrong values are reported from one file.
const MAX_SCHEMA_ERRORS: usize = 20;

/// Deserializes the parsed `text` into the schema `F`. serde stops at the first unknown
/// key or wrong value; to report every one, the offending `key = value` line is blanked
/// (spaces, so every line keeps its number) and the text deserialized again, up to
/// [`MAX_SCHEMA_ERRORS`]; an unknown table (a header, or a dotted key's first part) is
/// blanked with everything under it. It stops early where nothing can be blanked,
/// and at a "missing required key" that a blanked line caused: that one is not the file's.
fn deserialize<F>(text: &str, document: toml_edit::Document<String>) -> Schema<F>
where
    F: serde::de::DeserializeOwned,
{
    let mut schema = Schema {
        file: None,
        errors: Vec::new(),
        blanked: Vec::new(),
    };
    let mut error = match toml_edit::de::from_document(document) {
        Ok(file) => {
            schema.file = Some(file);
            return schema;
        }
        Err(error) => error,
    };
    // One map of the file for every round: blanking keeps every byte offset, so the
    // original's spans hold for each blanked text (a map per round made 20 maps of a
    // 10,000-rule file, seconds of `weir check`).
    let locator = parse_document(text)
        .ok()
        .map(|document| Locator::new(text, &document));
    let mut text = text.to_owned();
    loop {
        let offset = error.span().map_or(0, |span| span.start);
        let mut path = error
            .span()
            .and_then(|_| locator.as_ref().map(|l| l.path_at(offset)))
            .unwrap_or_default();
        let (missing_key, mut message) = error::explain_serde_message(error.message());
        // The TOML reader hands a date or time on as a table of its own, with one private
        // key: name what was written, where a value or a table belongs.
        let written = error.span().and_then(|span| text.get(span));
        if written.is_some_and(|value| value.trim().parse::<toml_edit::Datetime>().is_ok()) {
            let quoted = message
                .strip_prefix("invalid type: string ")
                .and_then(|rest| rest.find(", expected").map(|at| rest[at..].to_owned()));
            message = match (error.message().contains(schema::TOML_DATETIME_KEY), quoted) {
                (true, _) => "invalid type: date-time, expected a table".to_owned(),
                // At the top level the reader hands it on as a string.
                (false, Some(expected)) => format!("invalid type: date-time{expected}"),
                (false, None) => {
                    message.replacen("invalid type: table", "invalid type: date-time", 1)
                }
            };
        }
        let line = error
            .span()
            .map(|_| locate::line_at(text.as_bytes(), offset))
            .or_else(|| locator.as_ref().and_then(|l| l.line_of(&path)));
        if let Some(key) = missing_key {
            path = path.key(&key);
            if schema.blanked.iter().any(|gone| path.starts_with(gone)) {
                return schema;
            }
        }
        schema.errors.push(Diagnostic {
            line,
            path: path.to_string(),
            message,
        });
        // The `key = value` that holds the path, or, for a table (a dotted key's first part,
        // a header), everything written at and under it.
        let statement = locator.as_ref().and_then(|l| {
            l.statement(&path)
                .map(|(at, range)| (at, vec![range]))
                .or_else(|| {
                    // (Never the whole file: a problem without a place stops the report.)
                    let ranges = match path.segments().is_empty() {
                        true => Vec::new(),
                        false => l.section(&path),
                    };
                    Some((path.clone(), ranges)).filter(|(_, ranges)| !ranges.is_empty())
                })
        });
        let Some((statement_path, ranges)) =
            statement.filter(|_| schema.errors.len() < MAX_SCHEMA_ERRORS)
        else {
            return schema;
        };
        for range in ranges {
            blank(&mut text, range);
        }
        schema.blanked.push(statement_path);
        let Ok(document) = parse_document(&text) else {
            return schema;
        };
        match toml_edit::de::from_document::<F>(document) {
            Ok(file) => {
                schema.file = Some(file);
                return schema;
            }
            Err(next) => error = next,
        }
    }
}

/// Replaces every byte of `text[range]` but line breaks with a space, so every line and
/// every byte offset stays where it was.
fn blank(text: &mut String, range: std::ops::Range<usize>) {
    let spaced: String = text[range.clone()]
        .chars()
        .flat_map(|c| {
            let keep = c == '\n' || c == '\r';
            std::iter::repeat_n(
                if keep { c } else { ' ' },
                if keep { 1 } else { c.len_utf8() },
            )
        })
        .collect();
    text.replace_range(range, &spaced);
}

/// The line of `path` in the TOML `text` (or of its nearest ancestor present), if it parses.
pub fn line_of_key(text: &str, path: &KeyPath) -> Option<usize> {
    let document = parse_document(text).ok()?;
    Locator::new(text, &document).line_of(path)
}

/// A TOML syntax error: what is wrong, and the byte offset where (0 when unknown).
struct SyntaxError {
    message: String,
    offset: usize,
}

/// Parses `text` with `toml_edit`, a panic inside the parser included: a malformed file is
/// an error, never the end of the process or of a reload. (toml_edit 0.23 panicked on some
/// inputs that `fuzz/` found, in the code that reports a second error; its later versions
/// keep `expect`s there too.)
fn parse_document(text: &str) -> Result<toml_edit::Document<String>, SyntaxError> {
    let parsed = std::panic::catch_unwind(|| toml_edit::Document::parse(text.to_owned()));
    match parsed {
        Ok(Ok(document)) => Ok(document),
        Ok(Err(error)) => Err(SyntaxError {
            message: error.message().to_owned(),
            // The parser gives no place for a key nested past its limit: the line with
            // the deepest dotted key is where it is.
            offset: error
                .span()
                .map(|span| span.start)
                .or_else(|| {
                    error
                        .message()
                        .contains("recursion limit")
                        .then(|| locate::deepest_key_offset(text))
                })
                .unwrap_or(0),
        }),
        Err(_) => Err(SyntaxError {
            message: "the TOML parser failed on this file (its own error); check its syntax"
                .to_owned(),
            offset: 0,
        }),
    }
}

impl Config {
    /// The name errors in this configuration carry: its file, or `<embedded default>`.
    pub fn file_name(&self) -> String {
        self.source.as_ref().map_or_else(
            || EMBEDDED_DEFAULT_NAME.to_owned(),
            |path| path.display().to_string(),
        )
    }

    /// A configuration error about a file the configuration names (a
    /// certificate that cannot be read, say), reported like a validation error.
    pub fn file_error(&self, file: &FileRef, message: impl Into<String>) -> ConfigError {
        ConfigError::single(
            &self.file_name(),
            file.line,
            file.key.to_string(),
            message.into(),
        )
    }

    /// A configuration error found after validation (a port in use, a reload that the
    /// running process refuses), at `key` and the line of `key` (or of its nearest
    /// ancestor present) when the file can be read again.
    pub fn key_error(&self, key: &KeyPath, message: impl Into<String>) -> ConfigError {
        let line = self
            .source
            .as_ref()
            .and_then(|path| std::fs::read_to_string(path).ok())
            .and_then(|text| line_of_key(&text, key));
        ConfigError::single(&self.file_name(), line, key.to_string(), message.into())
    }

    /// An address at `key` that cannot be listened on, placed like any configuration error
    /// (file, line, key) though the file is valid.
    pub fn listen_error(
        &self,
        key: &KeyPath,
        address: std::net::SocketAddr,
        error: &dyn std::fmt::Display,
    ) -> ConfigError {
        self.key_error(key, format!("cannot listen on {address}: {error}"))
    }
}

/// The built-in configuration ([`EMBEDDED_DEFAULT`]), parsed.
pub fn embedded_default() -> Config {
    // A unit test parses EMBEDDED_DEFAULT, so this cannot fail in a tested build.
    parse_str(EMBEDDED_DEFAULT, EMBEDDED_DEFAULT_NAME)
        .unwrap_or_else(|error| panic!("the embedded default configuration is invalid:\n{error}"))
}

#[cfg(test)]
mod tests;
