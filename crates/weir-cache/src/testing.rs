//! Owned requests and responses that implement the views, for tests and
//! benchmarks here and in the crates that call the cache.

use crate::view::{RequestView, ResponseView, Scheme};

/// A request: method, scheme, authority, path and query, headers.
#[derive(Debug, Clone)]
pub struct Req {
    /// The method token.
    pub method: String,
    /// `http` or `https`.
    pub scheme: Scheme,
    /// `Host`; `None`: the request has none.
    pub authority: Option<String>,
    /// Path and query.
    pub path: String,
    /// Header fields, in order.
    pub headers: Vec<(String, String)>,
}

/// A response head: status and headers.
#[derive(Debug, Clone)]
pub struct Resp {
    /// The status code.
    pub status: u16,
    /// Header fields, in order.
    pub headers: Vec<(String, String)>,
}

impl Req {
    /// `GET path` to `http://example.com`.
    pub fn get(path: &str) -> Req {
        Req::new("GET", path)
    }

    /// A request with `method` and `path` over `http`, to `example.com`, without headers.
    pub fn new(method: &str, path: &str) -> Req {
        Req {
            method: method.to_owned(),
            scheme: Scheme::Http,
            authority: Some("example.com".to_owned()),
            path: path.to_owned(),
            headers: Vec::new(),
        }
    }

    /// Adds a header field.
    pub fn header(mut self, name: &str, value: &str) -> Req {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sets the authority.
    pub fn authority(mut self, authority: &str) -> Req {
        self.authority = Some(authority.to_owned());
        self
    }

    /// Removes the authority.
    pub fn no_authority(mut self) -> Req {
        self.authority = None;
        self
    }

    /// Makes the scheme `https`.
    pub fn https(mut self) -> Req {
        self.scheme = Scheme::Https;
        self
    }
}

impl Resp {
    /// A response with `status` and no header fields.
    pub fn new(status: u16) -> Resp {
        Resp {
            status,
            headers: Vec::new(),
        }
    }

    /// Adds a header field.
    pub fn header(mut self, name: &str, value: &str) -> Resp {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

impl RequestView for Req {
    fn method(&self) -> &[u8] {
        self.method.as_bytes()
    }

    fn scheme(&self) -> Scheme {
        self.scheme
    }

    fn authority(&self) -> Option<&[u8]> {
        self.authority.as_deref().map(str::as_bytes)
    }

    fn path_and_query(&self) -> &[u8] {
        self.path.as_bytes()
    }

    fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.headers
            .iter()
            .map(|(name, value)| (name.as_bytes(), value.as_bytes()))
    }
}

impl ResponseView for Resp {
    fn status(&self) -> u16 {
        self.status
    }

    fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.headers
            .iter()
            .map(|(name, value)| (name.as_bytes(), value.as_bytes()))
    }
}
