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

/// Answers `/api/v1/cache...`; `None` when the path is not one of these.
pub(crate) fn respond(
    live: &Live,
    method: Method,
    segments: &[&str],
    body: &[u8],
) -> Option<Response> {
    let result = match (method, segments) {
        (Method::Get | Method::Head, ["", "api", "v1", "cache"]) => Ok(list(live)),
        (Method::Get | Method::Head, ["", "api", "v1", "cache", name]) => {
            with_cache(live, name, |cache| {
                Ok(Response::json(200, &summary(name, cache)))
            })
        }
        (Method::Post, ["", "api", "v1", "cache", name, "purge"]) => {
            with_cache(live, name, |cache| purge(cache, body))
        }
        (Method::Get | Method::Head, ["", "api", "v1", "cache", name, "bans"]) => {
            with_cache(live, name, |cache| Ok(Response::json(200, &bans(cache))))
        }
        (Method::Post, ["", "api", "v1", "cache", name, "bans"]) => {
            with_cache(live, name, |cache| ban(cache, body))
        }
        (_, ["", "api", "v1", "cache", rest @ ..]) if rest.len() <= 2 => {
            let allow = match rest {
                [_, "purge"] => "POST",
                [_, "bans"] => "GET, HEAD, POST",
                _ => "GET, HEAD",
            };
            Err(Box::new(Response::method_not_allowed(allow)))
        }
        _ => return None,
    };
    Some(result.unwrap_or_else(|refusal| *refusal))
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

fn with_cache(
    live: &Live,
    name: &str,
    act: impl FnOnce(&Cache) -> Result<Response, Refusal>,
) -> Result<Response, Refusal> {
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

/// `{"url": ...}`, `{"prefix": ...}`, `{"tag": ...}` or `{"all": true}`: how many objects went.
fn purge(cache: &Cache, body: &[u8]) -> Result<Response, Refusal> {
    let request = object(body)?;
    let text = |key: &str| request.get(key).and_then(Value::as_str);
    let purged = if let Some(url) = text("url") {
        cache.purge_url(url).map_err(refused)?
    } else if let Some(prefix) = text("prefix") {
        cache.purge_prefix(prefix).map_err(refused)?
    } else if let Some(tag) = text("tag") {
        cache.purge_tag(tag)
    } else if request.get("all").and_then(Value::as_bool) == Some(true) {
        cache.purge_all()
    } else {
        return Err(Box::new(Response::error(
            400,
            "expected {\"url\": \"http://host/path\"}, {\"prefix\": \"http://host/dir/\"}, \
             {\"tag\": \"name\"} or {\"all\": true}",
        )));
    };
    Ok(Response::json(200, &json!({ "purged": purged })))
}

/// `{"pattern": "regex over http://host/path?query"}`: bans what is stored now.
fn ban(cache: &Cache, body: &[u8]) -> Result<Response, Refusal> {
    let request = object(body)?;
    let Some(pattern) = request.get("pattern").and_then(Value::as_str) else {
        return Err(Box::new(Response::error(
            400,
            "expected {\"pattern\": \"regular expression over http://host/path?query\"}",
        )));
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

fn object(body: &[u8]) -> Result<serde_json::Map<String, Value>, Refusal> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(Box::new(Response::error(
            400,
            "the body must be a JSON object",
        ))),
        Err(error) => Err(Box::new(Response::error(
            400,
            format!("invalid JSON: {error}"),
        ))),
    }
}

fn refused(error: PurgeError) -> Refusal {
    let status = match error {
        PurgeError::TooManyBans(_) => 429,
        PurgeError::Url(_) | PurgeError::Pattern(_) => 400,
    };
    Box::new(Response::error(status, error.to_string()))
}
