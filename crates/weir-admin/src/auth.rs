//! Bearer-token authentication of admin requests: the token is the content of
//! `admin.token_file` (surrounding whitespace ignored), read at start and again whenever
//! the configuration's generation changes. When the file cannot be read, every request
//! that needs the token is refused (fail closed) until it can.

use std::sync::Mutex;

use weir_config::Config;

/// The token a configuration names: `Ok(None)` when none, `Err` when unreadable.
type Token = Result<Option<Vec<u8>>, String>;

/// The token of the running configuration, cached by generation.
#[derive(Debug, Default)]
pub(crate) struct TokenCache {
    cached: Mutex<Option<(u64, Token)>>,
}

/// Whether a request may go on.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Allowed,
    /// Missing or wrong token.
    Denied,
    /// The token file is unreadable: refused, with why.
    Unavailable(String),
}

impl TokenCache {
    /// The cache of the token read at start, for the model of `generation`: a request after
    /// a reload reads the token again (and warns again of a short one).
    pub(crate) fn started(generation: u64, token: Option<Vec<u8>>) -> TokenCache {
        TokenCache {
            cached: Mutex::new(Some((generation, Ok(token)))),
        }
    }

    /// The token `config` names, read now.
    pub(crate) fn read(config: &Config) -> Token {
        config
            .admin
            .as_ref()
            .map_or(Ok(None), weir_config::Admin::read_token)
    }

    /// Checks an `Authorization` header value against the token of `config`.
    pub(crate) fn check(
        &self,
        generation: u64,
        config: &Config,
        authorization: Option<&[u8]>,
    ) -> Verdict {
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        // Read once per generation, and again for each request while it cannot be read (a
        // token file rewritten in place, empty for a moment): the API comes back by itself.
        let stale = |(at, token): &(u64, Token)| *at != generation || token.is_err();
        if cached.as_ref().is_none_or(stale) {
            let failing = cached
                .as_ref()
                .is_some_and(|(at, token)| *at == generation && token.is_err());
            // The start's read is cached (`Control::new` warned then): any other is after a
            // reload.
            let after_reload = cached.is_some();
            let token = TokenCache::read(config);
            match &token {
                Err(error) if !failing => {
                    tracing::error!(%error, "admin token unavailable; API requests are refused");
                }
                Ok(_) if failing => tracing::info!("admin token readable again"),
                Ok(Some(token)) if after_reload => warn_if_short(token),
                _ => {}
            }
            *cached = Some((generation, token));
        }
        let Some((_, token)) = cached.as_ref() else {
            return Verdict::Denied;
        };
        match token {
            Err(error) => Verdict::Unavailable(error.clone()),
            Ok(None) => Verdict::Allowed,
            Ok(Some(token)) => {
                let offered = authorization.and_then(|value| {
                    let (scheme, rest) = value.split_at_checked(7)?;
                    scheme
                        .eq_ignore_ascii_case(b"bearer ")
                        .then(|| rest.trim_ascii())
                });
                match offered {
                    Some(offered) if same(offered, token) => Verdict::Allowed,
                    _ => Verdict::Denied,
                }
            }
        }
    }
}

/// The shortest token weir does not warn about: 16 random characters or more.
const SHORT_TOKEN: usize = 16;

/// Warns when the admin token is short enough to guess (it is accepted all the same: the
/// operator chose it).
pub(crate) fn warn_if_short(token: &[u8]) {
    if token.len() < SHORT_TOKEN {
        tracing::warn!(
            length = token.len(),
            "admin.token_file holds a short token, easy to guess; use at least {SHORT_TOKEN} \
             random characters (openssl rand -hex 32 > FILE)"
        );
    }
}

/// Compares in time that depends only on the lengths, not on where the bytes differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens() {
        let dir = std::env::temp_dir().join(format!("weir-admin-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "s3cret\n").unwrap();
        let config = weir_config::parse_str(
            &format!(
                "[admin]\nlisten = \"0.0.0.0:9\"\ntoken_file = \"{}\"\n\
                 [pools.p]\nnodes = [{{ address = \"127.0.0.1:1\" }}]\n\
                 [virtual_servers.v]\nlisten = \"127.0.0.1:2\"\npool = \"p\"\n",
                file.display()
            ),
            "t.toml",
        )
        .unwrap();
        let cache = TokenCache::default();
        assert_eq!(
            cache.check(1, &config, Some(b"Bearer s3cret")),
            Verdict::Allowed
        );
        assert_eq!(
            cache.check(1, &config, Some(b"bearer  s3cret ")),
            Verdict::Allowed
        );
        assert_eq!(
            cache.check(1, &config, Some(b"Bearer s3cre")),
            Verdict::Denied
        );
        assert_eq!(
            cache.check(1, &config, Some(b"Basic s3cret")),
            Verdict::Denied
        );
        assert_eq!(cache.check(1, &config, None), Verdict::Denied);
        // Removed: the next generation refuses everything.
        std::fs::remove_file(&file).unwrap();
        assert_eq!(
            cache.check(1, &config, Some(b"Bearer s3cret")),
            Verdict::Allowed
        );
        assert!(matches!(
            cache.check(2, &config, Some(b"Bearer s3cret")),
            Verdict::Unavailable(_)
        ));
        // Readable again: the API comes back without a reload.
        std::fs::write(&file, "s3cret\n").unwrap();
        assert_eq!(
            cache.check(2, &config, Some(b"Bearer s3cret")),
            Verdict::Allowed
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A short token is warned of at start (`Control::new`) and again at the first request
    /// after a reload, not at a first request with no reload since the start.
    #[test]
    fn a_short_token_is_warned_of_after_each_reload() {
        let dir = std::env::temp_dir().join(format!("weir-admin-short-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "short\n").unwrap();
        let config = weir_config::parse_str(
            &format!(
                "[admin]\nlisten = \"127.0.0.1:9\"\ntoken_file = \"{}\"\n\
                 [pools.p]\nnodes = [{{ address = \"127.0.0.1:1\" }}]\n\
                 [virtual_servers.v]\nlisten = \"127.0.0.1:2\"\npool = \"p\"\n",
                file.display()
            ),
            "t.toml",
        )
        .unwrap();
        let cache = TokenCache::started(1, Some(b"short".to_vec()));
        let check = |generation| {
            crate::test_log::logged(|| {
                assert_eq!(
                    cache.check(generation, &config, Some(b"Bearer short")),
                    Verdict::Allowed
                );
            })
        };
        assert_eq!(check(1), "");
        assert!(check(3).contains("short token"));
        assert_eq!(check(3), "");
        assert!(check(4).contains("short token"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
