//! The cache endpoints of the REST API (`docs/admin-api.md`): what each virtual server's
//! cache holds, purge by URL, prefix, tag or everything, and bans by pattern. They act on
//! the running cache only (nothing is written to the config file: contents are not
//! configuration).

use serde_json::{Value, json};
use weir_cache::{Cache, PurgeError, UnixTime};
use weir_proxy::Live;

use crate::http::{Method, Response};

/// Why a request was refused: the response to send.
type Refusal = Box<Response>;

/// A cache endpoint, told from the request's method and path
/// ([`crate::api`]'s endpoints are told the same way, before the body is read).
pub(crate) enum Endpoint<'a> {
    List,
    Summary(&'a str),
    Purge(&'a str),
    Bans(&'a str),
    Ban(&'a str),
}

/// Which cache endpoint `method` and `segments` name; `None` when the path is not under
/// `/api/v1/cache`, `Some(Err(..))` when it is but names no resource (404) or takes another
/// method (405 with `Allow`).
pub(crate) fn endpoint<'a>(
    live: &Live,
    method: Method,
    segments: &[&'a str],
) -> Option<Result<Endpoint<'a>, Refusal>> {
    let endpoint = match (method, segments) {
        (Method::Get | Method::Head, ["", "api", "v1", "cache"]) => Endpoint::List,
        (Method::Get | Method::Head, ["", "api", "v1", "cache", name]) => Endpoint::Summary(name),
        (Method::Post, ["", "api", "v1", "cache", name, "purge"]) => Endpoint::Purge(name),
        (Method::Get | Method::Head, ["", "api", "v1", "cache", name, "bans"]) => {
            Endpoint::Bans(name)
        }
        (Method::Post, ["", "api", "v1", "cache", name, "bans"]) => Endpoint::Ban(name),
        // Another method for a resource that exists: 405 with the methods it takes. A path
        // that names none (another word after the name, an unknown virtual server or one
        // without a cache) is 404 whatever the method.
        (_, ["", "api", "v1", "cache", rest @ ..]) if rest.len() <= 2 => {
            let allow = match rest {
                [] | [_] => "GET, HEAD",
                [_, "purge"] => "POST",
                [_, "bans"] => "GET, HEAD, POST",
                _ => return None,
            };
            return Some(match rest.first() {
                Some(name) => with_cache(live, name, |_| Err(not_allowed(allow))),
                None => Err(not_allowed(allow)),
            });
        }
        _ => return None,
    };
    let named = match endpoint {
        Endpoint::List => None,
        Endpoint::Summary(name)
        | Endpoint::Purge(name)
        | Endpoint::Bans(name)
        | Endpoint::Ban(name) => Some(name),
    };
    Some(match named {
        Some(name) => with_cache(live, name, |_| Ok(())).map(|()| endpoint),
        None => Ok(endpoint),
    })
}

/// Answers a cache endpoint ([`endpoint`]); `body` is the request's.
pub(crate) fn respond(live: &Live, endpoint: Endpoint<'_>, body: &[u8]) -> Response {
    let result = match endpoint {
        Endpoint::List => Ok(list(live)),
        Endpoint::Summary(name) => with_cache(live, name, |cache| {
            Ok(Response::json(200, &summary(name, cache)))
        }),
        Endpoint::Purge(name) => with_cache(live, name, |cache| purge(cache, body)),
        Endpoint::Bans(name) => {
            with_cache(live, name, |cache| Ok(Response::json(200, &bans(cache))))
        }
        Endpoint::Ban(name) => with_cache(live, name, |cache| ban(cache, body)),
    };
    result.unwrap_or_else(|refusal| *refusal)
}

/// Every virtual server with a cache, and what it holds.
fn list(live: &Live) -> Response {
    let model = live.current();
    let caches: Vec<Value> = model
        .virtual_servers
        .iter()
        .filter_map(|vs| Some(summary(&vs.config.name, vs.cache()?)))
        .collect();
    Response::json(200, &json!({ "caches": caches }))
}

fn summary(name: &str, cache: &Cache) -> Value {
    let stats = cache.stats();
    json!({
        "virtual_server": name,
        "size": cache.store().capacity(),
        "bytes": stats.bytes,
        "objects": stats.objects,
        "evictions": stats.evictions,
        "bans": cache.bans().len(),
    })
}

fn with_cache<T>(
    live: &Live,
    name: &str,
    act: impl FnOnce(&Cache) -> Result<T, Refusal>,
) -> Result<T, Refusal> {
    let model = live.current();
    let Some(vs) = model.virtual_server(name) else {
        return Err(Box::new(Response::error(
            404,
            format!("no virtual server \"{name}\""),
        )));
    };
    match vs.cache() {
        Some(cache) => act(cache),
        None => Err(Box::new(Response::error(
            404,
            format!("virtual server \"{name}\" has no cache ([virtual_servers.{name}.cache])"),
        ))),
    }
}

/// What a purge body may say.
const PURGES: &str = "expected one of {\"url\": \"http://host/path\"}, \
    {\"prefix\": \"http://host/dir/\"}, {\"tag\": \"name\"} or {\"all\": true}";

/// `{"url": ...}`, `{"prefix": ...}`, `{"tag": ...}` or `{"all": true}`: how many objects went.
/// Exactly one of them, of its type: a body that says more, or says it otherwise, purges
/// nothing (a mistyped `url` beside `"all": true` must not empty the cache).
fn purge(cache: &Cache, body: &[u8]) -> Result<Response, Refusal> {
    let request = object(body)?;
    let (key, value) = only_field(&request, PURGES)?;
    let purged = match (key, value) {
        ("url", Value::String(url)) => cache.purge_url(url).map_err(refused)?,
        ("prefix", Value::String(prefix)) => cache.purge_prefix(prefix).map_err(refused)?,
        ("tag", Value::String(tag)) => cache.purge_tag(tag),
        ("all", Value::Bool(true)) => cache.purge_all(),
        ("url" | "prefix" | "tag", _) => {
            return Err(bad_request(format!("\"{key}\" must be a string")));
        }
        ("all", _) => return Err(bad_request("\"all\" must be true".to_owned())),
        _ => return Err(bad_request(format!("unknown field \"{key}\": {PURGES}"))),
    };
    Ok(Response::json(200, &json!({ "purged": purged })))
}

/// The body's one field, or a 400 saying `expected` (a name given twice is two fields).
fn only_field<'a>(request: &'a Fields, expected: &str) -> Result<(&'a str, &'a Value), Refusal> {
    match request.0.as_slice() {
        [(key, value)] => Ok((key.as_str(), value)),
        _ => Err(bad_request(expected.to_owned())),
    }
}

fn not_allowed(allow: &'static str) -> Refusal {
    Box::new(Response::method_not_allowed(allow))
}

fn bad_request(message: String) -> Refusal {
    Box::new(Response::error(400, message))
}

/// `{"pattern": "regex over http://host/path?query"}`: bans what is stored now.
fn ban(cache: &Cache, body: &[u8]) -> Result<Response, Refusal> {
    const EXPECTED: &str =
        "expected {\"pattern\": \"regular expression over http://host/path?query\"}";
    let request = object(body)?;
    let pattern = match only_field(&request, EXPECTED)? {
        ("pattern", Value::String(pattern)) => pattern,
        ("pattern", _) => return Err(bad_request("\"pattern\" must be a string".to_owned())),
        (key, _) => return Err(bad_request(format!("unknown field \"{key}\": {EXPECTED}"))),
    };
    let sequence = cache.ban(pattern, UnixTime::now()).map_err(refused)?;
    Ok(Response::json(
        200,
        &json!({ "ban": sequence, "pattern": pattern }),
    ))
}

fn bans(cache: &Cache) -> Value {
    let bans: Vec<Value> = cache
        .bans()
        .into_iter()
        .map(|ban| json!({ "ban": ban.sequence, "pattern": ban.pattern, "added": ban.added.0 }))
        .collect();
    json!({ "bans": bans })
}

/// A JSON object's fields in the order written, a name given twice kept twice: a map
/// keeps only the last, and `{"url": A, "url": B}` would purge B as if A were not there.
pub(crate) struct Fields(pub(crate) Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for Fields {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Fields;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Fields, A::Error> {
                let mut fields = Vec::new();
                while let Some(field) = map.next_entry::<String, Value>()? {
                    fields.push(field);
                }
                Ok(Fields(fields))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

fn object(body: &[u8]) -> Result<Fields, Refusal> {
    serde_json::from_slice(body).map_err(|error| {
        let message = match error.classify() {
            serde_json::error::Category::Data => "the body must be a JSON object".to_owned(),
            _ => format!("invalid JSON: {error}"),
        };
        Box::new(Response::error(400, message))
    })
}

fn refused(error: PurgeError) -> Refusal {
    let status = match error {
        PurgeError::TooManyBans(_) => 429,
        PurgeError::Url(_) | PurgeError::Pattern(_) => 400,
    };
    Box::new(Response::error(status, error.to_string()))
}
